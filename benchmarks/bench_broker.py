"""Broker throughput: confluent-kafka (librdkafka) as the load generator.

Produces 100-byte messages with acks=all and idempotence on, then consumes them back, against
the reference broker (a subprocess), librdkafka's mock cluster and Apache Kafka (one KRaft node,
``tests/apache_kafka.py`` through ``_kafka``) in the same run, for 1 and 8 partitions. Prints
each target's msgs/s and MB/s (medians of several runs), the broker's CPU per message, and on
every other target's row the ratio reference/that target: the median of the per-run ratios,
their spread (quartiles from 5 runs on, below that the smallest and largest ratio:
``_common.spread``), and in how many runs the reference broker was at least as fast.

    python benchmarks/bench_broker.py [--messages 300000] [--runs 7] [--partitions 1 8] [--keep-gc]
                                      [--isolate-generator] [--baseline mock|reference]
                                      [--brokers reference,mock,kafka]

``--brokers`` picks the targets (default: every one that can run here; Kafka needs Java and
Maven, and is left out with a message on stderr without them).

Both targets run side by side and take turns run by run (see ``run_targets``): single runs on
this shared 2-core machine vary by +-30%, so only several alternating runs, compared pair by
pair, compare the brokers. Each producer has its producer id before the clock starts (see
``produce``): without that, a run often waited 500 ms for it (every run of one 12-run sample,
one of two in another), a lottery in the client that swamped any difference between brokers.

The load generator's Python thread is the bottleneck of the produce phase: one ``produce()``
call and one delivery callback per message, about 2.5 us together, and it is busy for the whole
run. A broker can only lose throughput there by taking that thread's CPU, and the ``preempted``
column counts how often it did: the times the kernel took the load generator's thread off its CPU
for another thread while the clock ran. How that happens, measured with ``perf record -e
sched:sched_switch -e sched:sched_wakeup -a`` (8 partitions, 4 runs per target):

- librdkafka sends each partition's batch in a ProduceRequest of its own and then waits for the
  partition's next message, which the very next round of ``produce()`` calls (about 20 us later)
  brings, waking librdkafka's sender thread.
- The reference broker is still busy with that request then (150-230 us of CPU each), so the
  sender thread finds the other CPU taken and lands on the load generator's: the generator was
  preempted by it about 320 times per run, against fewer than 2 per run with the mock, whose C
  thread is done with a request in a few microseconds (the mock's own thread preempted it about
  145 times per run instead).
- With the generator's thread alone on its CPU (``--isolate-generator``), it spends the same CPU
  time per message against either broker; unpinned, each preemption costs it far more than the
  switch itself, as the thread that ran in its place has pushed its working set out of the core's
  caches: the loop took about 14% more of its CPU against the reference broker in those runs.

So what decides the produce ratio is how much CPU the broker takes at the moments the client's
sender thread wants a CPU. The mock's thread needs about 0.2 us per message in all; the reference
broker spends 0.14 us per message in the kernel alone (receiving the requests, writing them to its
log, answering), and about 0.65 us more running Python.

``--baseline reference`` puts a second reference broker in the mock's place: the ratio of two
identical brokers shows how far this machine's noise alone moves the ratio (15 runs at 8
partitions: median 1.02, quartiles 0.84-1.13).

Throughput alone cannot show what a broker costs while the load generator is the bottleneck, so
each row also gives the broker's CPU per message: the reference broker's process and Kafka's JVM
(user plus system time from /proc/<pid>/stat, ended threads included, in 10 ms ticks) against the
mock's one thread (``rdk:mock``, in this process, from the kernel's per-thread accounting).

Kafka's JVM compiles its hot paths as it runs, so its target produces and consumes
``KAFKA_WARM_UP`` messages, untimed, before the first run; it runs with Kafka's default settings
(no fsync per request, as the reference broker does not fsync its log per request either).
``python benchmarks/produce_ceiling.py`` adds a third target, the reference broker with its log
taken out of Produce, which says how much of the produce ratio is the log's work.

``--isolate-generator`` takes that contention out: the load generator's Python thread gets one
CPU to itself and every other thread (librdkafka's, the mock's, the reference broker process's)
the other, so both brokers are measured by what they can serve rather than by the CPU they take
from the generator. It changes what is measured, so it is an option, not the default.

The mock cluster keeps only about 5 MiB per partition, so each run consumes from every target
only as many messages as the mock still holds (all of them at 8 partitions, ~45,000 at 1).

The consumer is configured so that librdkafka's prefetch limit does not pause it (see
``consume``); ``python benchmarks/profile_broker.py`` shows where the broker spends its time
under the same workload.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import NamedTuple

import confluent_kafka as ck
import confluent_kafka.admin  # ck.admin is not imported by confluent_kafka itself
from _common import process_cpu_seconds, spread, spread_name  # a script beside this one
from _kafka import running_kafka, unavailable_reason

from reference_broker.testing import BrokerProcess
from sdk.testing.librdkafka_mock import LibrdkafkaMockCluster

VALUE = b"v" * 100
MOCK_THREAD = "rdk:mock"
#: Messages Kafka's target produces and consumes untimed once started, for the JVM's JIT.
KAFKA_WARM_UP = 50_000
#: Whether the timed phases run with Python's cyclic garbage collector paused (``--keep-gc``).
PAUSE_GC = True
#: With ``--isolate-generator``: (the CPU of the load generator's Python thread, every other one's).
ISOLATE: tuple[int, int] | None = None


def isolate_generator(broker_pid: int | None = None) -> None:
    """With ``--isolate-generator``, pin this process's main thread (the load generator) alone on
    one CPU and its other threads (librdkafka's, the mock's), or ``broker_pid``'s, on the other.

    Called again after each client is made and before each clock starts: threads inherit the
    affinity of the thread that starts them, and the main thread starts each client's.
    """
    if ISOLATE is None:
        return
    generator_cpu, other_cpu = ISOLATE
    main_tid = threading.main_thread().native_id
    pid = "self" if broker_pid is None else str(broker_pid)
    for tid in os.listdir(f"/proc/{pid}/task"):
        cpu = generator_cpu if broker_pid is None and int(tid) == main_tid else other_cpu
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {cpu})


@contextlib.contextmanager
def client_gc_paused() -> Iterator[None]:
    """Pause the benchmark process's cyclic GC while a phase is timed.

    consume() hands back 10,000 Message objects at a time; they survive long enough to be
    promoted, so full collections keep running over the whole interpreter heap (about 40 ms
    each, several per 100,000 messages). That is the load generator's cost, the same whatever the
    broker, and it dominated the consume figure; reference counting still frees everything.
    """
    if not PAUSE_GC or not gc.isenabled():
        yield
        return
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def threads_cpu_seconds(pid: int | str, name: str | None = None) -> float:
    """CPU seconds of a process's threads (only those called ``name``, if given); Linux only.

    Read from schedstat, in nanoseconds: /proc/<pid>/stat counts in clock ticks of 10 ms, too
    coarse for a run of a second. A thread that ends between listing and reading is skipped.
    """
    total_ns = 0
    tasks = f"/proc/{pid}/task"
    for tid in os.listdir(tasks):
        task_dir = os.path.join(tasks, tid)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if name is not None:
                with open(os.path.join(task_dir, "comm")) as f:
                    if f.read().strip() != name:
                        continue
            with open(os.path.join(task_dir, "schedstat")) as f:
                total_ns += int(f.read().split()[0])  # time on the CPU, in ns
    return total_ns / 1e9


class ProduceTimed(NamedTuple):
    seconds: float
    #: How often the load generator's thread was taken off its CPU for another thread meanwhile.
    preemptions: int


def preemptions() -> int:
    """Involuntary context switches of the calling thread so far (Linux; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/status") as f:
            for line in f:
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def produce(
    bootstrap: str, topic: str, messages: int, partitions: int, batch_messages: int | None = None
) -> ProduceTimed:
    """Time producing ``messages``; ``batch_messages`` caps librdkafka's batches
    (batch.num.messages) to fix the request size instead of letting timing decide it."""
    extra = {"batch.num.messages": batch_messages} if batch_messages else {}
    producer = ck.Producer(
        {
            **extra,
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    # Start the clock on a producer that is ready to send: metadata known, connection up and,
    # above all, a producer id. librdkafka asks for the id after a metadata response or on a
    # 500 ms timer; when the only response came before its connection to the broker was up, the
    # timer decides, and every message of the run queues up for that half second first. Which
    # way it goes is chance, not the broker, so it stays off the clock.
    isolate_generator()
    producer.list_topics(topic, timeout=10)
    for partition in range(partitions):
        producer.produce(topic, VALUE, partition=partition)
    if producer.flush(30):
        raise RuntimeError("warm-up message not delivered")
    isolate_generator()
    failures = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err)

    preempted = preemptions()
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    preempted = preemptions() - preempted
    if remaining or failures:
        raise RuntimeError(f"produce failed: {remaining} undelivered, errors {failures[:3]}")
    return ProduceTimed(elapsed, preempted)


def _consumer(bootstrap: str) -> ck.Consumer:
    return ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",  # required by librdkafka, unused with assign()
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            # librdkafka stops prefetching a partition at 100,000 queued messages and then waits
            # fetch.queue.backoff.ms (1 s) before looking again: with 10 MiB fetches the queue
            # passes that after two fetches, and the application drains it long before the second
            # look, so the default measures that pause rather than the broker.
            "queued.min.messages": 1_000_000,
        }
    )


