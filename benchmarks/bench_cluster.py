"""The replicated reference cluster next to a 3-node Apache Kafka cluster: produce throughput,
end-to-end latency and leader failover, with the same clients on both.

Each broker runs as three combined (broker and controller) nodes on loopback: ours as
``reference_broker.testing.ClusterProcess`` (without its fault-injection proxy, so clients talk
to the nodes directly), Kafka as ``tests/apache_kafka.py``'s ``KafkaCluster`` (through
``_kafka``), both with the settings of ``CLUSTER_CONFIG``: replication factor 3,
``min.insync.replicas=2``, no unclean leader election, and the same broker heartbeat and session
timeout, so a dead node is fenced after the same time on both. Every measurement gets a fresh
topic. Per run and broker:

1. produce throughput: ``--messages`` records of 100 bytes, acks=all, idempotent, over
   ``--partitions`` partitions (their leaders spread over the nodes), once with confluent-kafka
   (the same client on both brokers, so the broker is what differs) and once with this SDK's
   producer; records/s and MB/s of payload, each client in a fresh process whose clock starts
   once it has its producer id and a first record acknowledged by every partition.
2. end-to-end latency: confluent-kafka producing ``--rate`` records a second (acks=all,
   idempotent, linger 0) to a one-partition topic and a consumer in the same process, for
   ``--latency-seconds`` after ``--latency-warm-up`` seconds left out of the figures; p50 and
   p99 from the send call to the consumer's hands (``bench_latency.py``'s confluent-kafka
   worker, reused as is).
3. failover: an idempotent acks=all confluent-kafka producer sends ``--failover-rate`` records
   a second to a one-partition topic; after ``--failover-warm-up`` seconds the partition's
   leader (asked with a Metadata request) is killed with SIGKILL, and the producer goes on
   until it has kept up with its schedule for a second, or for ``--failover-window`` seconds
   at most. Measured from the kill: *first ack*, the first record acknowledged by the new
   leader (a record whose stored batch carries a leader epoch above the one of the records
   acknowledged before the kill; responses the old leader sent before it died do not count),
   and *rate back*, the first moment from then on at which every record sent more than
   ``CAUGHT_UP_LAG_S`` earlier is acknowledged (the backlog of the outage is cleared and the
   producer keeps pace with its schedule again). The topic is then read back from its start:
   every acknowledged record must be stored exactly once, at the offset it was acknowledged
   with; the counts are printed and any loss, duplicate or moved offset fails the run (exit
   status 1, after the table). The killed node is started again before the next run.
4. replication's cost: confluent-kafka's throughput run again on a topic with one replica per
   partition (``min.insync.replicas`` 1), and per run the ratio of the RF=3 figure to it (the
   issue's target: RF=3 at least half of RF=1, with 8 partitions: ``--partitions 8``).

Both clusters are up for the whole measurement and take turns run by run (``measure_all``). The
table gives per measure the median over ``--runs`` runs on each broker, the runs' spread
(``_common.spread``) and the ratio reference/kafka of the medians; for records/s and MB/s a ratio
above 1 means the reference cluster is faster, for latencies and failover times that it is
slower. Each broker first gets an untimed throughput run of each client (``--warm-up-messages``;
Kafka's JVM compiles its hot paths as it runs). Per-run figures go to stderr as they come.

    python benchmarks/bench_cluster.py [--messages 200000] [--runs 3] [--brokers reference,kafka]
                                       [--partitions 3] [--rate 1000] [--failover-rate 2000]
                                       [--small]

``--small`` is the smallest workload that still takes every measure (the smoke test's); Kafka's
nodes then run with the client compiler only, which starts them sooner and makes no figure of
that mode worth quoting.
``--brokers`` defaults to both; Kafka needs Java and Maven and is left out, with a message on
stderr, without them.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, run_in_process, spread, spread_name

BROKERS = ["reference", "kafka"]
THROUGHPUT_CLIENTS = ["confluent-kafka", "sdk"]
RECORD_BYTES = 100
VALUE = b"x" * RECORD_BYTES
#: A failover record: its index in the run, then padding to RECORD_BYTES.
INDEX = struct.Struct(">q")
PADDING = b"f" * (RECORD_BYTES - INDEX.size)
#: Settings of every node of both clusters.
CLUSTER_CONFIG: dict[str, Any] = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "unclean.leader.election.enable": "false",
    "broker.heartbeat.interval.ms": 500,
    "broker.session.timeout.ms": 3000,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 0,
}
#: "Rate back" once every record sent longer ago than this is acknowledged.
CAUGHT_UP_LAG_S = 0.2
#: How long the failover producer goes on after the kill once it keeps up with its schedule.
SETTLED_S = 1.0
#: How long a worker may take to hand in what it found.
WORKER_TIMEOUT_S = 300.0
SMALL = {
    "messages": 2000, "warm_up_messages": 0, "rate": 200.0, "latency_seconds": 1.0, "latency_warm_up": 0.2,
    "failover_rate": 300.0, "failover_warm_up": 0.5, "failover_window": 30.0,
}
DEFAULTS = {
    "messages": 200_000, "warm_up_messages": 50_000, "rate": 1000.0, "latency_seconds": 5.0,
    "latency_warm_up": 1.0, "failover_rate": 2000.0, "failover_warm_up": 3.0, "failover_window": 30.0,
}


# -- the workers (each runs in a process of its own) ----------------------------------------------


def _produce_confluent(bootstrap: str, topic: str, messages: int, partitions: int) -> float:
    import confluent_kafka as ck

    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    for partition in range(partitions):  # producer id, connections and metadata before the clock
        producer.produce(topic, VALUE, partition=partition)
    if producer.flush(60):
        raise RuntimeError("the warm-up records were not delivered")
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(WORKER_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"produce failed: {remaining} undelivered, errors {failures[:3]}")
    return elapsed


async def _produce_sdk(bootstrap: str, topic: str, messages: int, partitions: int) -> float:
    from sdk import Producer

    async with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=1_000_000
    ) as producer:
        assert producer.config.idempotent
        await asyncio.gather(*[producer.send_and_wait(topic, VALUE, partition=p) for p in range(partitions)])
        start = time.perf_counter()
        send = producer.send
        for i in range(messages):
            await send(topic, VALUE, partition=i % partitions)
        await producer.flush()
        return time.perf_counter() - start


def _failover_producer(bootstrap: str, topic: str, rate: float, window: float) -> dict[str, Any]:
    """Sends numbered records on a schedule (``i / rate`` seconds after the start), noting when
    each was sent and when and at which offset it was acknowledged, until it has kept up with
    its schedule (see ``caught_up``) for ``SETTLED_S`` after the kill the driver reports on
    stdin (``killed <monotonic>``), or ``window`` seconds after it at the latest. Prints
    ``ready`` once the first record is acknowledged. ``time.monotonic`` is one clock for every
    process of the machine, the driver's included."""
    import confluent_kafka as ck

    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    sent: list[float] = []
    acked: list[tuple[int, int, float]] = []
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        now = time.monotonic()
        if err is not None:
            failures.append(str(err))
        else:
            acked.append((INDEX.unpack_from(msg.value())[0], msg.offset(), now))

    def send(index: int) -> None:
        sent.append(time.monotonic())
        producer.produce(topic, INDEX.pack(index) + PADDING, partition=0, on_delivery=on_delivery)

    send(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"the first record was not delivered: {failures[:3]}")
    print("ready", flush=True)
    killed_at: list[float] = []

    def read_kill() -> None:
        line = sys.stdin.readline().split()
        if len(line) != 2 or line[0] != "killed":
            raise RuntimeError(f"expected 'killed <time>' from the driver, got {line!r}")
        killed_at.append(float(line[1]))

    threading.Thread(target=read_kill, daemon=True).start()
    start = time.monotonic()
    index = 1
    def caught_up(now: float) -> bool:
        """Every record sent up to ``CAUGHT_UP_LAG_S`` ago is acknowledged: right after the
        kill never true, as the records sent after it wait for the new leader."""
        return len(acked) >= bisect.bisect_right(sent, now - CAUGHT_UP_LAG_S)

    settled_from = None
    while True:
        due = start + index / rate
        now = time.monotonic()
        if killed_at and now >= killed_at[0] + SETTLED_S:
            settled_from = (settled_from or now) if caught_up(now) else None
            settled = settled_from is not None and now - settled_from >= SETTLED_S
            if settled or now >= killed_at[0] + window:
                break
        if now >= due:
            send(index)
            index += 1
            producer.poll(0)
        else:
            producer.poll(min(due - now, 0.05))
    remaining = producer.flush(WORKER_TIMEOUT_S)
    return {"sent": sent, "acked": acked, "failures": failures[:5], "failed": len(failures),
            "undelivered": remaining, "killed_at": killed_at[0]}


