"""The workload runner: topic, client processes, nemesis, final read, merged history.

``run_workload`` creates a topic, starts the client processes (``tools/anomaly/client.py``), lets
the nemesis fault things for ``duration`` seconds, stops the clients (SIGTERM: each ends its
transaction and exits; SIGKILL after a grace period), waits until no transaction is open on any
partition (the coordinator aborts what killed clients left open), reads every partition from
its beginning with read_committed, and merges every process's history into ``history.jsonl``.

Partitions: transactional client ``i`` (SDK ones first, then confluent-kafka ones) owns
partitions ``2i`` and ``2i + 1`` (it alone writes transactions there, so any dependency cycle
between transactions is an anomaly, see ``cycles.py``); idempotent producers write everywhere;
the last two partitions get only non-transactional writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sdk import Consumer, KafkaClient, TopicPartition
from sdk.errors import KafkaError
from sdk.protocol import messages
from tools.anomaly.history import Op, Recorder, merge, read_lines, write_history
from tools.anomaly.nemesis import FAULTS, Nemesis, Node

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 30.0
STABLE_TIMEOUT_S = 90.0
MIN_FAULTS_GRACE_S = 180.0


@dataclass
class WorkloadConfig:
    duration: float = 60.0
    producers: int = 2
    confluent_producers: int = 1
    txn_clients: int = 2
    confluent_txn_clients: int = 1
    consumers: int = 2
    faults: Sequence[str] = FAULTS
    fault_interval: tuple[float, float] = (2.0, 5.0)
    fault_hold: tuple[float, float] = (0.5, 3.0)
    seed: int | None = None
    #: Keep going past ``duration`` until the nemesis injected this many faults (at most
    #: ``MIN_FAULTS_GRACE_S`` longer): with slow restarts a short run could miss a fault kind.
    min_faults: int = 0
    #: The topic's replicas; on a cluster, with ``min_insync_replicas`` below it, one node may be
    #: down, paused or cut off while acks=all writes still succeed.
    replication_factor: int = 1
    min_insync_replicas: int | None = None

    @property
    def partitions(self) -> int:
        return 2 * (self.txn_clients + self.confluent_txn_clients) + 2


class ClientProcesses:
    """The client processes (a ``ClientPool`` for the nemesis): start, SIGKILL and start a new
    incarnation, SIGSTOP/SIGCONT, add or remove group consumers, stop them all."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, run_dir: Path) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.run_dir = run_dir
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._roles: dict[str, tuple[str, str]] = {}  # client -> (role, own partitions)
        self._incarnations: dict[str, int] = {}
        self._lock = threading.Lock()
        self._consumers = 0
        self.restarts = 0

    def launch(self, client: str, role: str, own: str = "") -> None:
        with self._lock:
            self._roles[client] = (role, own)
            self._start(client)

    def _start(self, client: str) -> None:
        role, own = self._roles[client]
        incarnation = self._incarnations.get(client, 0) + 1
        self._incarnations[client] = incarnation
        process = f"{client}.{incarnation}"
        command = [
            sys.executable,
            "-m",
            "tools.anomaly.client",
            "--role",
            role,
            "--client",
            client,
            "--process",
            process,
            "--bootstrap",
            self.bootstrap,
            "--topic",
            self.topic,
            "--partitions",
            str(self.partitions),
            "--history",
            str(self.run_dir / f"{process}.jsonl"),
        ]
        if own:
            command += ["--own", own]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
        with open(self.run_dir / f"{process}.log", "wb") as log:
            self._procs[client] = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._procs)

    def kill(self, name: str) -> None:
        with self._lock:
            proc = self._procs[name]
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            self.restarts += 1
            self._start(name)

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, signum: int) -> None:
        with self._lock:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def add_consumer(self) -> str:
        with self._lock:
            self._consumers += 1
            name = f"consumer-{self._consumers - 1}"
            self._roles[name] = ("consumer", "")
            self._start(name)
            return name

    def remove_consumer(self) -> str | None:
        with self._lock:
            consumers = sorted(name for name in self._procs if self._roles[name][0] == "consumer")
            if len(consumers) <= 1:
                return None
            name = consumers[-1]
            proc = self._procs.pop(name)
        _terminate(proc)
        return name

    def restart_exited(self) -> list[str]:
        """Start again clients whose process ended by itself (a crash: its log says why)."""
        with self._lock:
            crashed = [name for name, proc in self._procs.items() if proc.poll() is not None]
            for name in crashed:
                self._start(name)
            return crashed

    def stop_all(self) -> None:
        with self._lock:
            procs = list(self._procs.values())
            self._procs.clear()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            _terminate(proc)


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 60.0,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
) -> None:
    """CreateTopics, retried until the broker answers and every partition has a leader."""
    configs = [] if min_insync_replicas is None else [
        messages.CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(
            name="min.insync.replicas", value=str(min_insync_replicas)
        )
    ]
    deadline = time.monotonic() + timeout
    while True:
        client = KafkaClient(bootstrap)
        try:
            await client.start()
            request = messages.CreateTopicsRequest(
                topics=[
                    messages.CreateTopicsRequest.CreatableTopic(
                        name=topic,
                        num_partitions=partitions,
                        replication_factor=replication_factor,
                        configs=configs,
                    )
                ],
                timeout_ms=10_000,
            )
            response = await client.send_to_any(request)
            code = response.topics[0].error_code
            if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS (a retried request)
                raise RuntimeError(f"CreateTopics {topic}: error code {code}")
            waiter = client.add_topic(topic)
            if waiter is not None:
                await waiter
            while True:
                meta = client.cluster.topic(topic)
                if meta is not None and len(meta.available) == partitions:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {topic} has no leader for every partition")
                await asyncio.sleep(0.1)
                await client.refresh_metadata()
        except (KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
        finally:
            await client.close()


async def final_read(
    bootstrap: str, topic: str, partitions: int, timeout: float = STABLE_TIMEOUT_S
) -> dict[str, list[list[object]]]:
    """Every partition read with read_committed from its beginning to its end, once no
    transaction is open on it any more (last stable offset == high watermark)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout
    committed = Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=5000,
    )
    uncommitted = Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
    async with committed, uncommitted:
        ends = await _stable_ends(committed, uncommitted, tps, deadline)
        committed.assign(tps)
        await committed.seek_to_beginning(*tps)
        found: dict[str, list[list[object]]] = {str(p): [] for p in range(partitions)}
        while True:
            positions = [await committed.position(tp) for tp in tps]
            if all(position >= ends[tp] for position, tp in zip(positions, tps, strict=True)):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"final read did not reach the end offsets {ends} in time")
            batches = await committed.getmany(timeout_ms=500)
            for tp, records in batches.items():
                found[str(tp.partition)] += [[r.offset, r.value.decode()] for r in records]


async def _stable_ends(
    committed: Consumer, uncommitted: Consumer, tps: list[TopicPartition], deadline: float
) -> dict[TopicPartition, int]:
    """The end offsets once the last stable offset of every partition is its high watermark."""
    while True:
        try:
            stable = await committed.end_offsets(tps)
            high = await uncommitted.end_offsets(tps)
        except KafkaError:
            stable, high = {}, {}
        if stable and stable == high:
            return stable
        if time.monotonic() > deadline:
            still_open = {tp.partition: (stable.get(tp), high.get(tp)) for tp in tps}
            raise TimeoutError(f"transactions still open at the deadline (lso, hw): {still_open}")
        await asyncio.sleep(0.5)


@dataclass
class RunResult:
    history: list[Op]
    history_path: Path
    seconds: float
    faults: int
    client_restarts: int
    crashed: list[str]


def run_workload(bootstrap: str, nodes: Sequence[Node], run_dir: Path, config: WorkloadConfig) -> RunResult:
    """Run the workload against ``bootstrap`` with faults on ``nodes``; the merged history is
    written to ``run_dir / "history.jsonl"``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    topic = f"anomaly-{uuid.uuid4().hex[:8]}"
    partitions = config.partitions
    asyncio.run(create_topic(
        bootstrap, topic, partitions,
        replication_factor=config.replication_factor, min_insync_replicas=config.min_insync_replicas,
    ))
    clients = ClientProcesses(bootstrap, topic, partitions, run_dir)
    for i in range(config.producers):
        clients.launch(f"producer-{i}", "producer")
    for i in range(config.confluent_producers):
        clients.launch(f"ck-producer-{i}", "ck-producer")
    for i in range(config.txn_clients):
        clients.launch(f"txn-{i}", "txn", f"{2 * i},{2 * i + 1}")
    for i in range(config.txn_clients, config.txn_clients + config.confluent_txn_clients):
        clients.launch(f"ck-txn-{i}", "ck-txn", f"{2 * i},{2 * i + 1}")
    for _ in range(config.consumers):
        clients.add_consumer()
    nemesis_rec = Recorder.open(run_dir / "nemesis.jsonl", "nemesis", "nemesis")
    nemesis = Nemesis(
        nodes, clients, nemesis_rec, config.faults, config.fault_interval, config.fault_hold, config.seed
    )
    crashed: list[str] = []
    try:
        nemesis.start()
        end = time.monotonic() + config.duration
        while time.monotonic() < end or (
            nemesis.count < config.min_faults and time.monotonic() < end + MIN_FAULTS_GRACE_S
        ):
            time.sleep(0.5)
            crashed += clients.restart_exited()
    finally:
        try:
            nemesis.stop()
        finally:
            nemesis_rec.close()
            clients.stop_all()
    reader = Recorder.open(run_dir / "final-reader.jsonl", "final-reader", "final-reader")
    try:
        reader.record("ok", "final-read", partitions=asyncio.run(final_read(bootstrap, topic, partitions)))
    finally:
        reader.close()
    histories = [
        read_lines(path, allow_torn_tail=True)
        for path in sorted(run_dir.glob("*.jsonl"))
        if path.name != "history.jsonl"
    ]
    history = merge(histories)
    history_path = run_dir / "history.jsonl"
    write_history(history_path, history)
    return RunResult(
        history, history_path, time.monotonic() - started, nemesis.count, clients.restarts, crashed
    )