def retained(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    """(low, high) watermarks per partition (the mock keeps only the newest ~5 MiB of each)."""
    consumer = _consumer(bootstrap)
    try:
        return [
            consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10) for p in range(partitions)
        ]
    finally:
        consumer.close()


def consume(
    bootstrap: str, topic: str, partitions: int, newest: list[int] | None = None
) -> tuple[int, float]:
    """Read the topic; returns (messages timed, seconds).

    Reads everything the target holds, or with ``newest`` only that many of the newest messages
    of each partition. Knowing the count, the last consume() asks for exactly what is left and
    returns at once; waiting for end-of-partition events instead would add the broker's fetch
    long poll (500 ms) to the measurement, or consume()'s timeout when a partial last batch waits
    for more messages.
    """
    consumer = _consumer(bootstrap)
    marks = retained(bootstrap, topic, partitions)
    counts = [high - low for low, high in marks]
    if newest is not None:
        counts = [min(have, want) for have, want in zip(counts, newest, strict=True)]
    starts = [high - count for (_, high), count in zip(marks, counts, strict=True)]
    assigned = [ck.TopicPartition(topic, p, start) for p, start in enumerate(starts)]
    expected = sum(counts)
    consumer.assign(assigned)
    isolate_generator()
    count = 0
    untimed = 0
    at_eof: set[int] = set()
    # The clock starts when the first messages arrive (connection set-up is not throughput) and
    # stops once the batch holding the last message has been processed; the messages of that
    # first batch arrived before the clock started, so they are not in the rate. Reading the
    # clock per batch rather than per message keeps the Python loop's own cost out of it.
    start = last = None
    deadline = time.perf_counter() + 120
    while count < expected and len(at_eof) < partitions and time.perf_counter() < deadline:
        batch = consumer.consume(min(10_000, expected - count), timeout=1.0)
        received = time.perf_counter()
        seen = 0
        for msg in batch:
            err = msg.error()
            if err is None:
                seen += 1
            elif err.code() == ck.KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition() or 0)
            else:
                raise RuntimeError(f"consume failed: {err}")
        if seen:
            if start is None:
                start = received
                untimed = seen
            count += seen
            last = time.perf_counter()
    if start is None or last is None:
        raise RuntimeError("consumed nothing")
    elapsed = last - start
    consumer.close()
    if count == untimed:
        raise RuntimeError(f"all {count} messages came in one batch: too few to time")
    return count - untimed, elapsed


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create a topic through the broker's CreateTopics (the mock has none: see ``MockTarget``)."""
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ck.admin.NewTopic(name, partitions, 1)])[name].result(30)