def run_worker(args: argparse.Namespace) -> None:
    """The worker process: one measurement, its result as JSON on the last line."""
    result: Any
    if args.worker == "produce-confluent-kafka":
        result = _produce_confluent(args.bootstrap, args.topic, args.messages, args.partitions)
    elif args.worker == "produce-sdk":
        result = asyncio.run(_produce_sdk(args.bootstrap, args.topic, args.messages, args.partitions))
    elif args.worker == "failover":
        result = _failover_producer(args.bootstrap, args.topic, args.failover_rate, args.failover_window)
    else:
        raise SystemExit(f"unknown worker {args.worker!r}")
    print(json.dumps(result))


# -- the two clusters -----------------------------------------------------------------------------


class ThreeNodes(Protocol):
    """What the measurements need of a running three-node cluster, ours or Kafka's."""

    bootstrap: str

    def addresses(self) -> list[str]: ...

    def kill(self, node_id: int) -> None: ...

    def bring_back(self, node_id: int) -> None: ...

    def log_tails(self) -> str: ...


class ReferenceNodes:
    def __init__(self) -> None:
        from reference_broker.testing import ClusterProcess

        self.cluster = ClusterProcess(3, {k: str(v) for k, v in CLUSTER_CONFIG.items()}, proxy=False)
        self.bootstrap = self.cluster.bootstrap

    def addresses(self) -> list[str]:
        return [node.bootstrap for node in self.cluster.nodes if node.running]

    def kill(self, node_id: int) -> None:
        self.cluster.kill(node_id)

    def bring_back(self, node_id: int) -> None:
        self.cluster.start_node(node_id)
        self.cluster.wait_until_registered()

    def log_tails(self) -> str:
        return "".join(f"--- node {n.node_id}:\n{n.log_tail(30)}\n" for n in self.cluster.nodes)


