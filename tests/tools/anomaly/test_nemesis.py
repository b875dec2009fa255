"""The nemesis's contract with what it faults: every fault is recorded at both ends and healed,
and the faults a target cannot take are refused up front."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tools.anomaly.history import Recorder, read_lines
from tools.anomaly.nemesis import FAULTS, Nemesis


class Node:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def kill(self) -> None:
        self.calls.append("kill")

    def start(self) -> object:
        self.calls.append("start")
        return self

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


class IsolatableNode(Node):
    def isolate(self) -> None:
        self.calls.append("isolate")

    def heal(self) -> None:
        self.calls.append("heal")


class Clients:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.consumers = ["consumer-0", "consumer-1"]

    def names(self) -> list[str]:
        return ["producer-0", *self.consumers]

    def kill(self, name: str) -> None:
        self.calls.append(f"kill {name}")

    def pause(self, name: str) -> None:
        self.calls.append(f"pause {name}")

    def resume(self, name: str) -> None:
        self.calls.append(f"resume {name}")

    def add_consumer(self) -> str:
        self.consumers.append(f"consumer-{len(self.consumers)}")
        return self.consumers[-1]

    def remove_consumer(self) -> str | None:
        return self.consumers.pop() if len(self.consumers) > 1 else None


def nemesis(tmp_path: Path, node: Node, clients: Clients, faults: tuple[str, ...] = FAULTS) -> Nemesis:
    recorder = Recorder.open(tmp_path / "nemesis.jsonl", "nemesis", "nemesis")
    return Nemesis([node], clients, recorder, faults, interval=(0.0, 0.0), hold=(0.0, 0.0), seed=1)


def test_each_fault_is_injected_healed_and_recorded(tmp_path: Path) -> None:
    node, clients = Node(), Clients()
    chaos = nemesis(tmp_path, node, clients)
    for fault in FAULTS:
        chaos.run_fault(fault)
    chaos.rec.close()
    assert node.calls == ["kill", "start", "pause", "resume"]
    killed = [call for call in clients.calls if call.startswith("kill")]
    paused = [call.split()[1] for call in clients.calls if call.startswith("pause")]
    resumed = [call.split()[1] for call in clients.calls if call.startswith("resume")]
    assert len(killed) == 1 and paused == resumed and len(paused) == 1
    ops = read_lines(tmp_path / "nemesis.jsonl")
    assert [(op.fields["fault"], op.fields["phase"]) for op in ops] == [
        (fault, phase) for fault in FAULTS for phase in ("start", "end")
    ]
    assert chaos.count == len(FAULTS)


def test_a_running_nemesis_stops_with_everything_healed(tmp_path: Path) -> None:
    node, clients = Node(), Clients()
    chaos = nemesis(tmp_path, node, clients, ("kill-broker", "pause-broker")).start()
    deadline = time.monotonic() + 30
    while chaos.count < 3:
        assert time.monotonic() < deadline, "the nemesis ran no 3 faults in 30 s"
        time.sleep(0.01)
    chaos.stop()
    chaos.rec.close()
    assert node.calls.count("kill") == node.calls.count("start")
    assert node.calls.count("pause") == node.calls.count("resume")


def test_faults_a_target_cannot_take_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        nemesis(tmp_path, Node(), Clients(), ("kill-broker", "flood"))
    with pytest.raises(ValueError, match="isolate"):
        nemesis(tmp_path, Node(), Clients(), ("partition-node",))
    node = IsolatableNode()
    chaos = nemesis(tmp_path, node, Clients(), ("partition-node",))
    chaos.run_fault("partition-node")
    assert node.calls == ["isolate", "heal"]