class ReferenceTarget:
    name = "reference"

    def __init__(self) -> None:
        self._broker = BrokerProcess()

    def __enter__(self) -> ReferenceTarget:
        self._broker.__enter__()
        self.bootstrap = self._broker.bootstrap
        isolate_generator(self._broker.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self._broker.__exit__(None, None, None)

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic(self.bootstrap, name, partitions)

    def cpu_seconds(self) -> float:
        """CPU the broker process has used so far, all its threads."""
        assert self._broker.pid is not None
        return process_cpu_seconds(self._broker.pid)


class SecondReferenceTarget(ReferenceTarget):
    """Another reference broker process in the mock's place (``--baseline reference``)."""

    name = "reference2"


class MockTarget:
    name = "mock"

    def __enter__(self) -> MockTarget:
        self._cluster = LibrdkafkaMockCluster(1)
        self.bootstrap = self._cluster.bootstrap
        return self

    def __exit__(self, *exc: object) -> None:
        self._cluster.close()

    def create_topic(self, name: str, partitions: int) -> None:
        self._cluster.create_topic(name, partitions)

    def cpu_seconds(self) -> float:
        """CPU the mock cluster has used so far: its one thread, which serves every mock broker
        (librdkafka names it "rdk:mock"), in this process."""
        return threads_cpu_seconds("self", MOCK_THREAD)


class KafkaTarget:
    """Apache Kafka, one KRaft node (broker and controller) in a JVM of its own."""

    name = "kafka"

    def __enter__(self) -> KafkaTarget:
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(running_kafka())
            self.bootstrap = cluster.bootstrap
            self._pid = cluster.nodes[0].pid
            assert self._pid is not None
            isolate_generator(self._pid)
            topic = f"bench-warm-up-{uuid.uuid4().hex[:8]}"
            self.create_topic(topic, 1)
            with client_gc_paused():
                produce(self.bootstrap, topic, KAFKA_WARM_UP, 1)
                consume(self.bootstrap, topic, 1)
            self._stack = stack.pop_all()  # Kafka stops at __exit__, or here if the warm-up failed
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic(self.bootstrap, name, partitions)

    def cpu_seconds(self) -> float:
        """CPU the JVM has used so far, all its threads (Kafka's controller's too)."""
        assert self._pid is not None
        return process_cpu_seconds(self._pid)


Target = ReferenceTarget | MockTarget | KafkaTarget
BROKERS = ("reference", "mock", "kafka")

PerRun = dict[str, dict[str, list[float]]]  # target -> phase -> one figure per run, in run order


class Measured(NamedTuple):
    """Per target and phase, each run's throughput and the broker's CPU use."""

    rates: PerRun  # msgs/s
    cpu: PerRun  # microseconds of the broker's CPU per message
    preempted: PerRun  # times the load generator's thread was preempted (produce only)


def run_targets(targets: list[Target], partitions: int, messages: int, runs: int) -> Measured:
    """Produce and consume rates of every run, the targets taking turns run by run, and the CPU
    each broker spent on each phase.

    Every target is up for the whole measurement and each run measures every target once, in an
    order that alternates between runs, so a slow spell of the (shared, 2-core) machine or a
    change of the load generator's batching regime hits all alike instead of one target's runs;
    the targets' figures of one run are paired (see ``paired_ratios``).
    Every target consumes the same messages: per partition, the newest as many as the target
    holding the fewest has (the mock keeps ~5 MiB per partition, about 45,000 of these messages).
    Reading more from one target than the other would not be the same measurement: the consumer
    drains its first fetch at full speed only when no further fetch competes with it for the CPU.
    The CPU figure covers the whole phase call, connection set-up included.
    """
    rates: PerRun = {t.name: {"produce": [], "consume": []} for t in targets}
    cpu: PerRun = {t.name: {"produce": [], "consume": []} for t in targets}
    preempted: PerRun = {t.name: {"produce": []} for t in targets}
    for run in range(runs):
        order = targets if run % 2 == 0 else list(reversed(targets))
        topics = {}
        for t in order:
            topic = topics[t.name] = f"bench-{partitions}-{uuid.uuid4().hex[:8]}"
            t.create_topic(topic, partitions)
            with client_gc_paused():
                before = t.cpu_seconds()
                timed = produce(t.bootstrap, topic, messages, partitions)
                cpu[t.name]["produce"].append((t.cpu_seconds() - before) * 1e6 / messages)
            rates[t.name]["produce"].append(messages / timed.seconds)
            preempted[t.name]["produce"].append(timed.preemptions)
        held = [retained(t.bootstrap, topics[t.name], partitions) for t in order]
        newest = [min(high - low for low, high in marks) for marks in zip(*held, strict=True)]
        for t in order:
            with client_gc_paused():
                before = t.cpu_seconds()
                count, elapsed = consume(t.bootstrap, topics[t.name], partitions, newest)
                cpu[t.name]["consume"].append((t.cpu_seconds() - before) * 1e6 / sum(newest))
            rates[t.name]["consume"].append(count / elapsed)
    return Measured(rates, cpu, preempted)


class PairedRatio(NamedTuple):
    """reference/other target over the runs: the median of the per-run ratios and their spread."""

    median: float
    low: float  # the spread of the ratios (see ``_common.spread``)
    high: float
    wins: int  # runs in which the reference broker was at least as fast
    runs: int


def paired_ratios(reference: list[float], other: list[float]) -> PairedRatio:
    """Compare run by run, not median with median.

    The two figures of one run were measured back to back, so they share the machine's state of
    the moment (another tenant's load, the CPU's clock), which moves single runs by +-30% here:
    their ratio cancels most of that, and its median and spread say how sure the comparison is
    (a ratio of two medians can come from two different runs' conditions).
    """
    ratios = [r / o for r, o in zip(reference, other, strict=True)]
    low, high = spread(ratios)
    return PairedRatio(statistics.median(ratios), low, high, sum(ratio >= 1 for ratio in ratios), len(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--partitions", type=int, nargs="*", default=[1, 8])
    parser.add_argument(
        "--keep-gc", action="store_true", help="leave the client's cyclic GC running while timing"
    )
    parser.add_argument(
        "--isolate-generator",
        action="store_true",
        help="the load generator's Python thread alone on one CPU, every other thread on another",
    )
    parser.add_argument(
        "--baseline",
        choices=("mock", "reference"),
        default="mock",
        help="what the reference broker is compared with in the mock's place: the mock cluster, or"
        " (to see the measurement's noise) a second reference broker",
    )
    parser.add_argument(
        "--brokers",
        default=None,
        help=f"comma-separated targets of {', '.join(BROKERS)} (default: all that can run here)",
    )
    args = parser.parse_args()
    global PAUSE_GC, ISOLATE
    PAUSE_GC = not args.keep_gc
    if args.isolate_generator:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--isolate-generator needs two CPUs")
        ISOLATE = (cpus[1], cpus[0])
    brokers = chosen_brokers(parser, args.brokers)
    record_bytes = len(VALUE)
    print(
        f"{args.messages} messages of {record_bytes} bytes, acks=all, idempotent; median of {args.runs};"
        f" client GC {'running' if args.keep_gc else 'paused'} while timing"
        + (f"; load generator alone on CPU {ISOLATE[0]}, the rest on CPU {ISOLATE[1]}" if ISOLATE else "")
    )
    header = (
        f"{'partitions':>10} {'phase':>8} {'target':>10} {'msgs/s':>12} {'MB/s':>8} {'cpu us/msg':>10}"
        f" {'preempted':>9} {'ref/this':>9} {spread_name(args.runs):>11} {'ref>=this':>9}"
    )
    print(header)
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        for broker in brokers:
            target = new_target(broker, args.baseline)
            stack.enter_context(target)  # each target's __enter__ returns itself
            targets.append(target)
        for partitions in args.partitions:
            measured = run_targets(targets, partitions, args.messages, args.runs)
            _print_rows(partitions, measured, record_bytes)


def chosen_brokers(parser: argparse.ArgumentParser, brokers: str | None) -> list[str]:
    """The targets ``--brokers`` names (an error for an unknown one), or every known one; Kafka
    left out, with the reason on stderr, when it cannot run here."""
    names = BROKERS if brokers is None else [name.strip() for name in brokers.split(",") if name.strip()]
    unknown = sorted(set(names) - set(BROKERS))
    if unknown or not names:
        parser.error(f"--brokers takes some of {', '.join(BROKERS)}, not {brokers!r}")
    if "kafka" in names:
        reason = unavailable_reason()
        if reason is not None:
            print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
            names = [name for name in names if name != "kafka"]
    if not names:
        parser.error("no broker left to measure")
    return list(dict.fromkeys(names))


def new_target(broker: str, baseline: str) -> Target:
    """The target called ``broker``; with ``--baseline reference`` the mock's place goes to a
    second reference broker."""
    if broker == "reference":
        return ReferenceTarget()
    if broker == "mock":
        return MockTarget() if baseline == "mock" else SecondReferenceTarget()
    return KafkaTarget()


def _print_rows(partitions: int, measured: Measured, record_bytes: int) -> None:
    """A row per phase and target: median msgs/s and MB/s, the broker's median CPU per message,
    the median count of the load generator's preemptions while producing, and on every other
    target's row, when the reference broker was measured too, the paired throughput ratio
    reference/that target (see ``paired_ratios``)."""
    rates = measured.rates
    for phase in ("produce", "consume"):
        reference = rates.get(ReferenceTarget.name)
        for name, phases in rates.items():
            rate = statistics.median(phases[phase])
            mbps = rate * record_bytes / 1e6
            cpu_us = statistics.median(measured.cpu[name][phase])
            counts = measured.preempted[name].get(phase)
            preempted = f"{statistics.median(counts):9.0f}" if counts else f"{'':9}"
            shown = ""
            if reference is not None and name != ReferenceTarget.name:
                paired = paired_ratios(reference[phase], phases[phase])
                shown = (
                    f"{paired.median:9.2f} {paired.low:5.2f}-{paired.high:<5.2f}"
                    f" {paired.wins:>3}/{paired.runs}"
                )
            print(
                f"{partitions:>10} {phase:>8} {name:>10} {rate:12,.0f} {mbps:8.1f} {cpu_us:10.2f}"
                f" {preempted} {shown}".rstrip()
            )


if __name__ == "__main__":
    main()
