"""The cluster harness users get: ``python -m reference_broker cluster`` as a real command, and
``ClusterProcess``'s faults as the other nodes see them (a paused or isolated node is fenced, and
is back once resumed or healed), with every node process gone after ``close()``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reference_broker.cluster.launcher import BOOTSTRAP_PREFIX
from reference_broker.testing import ClusterFactory, request_metadata, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: only its parent's wait() removes it.
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def launch(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reference_broker", "cluster", "--data-dir", str(data_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def test_cluster_command_prints_a_working_bootstrap_list_and_stops_every_node(tmp_path: Path) -> None:
    command = launch(tmp_path, "--nodes", "3")
    try:
        assert command.stdout is not None
        first = command.stdout.readline()  # printed only once every broker is registered
        assert first.startswith(BOOTSTRAP_PREFIX), (first, command.stderr.read() if command.poll() else "")
        bootstrap = first[len(BOOTSTRAP_PREFIX):].strip().split(",")
        assert [b.rpartition(":")[0] for b in bootstrap] == ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
        node_lines = [command.stdout.readline() for _ in range(3)]
        pids = [int(line.split(" pid ")[1].split()[0]) for line in node_lines]
        for address in bootstrap:
            assert {b.node_id for b in request_metadata(address).brokers} == {1, 2, 3}
        command.send_signal(signal.SIGTERM)
        assert command.wait(30) == 0
        wait_until(lambda: not any(alive(pid) for pid in pids), "every node process is gone")
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    # The same data dir is the same cluster: it keeps its cluster id on a second run.
    ids = {(tmp_path / f"node-{n}" / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
           for n in (1, 2, 3)}
    assert len(ids) == 1


def test_cluster_command_exits_nonzero_with_the_failing_nodes_log(tmp_path: Path) -> None:
    command = launch(tmp_path, "--nodes", "2", "--override", "num.partitions=none")
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 1
    assert "node 1" in stderr and "num.partitions" in stderr, stderr


def test_paused_and_isolated_nodes_are_fenced_and_come_back(reference_cluster: ClusterFactory) -> None:
    cluster = reference_cluster(3)

    def brokers_seen_by(node_id: int) -> set[int]:
        return cluster.registered_brokers(via=node_id)

    cluster.pause(3)
    wait_until(lambda: brokers_seen_by(1) == {1, 2}, "paused node 3 is fenced")
    cluster.resume(3)
    wait_until(lambda: brokers_seen_by(1) == {1, 2, 3}, "resumed node 3 is unfenced")

    cluster.isolate(2)
    wait_until(lambda: brokers_seen_by(1) == {1, 3}, "isolated node 2 is fenced")
    with pytest.raises(OSError):
        request_metadata(cluster.node(2).bootstrap, timeout=2)  # clients are cut off too
    cluster.heal(2)
    wait_until(lambda: brokers_seen_by(2) == {1, 2, 3}, "healed node 2 is back")

    cluster.pause(1)
    pids = [node.pid for node in cluster.nodes]
    cluster.close()
    assert not any(alive(pid) for pid in pids if pid is not None)
