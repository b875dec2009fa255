"""Faults injected while the workload runs: broker kills and pauses, client kills and pauses,
rebalances.

The nemesis acts on ``Node``s (anything with ``kill``/``start``/``pause``/``resume``: one broker,
or each node of a cluster) and on a ``ClientPool`` (the workload's client processes). A cluster
adds network faults by giving its nodes ``isolate``/``heal`` (``Isolatable``); the
``partition-node`` fault is then offered for them. Any node may be hit: over a run the faults reach
partition leaders, followers, coordinators and the active controller alike. Every fault is
recorded in the history as two ``nemesis`` ops (``phase`` start and end) by the process
``nemesis``, and every fault is healed before the next one starts and when the nemesis stops (a
stopped nemesis leaves every node running and no process paused).
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from reference_broker.testing import BrokerProcess, ClusterProcess
from tools.anomaly.history import Recorder

FAULTS = ("kill-broker", "pause-broker", "kill-client", "pause-client", "rebalance")
#: Faults only nodes that are ``Isolatable`` take (a cluster behind its proxy).
NETWORK_FAULTS = ("partition-node",)


class Node(Protocol):
    """One server process the nemesis may crash or freeze (``KafkaNode`` is one as it is)."""

    def kill(self) -> None: ...
    def start(self) -> object: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...


@runtime_checkable
class Isolatable(Protocol):
    """A node that can be cut off from its peers and clients, and reconnected."""

    def isolate(self) -> None: ...
    def heal(self) -> None: ...


class ClientPool(Protocol):
    """The workload's client processes, as the nemesis sees them."""

    def names(self) -> list[str]: ...
    def kill(self, name: str) -> None: ...  # SIGKILL, then a new incarnation
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def add_consumer(self) -> str: ...
    def remove_consumer(self) -> str | None: ...


class ReferenceBrokerNode:
    """A ``BrokerProcess`` as a ``Node`` (SIGSTOP/SIGCONT for pause/resume)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker

    def kill(self) -> None:
        self.resume()  # a stopped process must be able to die and be reaped
        self.broker.kill()

    def start(self) -> object:
        return self.broker.start()

    def pause(self) -> None:
        if self.broker.pid is not None:
            os.kill(self.broker.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.broker.pid is not None:
            os.kill(self.broker.pid, signal.SIGCONT)


class ReferenceClusterNode:
    """Node ``node_id`` of a ``ClusterProcess`` as a ``Node`` and ``Isolatable``: SIGKILL and a
    restart on the same data and ports, SIGSTOP/SIGCONT, and cut off from the other nodes and from
    clients (both ways, connections reset) through the cluster's proxy."""

    def __init__(self, cluster: ClusterProcess, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def kill(self) -> None:
        self.cluster.kill(self.node_id)

    def start(self) -> object:
        return self.cluster.start_node(self.node_id)

    def pause(self) -> None:
        self.cluster.pause(self.node_id)

    def resume(self) -> None:
        self.cluster.resume(self.node_id)

    def isolate(self) -> None:
        self.cluster.isolate(self.node_id)

    def heal(self) -> None:
        self.cluster.heal(self.node_id)


def cluster_nodes(cluster: ClusterProcess) -> list[ReferenceClusterNode]:
    """Every node of ``cluster`` as the nemesis's target."""
    return [ReferenceClusterNode(cluster, node.node_id) for node in cluster.nodes]


class Nemesis:
    """Runs faults from ``faults`` one after the other, ``interval`` seconds apart, in a thread:
    rounds of every fault once, each round in a random order (so ``len(faults)`` faults cover them
    all).

    ``hold`` is how long a fault lasts (a killed broker stays down, a paused process stays
    stopped) before it is healed; seconds are drawn from the range.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        clients: ClientPool,
        recorder: Recorder,
        faults: Sequence[str] = FAULTS,
        interval: tuple[float, float] = (2.0, 5.0),
        hold: tuple[float, float] = (0.5, 3.0),
        seed: int | None = None,
    ) -> None:
        unknown = set(faults) - set(FAULTS) - set(NETWORK_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS + NETWORK_FAULTS)}")
        if "partition-node" in faults and not all(isinstance(node, Isolatable) for node in nodes):
            raise ValueError("partition-node needs nodes that can isolate() and heal()")
        self.nodes = list(nodes)
        self.clients = clients
        self.rec = recorder
        self.faults = list(faults)
        self.interval = interval
        self.hold = hold
        self.rng = random.Random(seed)
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Nemesis:
        if self.faults:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after healing the fault in progress; raise what the nemesis thread failed with."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"nemesis failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            while True:
                for fault in self.rng.sample(self.faults, len(self.faults)):
                    if self._stop.wait(self.rng.uniform(*self.interval)):
                        return
                    self.run_fault(fault)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def run_fault(self, fault: str) -> None:
        """Inject one fault, hold it, heal it (also callable directly, for a scripted schedule)."""
        inject, heal, target = self._plan(fault)
        if target is None:
            return
        self.count += 1
        self.rec.record("info", "nemesis", fault=fault, target=target, phase="start")
        try:
            inject()
            self._stop.wait(self.rng.uniform(*self.hold))
        finally:
            heal()
            self.rec.record("info", "nemesis", fault=fault, target=target, phase="end")

    def _plan(self, fault: str) -> tuple[Callable[[], object], Callable[[], object], str | None]:
        nothing: Callable[[], object] = lambda: None  # noqa: E731
        if fault in ("kill-broker", "pause-broker", "partition-node"):
            index = self.rng.randrange(len(self.nodes))
            node = self.nodes[index]
            target = f"node-{index}"
            if fault == "kill-broker":
                return node.kill, node.start, target
            if fault == "pause-broker":
                return node.pause, node.resume, target
            assert isinstance(node, Isolatable)
            return node.isolate, node.heal, target
        names = self.clients.names()
        if fault == "rebalance":
            if self.rng.random() < 0.5:
                added = self.clients.add_consumer()
                return nothing, nothing, f"+{added}"
            removed = self.clients.remove_consumer()
            return nothing, nothing, (f"-{removed}" if removed else None)
        if not names:
            return nothing, nothing, None
        name = self.rng.choice(names)
        if fault == "kill-client":
            return (lambda: self.clients.kill(name)), nothing, name
        return (lambda: self.clients.pause(name)), (lambda: self.clients.resume(name)), name