class KafkaNodes:
    def __init__(self, data_dir: Path, *, client_compiler: bool) -> None:
        from _kafka import KafkaCluster

        self.cluster = KafkaCluster(data_dir, 3, client_compiler=client_compiler, **CLUSTER_CONFIG)
        self.bootstrap = self.cluster.bootstrap

    def addresses(self) -> list[str]:
        return [node.bootstrap for node in self.cluster.nodes if node.running]

    def kill(self, node_id: int) -> None:
        self.cluster.node(node_id).kill()

    def bring_back(self, node_id: int) -> None:
        self.cluster.node(node_id).start()  # returns once it lists every node as registered

    def log_tails(self) -> str:
        return "".join(f"--- node {n.node_id}:\n{n.tail(30)}" for n in self.cluster.nodes)


@contextlib.contextmanager
def three_nodes(name: str, *, small: bool) -> Iterator[ThreeNodes]:
    """A started three-node cluster of broker ``name``, stopped (every node, by PID) on exit;
    ``small``: Kafka's JVMs run with the client compiler only, quicker to start, slower to run."""
    if name == "reference":
        reference = ReferenceNodes()
        with reference.cluster:
            yield reference
        return
    data_dir = Path(tempfile.mkdtemp(prefix="bench-kafka-cluster-"))
    kafka = KafkaNodes(data_dir, client_compiler=small)
    try:
        kafka.cluster.start()
        yield kafka
    finally:
        kafka.cluster.kill()  # thrown away: no controlled shutdown to wait for
        shutil.rmtree(data_dir, ignore_errors=True)


def create_topic(bootstrap: str, partitions: int, replication_factor: int = 3) -> str:
    """A fresh topic of ``partitions`` partitions, replication factor 3 and min.insync.replicas 2
    (or a replication factor of 1 and min.insync.replicas 1)."""
    import confluent_kafka.admin as ck_admin

    name = f"cluster-bench-{uuid.uuid4().hex[:12]}"
    min_isr = str(min(2, replication_factor))
    topic = ck_admin.NewTopic(name, partitions, replication_factor, config={"min.insync.replicas": min_isr})
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([topic])[name].result(60)
    wait_for(lambda: all(leader_of(bootstrap.split(","), name, p) for p in range(partitions)),
             f"{name} has a leader for every partition")
    return name


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """``condition()`` once it is true, polled; TimeoutError naming ``what`` after ``timeout`` s."""
    from reference_broker.testing import wait_until

    return wait_until(condition, what, timeout)


def leader_of(addresses: list[str], topic: str, partition: int) -> int | None:
    """The node leading ``topic``/``partition``, from a Metadata request to the first node of
    ``addresses`` that answers with one; None while none does."""
    from reference_broker.testing import request_metadata

    for address in addresses:
        try:
            response = request_metadata(address, [topic], timeout=2.0)
        except OSError:
            continue
        for found in response.topics:
            for part in found.partitions if found.name == topic and found.error_code == 0 else []:
                if part.partition_index == partition and part.error_code == 0 and part.leader_id >= 0:
                    return int(part.leader_id)
    return None


# -- the measurements -----------------------------------------------------------------------------


class FailoverRun(NamedTuple):
    first_ack_s: float
    rate_back_s: float
    acked: int
    stored: int
    lost: int
    duplicated: int
    moved: int  # acknowledged at one offset, stored at another


def measure_throughput(client: str, cluster: ThreeNodes, messages: int, partitions: int,
                       replication_factor: int = 3) -> float:
    """Records a second of one run of ``client`` (in a fresh process) on a fresh topic."""
    topic = create_topic(cluster.bootstrap, partitions, replication_factor)
    command = [
        os.path.abspath(__file__), "--worker", f"produce-{client}", "--bootstrap", cluster.bootstrap,
        "--topic", topic, "--messages", str(messages), "--partitions", str(partitions),
    ]
    return messages / float(run_in_process(client, command))


def measure_latency(
    cluster: ThreeNodes, rate: float, seconds: float, warm_up_s: float
) -> tuple[float, float]:
    """p50 and p99 ms of confluent-kafka's run of ``bench_latency.py`` on a fresh RF=3 topic."""
    from bench_latency import percentiles

    topic = create_topic(cluster.bootstrap, 1)
    warm_up = round(warm_up_s * rate)
    total = warm_up + max(2, round(seconds * rate))
    command = [
        os.path.join(ROOT, "benchmarks", "bench_latency.py"), "--worker", "confluent-kafka",
        "--bootstrap", cluster.bootstrap, "--topic", topic, "--rate", str(rate),
        "--records", str(total), "--warm-up-records", str(warm_up),
    ]
    return percentiles(run_in_process("confluent-kafka", command)["latency_ms"])


def measure_failover(cluster: ThreeNodes, args: argparse.Namespace, *, bring_back: bool) -> FailoverRun:
    """One failover run (see the module's docstring); with ``bring_back`` the killed node is
    running again after it (the next run's topic needs three replicas)."""
    topic = create_topic(cluster.bootstrap, 1)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [
        sys.executable, os.path.abspath(__file__), "--worker", "failover", "--bootstrap",
        cluster.bootstrap, "--topic", topic, "--failover-rate", str(args.failover_rate),
        "--failover-window", str(args.failover_window),
    ]
    worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert worker.stdin is not None and worker.stdout is not None
    try:
        if worker.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the failover producer did not start:\n{worker.communicate()[1][-3000:]}")
        time.sleep(args.failover_warm_up)  # the producer's steady state before the kill
        victim = wait_for(lambda: leader_of(cluster.addresses(), topic, 0), f"{topic}-0 has a leader")
        killed_at = time.monotonic()
        cluster.kill(victim)
        worker.stdin.write(f"killed {killed_at!r}\n")
        worker.stdin.flush()
        out, err = worker.communicate(timeout=args.failover_window + WORKER_TIMEOUT_S)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    if worker.returncode != 0:
        raise RuntimeError(f"the failover producer failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    if result["failed"] or result["undelivered"]:
        raise RuntimeError(
            f"{result['failed']} records failed, {result['undelivered']} undelivered: {result['failures']}"
        )
    stored = read_back(cluster.addresses(), topic)
    if bring_back:
        cluster.bring_back(victim)
    return failover_figures(result, stored)


def read_back(addresses: list[str], topic: str) -> list[tuple[int, int, int]]:
    """Every record of ``topic``'s partition 0 up to its high watermark: (offset, index, leader
    epoch of its batch)."""
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {"bootstrap.servers": ",".join(addresses), "group.id": f"bench-read-{uuid.uuid4().hex}",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )
    try:
        _, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        stored: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while (not stored or stored[-1][0] < high - 1) and high > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(stored)} records of {topic}, up to offset {high} expected")
            for message in consumer.consume(10_000, timeout=1.0):
                error, value, offset = message.error(), message.value(), message.offset()
                if error is None and value is not None and offset is not None:
                    epoch = message.leader_epoch()
                    stored.append((offset, INDEX.unpack_from(value)[0], -1 if epoch is None else epoch))
                elif error is None or error.code() != ck.KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"read back failed: {error or 'a record without a value'}")
        return stored
    finally:
        consumer.close()


def failover_figures(result: dict[str, Any], stored: list[tuple[int, int, int]]) -> FailoverRun:
    """The failover times and the loss/duplicate counts of one run (see the module's docstring)."""
    killed_at = result["killed_at"]
    acked = {index: (offset, at) for index, offset, at in result["acked"]}
    stored_at: dict[int, tuple[int, int]] = {}
    duplicated = 0
    for offset, index, epoch in stored:
        if index in stored_at:
            duplicated += 1
        else:
            stored_at[index] = (offset, epoch)
    lost = sum(index not in stored_at for index in acked)
    moved = sum(index in stored_at and stored_at[index][0] != offset for index, (offset, _) in acked.items())
    before = [stored_at[i][1] for i, (_, at) in acked.items() if at < killed_at and i in stored_at]
    if not before:
        raise RuntimeError("no record was acknowledged before the kill")
    if min(epoch for _, _, epoch in stored) < 0:
        raise RuntimeError("the stored batches carry no leader epoch: the new leader's first ack is unknown")
    epoch_at_kill = max(before)
    new_leader = [at for i, (_, at) in acked.items() if i in stored_at and stored_at[i][1] > epoch_at_kill]
    if not new_leader:
        raise RuntimeError("no record was acknowledged by a new leader within --failover-window")
    first_ack = min(new_leader)
    ack_times = sorted(at for _, at in acked.values())
    sent = result["sent"]
    rate_back = None
    for position in range(bisect.bisect_left(ack_times, first_ack), len(ack_times)):
        at = ack_times[position]
        if position + 1 >= bisect.bisect_right(sent, at - CAUGHT_UP_LAG_S):
            rate_back = at
            break
    if rate_back is None:
        raise RuntimeError("the producer did not catch up with its schedule within --failover-window")
    return FailoverRun(first_ack - killed_at, rate_back - killed_at, len(acked), len(stored), lost,
                       duplicated, moved)


# -- the driver -----------------------------------------------------------------------------------


#: (row label, unit) of each measure, in the table's order; records/s and MB/s: higher is better.
MEASURES = [
    ("produce confluent-kafka records/s", "rate"),
    ("produce confluent-kafka MB/s", "mb"),
    ("produce sdk records/s", "rate"),
    ("produce sdk MB/s", "mb"),
    ("produce confluent-kafka RF=1 records/s", "rate"),
    ("confluent-kafka RF=3 / RF=1 records/s", "ratio"),
    ("e2e latency p50 ms", "ms"),
    ("e2e latency p99 ms", "ms"),
    ("failover first ack s", "s"),
    ("failover rate back s", "s"),
]


def one_run(cluster: ThreeNodes, broker: str, run: int, args: argparse.Namespace,
            figures: dict[str, list[float]], checks: list[FailoverRun]) -> None:
    """Every measure once on ``broker``; figures appended per measure, progress on stderr."""
    clients = THROUGHPUT_CLIENTS if run % 2 == 0 else list(reversed(THROUGHPUT_CLIENTS))
    for client in [] if args.failover_only else clients:
        rate = measure_throughput(client, cluster, args.messages, args.partitions)
        figures[f"produce {client} records/s"].append(rate)
        figures[f"produce {client} MB/s"].append(rate * RECORD_BYTES / 1e6)
        print(f"  {broker} run {run + 1}: {client} {rate:,.0f} records/s", file=sys.stderr, flush=True)
    if not args.failover_only:
        # Replication's cost: the same client and workload on a topic of one replica per partition.
        rf1 = measure_throughput("confluent-kafka", cluster, args.messages, args.partitions, 1)
        figures["produce confluent-kafka RF=1 records/s"].append(rf1)
        rf3 = figures["produce confluent-kafka records/s"][-1]
        figures["confluent-kafka RF=3 / RF=1 records/s"].append(rf3 / rf1)
        print(f"  {broker} run {run + 1}: confluent-kafka RF=1 {rf1:,.0f} records/s (RF=3/RF=1"
              f" {rf3 / rf1:.2f})", file=sys.stderr, flush=True)
        p50, p99 = measure_latency(cluster, args.rate, args.latency_seconds, args.latency_warm_up)
        figures["e2e latency p50 ms"].append(p50)
        figures["e2e latency p99 ms"].append(p99)
        print(f"  {broker} run {run + 1}: latency p50 {p50:.2f} ms p99 {p99:.2f} ms",
              file=sys.stderr, flush=True)
    failover = measure_failover(cluster, args, bring_back=run + 1 < args.runs)
    figures["failover first ack s"].append(failover.first_ack_s)
    figures["failover rate back s"].append(failover.rate_back_s)
    checks.append(failover)
    print(f"  {broker} run {run + 1}: failover first ack {failover.first_ack_s:.2f} s, rate back"
          f" {failover.rate_back_s:.2f} s", file=sys.stderr, flush=True)


def measure_all(
    brokers: list[str], args: argparse.Namespace
) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[FailoverRun]]]:
    """Every measure ``--runs`` times on every broker: all clusters are up for the whole
    measurement and each run measures every broker once, in an order that alternates between
    runs, so a slow spell of the shared machine hits both brokers rather than one's runs."""
    figures: dict[str, dict[str, list[float]]] = {
        broker: {label: [] for label, _ in MEASURES} for broker in brokers
    }
    checks: dict[str, list[FailoverRun]] = {broker: [] for broker in brokers}
    with contextlib.ExitStack() as stack:
        clusters = {broker: stack.enter_context(three_nodes(broker, small=args.small)) for broker in brokers}
        for cluster in clusters.values():
            for client in THROUGHPUT_CLIENTS if args.warm_up_messages and not args.failover_only else []:
                measure_throughput(client, cluster, args.warm_up_messages, args.partitions)
        for run in range(args.runs):
            for broker in brokers if run % 2 == 0 else list(reversed(brokers)):
                try:
                    one_run(clusters[broker], broker, run, args, figures[broker], checks[broker])
                except (RuntimeError, TimeoutError):
                    print(f"{broker} run {run + 1} failed; the nodes' logs end:\n"
                          f"{clusters[broker].log_tails()}", file=sys.stderr, flush=True)
                    raise
    return figures, checks


def cell(value: float, unit: str) -> str:
    return {"rate": f"{value:,.0f}", "mb": f"{value:.2f}", "ms": f"{value:.2f}", "s": f"{value:.2f}",
            "ratio": f"{value:.2f}"}[unit]


def print_table(brokers: list[str], figures: dict[str, dict[str, list[float]]], runs: int) -> None:
    """A Markdown table: a row per measure, per broker the median and spread, then reference/kafka."""
    name = spread_name(runs)
    head = "".join(f" {b:>10} | {b + ' ' + name:>21} |" for b in brokers)
    print(f"| {'measure':<40} |{head} {'ref/kafka':>9} |")
    print("|" + "-" * 42 + "|" + "|".join(["-" * 12, "-" * 23] * len(brokers)) + "|" + "-" * 11 + "|")
    for label, unit in MEASURES:
        if not all(figures[broker][label] for broker in brokers):
            continue  # not taken (--failover-only)
        cells, medians = [], {}
        for broker in brokers:
            values = figures[broker][label]
            medians[broker] = statistics.median(values)
            low, high = spread(values)
            runs_spread = f"{cell(low, unit)}-{cell(high, unit)}"
            cells.append(f" {cell(medians[broker], unit):>10} | {runs_spread:>21} |")
        ratio = (f"{medians['reference'] / medians['kafka']:.2f}"
                 if len(brokers) == 2 and medians["kafka"] > 0 else "-")
        print(f"| {label:<40} |{''.join(cells)} {ratio:>9} |")


def print_checks(checks: dict[str, list[FailoverRun]]) -> bool:
    """One line per broker with the read-back counts of its failover runs; True if all held."""
    exact = True
    for broker, runs in checks.items():
        acked, stored = sum(r.acked for r in runs), sum(r.stored for r in runs)
        lost, duplicated, moved = (sum(r.lost for r in runs), sum(r.duplicated for r in runs),
                                   sum(r.moved for r in runs))
        ok = not (lost or duplicated or moved)
        exact = exact and ok
        print(f"failover check {broker}: acked {acked:,}, stored {stored:,}, lost {lost}, duplicated"
              f" {duplicated}, moved {moved} over {len(runs)} runs: {'passed' if ok else 'FAILED'}")
    return exact


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", action="store_true", help="the smoke test's workload")
    parser.add_argument("--messages", type=int, help="records per throughput run (default 200000)")
    parser.add_argument("--warm-up-messages", type=int, help="untimed records per client and broker")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", default=",".join(BROKERS), help="comma-separated of reference, kafka")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the throughput topic")
    parser.add_argument("--rate", type=float, help="records a second of the latency run (default 1000)")
    parser.add_argument("--latency-seconds", type=float, help="measured seconds of the latency run")
    parser.add_argument("--latency-warm-up", type=float, help="unmeasured seconds at its start")
    parser.add_argument("--failover-rate", type=float, help="records a second of the failover producer")
    parser.add_argument("--failover-warm-up", type=float, help="seconds of producing before the kill")
    parser.add_argument("--failover-window", type=float, help="most seconds of producing after the kill")
    parser.add_argument("--failover-only", action="store_true",
                        help="take only the failover measure (no throughput or latency runs)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for key, value in (SMALL if args.small else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return parser, args


def main() -> None:
    parser, args = parse_args()
    if args.worker:
        run_worker(args)
        return
    if min(args.messages, args.runs, args.partitions) < 1 or args.warm_up_messages < 0:
        parser.error("--messages, --runs and --partitions must be positive, --warm-up-messages not negative")
    if min(args.rate, args.latency_seconds, args.failover_rate, args.failover_window) <= 0:
        parser.error("--rate, --latency-seconds, --failover-rate and --failover-window must be positive")
    if min(args.latency_warm_up, args.failover_warm_up) < 0:
        parser.error("--latency-warm-up and --failover-warm-up must not be negative")
    brokers = [name.strip() for name in args.brokers.split(",") if name.strip()]
    if not brokers or set(brokers) - set(BROKERS):
        parser.error(f"--brokers takes some of {', '.join(BROKERS)}, not {args.brokers!r}")
    brokers = list(dict.fromkeys(brokers))
    if "kafka" in brokers:
        from _kafka import unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
            brokers.remove("kafka")
    if not brokers:
        parser.error("no broker left to measure")
    print(
        f"3 nodes, RF=3, min.insync.replicas=2; produce {args.messages:,} records of {RECORD_BYTES} bytes"
        f" (acks=all, idempotent) over {args.partitions} partitions; latency at {args.rate:,.0f}/s for"
        f" {args.latency_seconds:g} s; failover at {args.failover_rate:,.0f}/s, leader killed after"
        f" {args.failover_warm_up:g} s; median of {args.runs} runs"
    )
    figures, checks = measure_all(brokers, args)
    print_table(brokers, figures, args.runs)
    print("ref/kafka above 1: the reference cluster is faster in records/s and MB/s, slower in ms and s,"
          " and loses less to replication in RF=3 / RF=1")
    if not print_checks(checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
