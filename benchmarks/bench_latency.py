"""End-to-end latency at a fixed rate: this SDK next to confluent-kafka, on the reference broker
and on Apache Kafka.

One producer and one consumer in the same process, on a fresh one-partition topic: the producer
sends ``--rate`` 100-byte records a second (acks=all, idempotent, linger 0), each carrying the
moment it was sent; the consumer (manual assignment, no group) notes when each one reaches the
application. Latency is the time from the send call (the SDK: ``await producer.send()``;
confluent-kafka: ``produce()``) to the consumer handing the record over (the SDK: ``getmany``;
confluent-kafka: ``poll()``), so it covers the producer's batching and request, the broker's
replication wait (acks=all) and its fetch long poll, and the consumer's delivery. Both clocks
are the same monotonic clock of the one process.

Each run is a fresh process per client; the clients take turns run by run. The first
``--warm-up`` seconds of every run are sent but left out of the figures (connections, the
producer id, the consumer's first fetch), and each broker first gets one untimed run of every
client (Kafka's JVM compiles its hot paths as it runs). Per client the table gives the median
over the runs of each run's p50 and p99 (with their spread, ``_common.spread``), the rate the
sender achieved, and on the SDK's row the ratio SDK/confluent-kafka of the medians (above 1: the
SDK is slower).

The sends follow a schedule (``i / rate`` seconds after the start), never a sleep after each
send, so a late send is followed by its successors at once and the rate holds; latency is taken
from the actual send, and the achieved rate shows a client that could not keep up.

    python benchmarks/bench_latency.py [--rate 2000] [--seconds 5] [--warm-up 1] [--runs 5]
                                       [--clients sdk,confluent-kafka] [--brokers reference,kafka]

``--brokers`` defaults to every broker that can run here; Kafka needs Java and Maven and is left
out, with a message on stderr, without them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_in_process, spread, spread_name

CLIENTS = ["sdk", "confluent-kafka"]
BROKERS = ["reference", "kafka"]
RECORD_BYTES = 100
#: A record's head: its index in the run and the perf_counter_ns() of its send.
HEAD = struct.Struct(">Iq")
PADDING = b"v" * (RECORD_BYTES - HEAD.size)
#: How long a run may take beyond its schedule for the last records to arrive.
DRAIN_TIMEOUT_S = 60.0
#: The index of the record that proves the path is up before the clock starts (see ``Arrivals``).
READY = 0xFFFFFFFF


def record(index: int) -> bytes:
    """Record ``index``, stamped with the moment of this call (just before it is sent)."""
    return HEAD.pack(index, time.perf_counter_ns()) + PADDING


class Arrivals:
    """Latency of each record by index, from its stamp to the time it is handed to the app.

    Before the schedule starts, each worker sends one ``READY`` record and waits for it to come
    back: then the producer has its producer id and connection, and the consumer its position and
    a fetch in flight, so none of that set-up lands on the measured records.
    """

    def __init__(self, total: int) -> None:
        self.latency_ms: list[float | None] = [None] * total
        self.count = 0
        self.ready = False

    def note(self, value: bytes | None, received_ns: int) -> None:
        if value is None:
            raise RuntimeError("a record without a value: not one of this run's")
        index, sent_ns = HEAD.unpack_from(value)
        if index == READY:
            self.ready = True
            return
        if self.latency_ms[index] is None:
            self.count += 1
        self.latency_ms[index] = (received_ns - sent_ns) / 1e6

    def result(self, warm_up: int, first_ns: int, last_ns: int) -> dict[str, Any]:
        """The worker's answer: the latencies after the warm-up, and the rate they were sent at."""
        measured = self.latency_ms[warm_up:]
        missing = sum(latency is None for latency in measured)
        if missing:
            raise RuntimeError(f"{missing} records never reached the consumer")
        seconds = (last_ns - first_ns) / 1e9
        return {"latency_ms": measured, "rate": (len(measured) - 1) / seconds if seconds > 0 else 0.0}


# -- the clients (each runs in a worker process) --------------------------------------------------


async def _sdk(bootstrap: str, topic: str, rate: float, total: int, warm_up: int) -> dict[str, Any]:
    from sdk import Producer
    from sdk.consumer import Consumer, TopicPartition

    arrivals = Arrivals(total)
    async with (
        Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) as producer,
        Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer,
    ):
        assert producer.config.idempotent
        consumer.assign([TopicPartition(topic, 0)])

        async def receive_once() -> None:
            batches = await consumer.getmany(timeout_ms=1000)
            received = time.perf_counter_ns()
            for records in batches.values():
                for consumed in records:
                    arrivals.note(consumed.value, received)

        async def receive() -> None:
            while arrivals.count < total:
                await receive_once()

        await producer.send_and_wait(topic, record(READY), partition=0)
        while not arrivals.ready:
            await receive_once()
        receiver = asyncio.create_task(receive())
        futures = []
        start = time.perf_counter()
        first_ns = 0
        for index in range(total):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if index == warm_up:
                first_ns = time.perf_counter_ns()
            futures.append(await producer.send(topic, record(index), partition=0))
        last_ns = time.perf_counter_ns()
        await asyncio.gather(*futures)  # a failed send fails the run
        await asyncio.wait_for(receiver, DRAIN_TIMEOUT_S)
    return arrivals.result(warm_up, first_ns, last_ns)


def _confluent(bootstrap: str, topic: str, rate: float, total: int, warm_up: int) -> dict[str, Any]:
    """One thread does both, like the SDK's one event loop: between two scheduled sends it waits
    in the consumer's ``poll()``, which returns as soon as a record is there."""
    import confluent_kafka as ck

    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
    )
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-{uuid.uuid4().hex}",  # required by librdkafka, unused with assign()
            "enable.auto.commit": False,
        }
    )
    failures: list[ck.KafkaError] = []

    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        if err is not None:
            failures.append(err)

    arrivals = Arrivals(total)
    try:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        producer.produce(topic, record(READY), partition=0, on_delivery=on_delivery)
        if producer.flush(30):
            raise RuntimeError("the first record was not delivered")
        ready_deadline = time.perf_counter() + DRAIN_TIMEOUT_S
        while not arrivals.ready and time.perf_counter() < ready_deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                arrivals.note(message.value(), time.perf_counter_ns())
        if not arrivals.ready:
            raise RuntimeError("the first record never reached the consumer")
        start = time.perf_counter()
        first_ns = last_ns = 0
        index = 0
        deadline = None
        while arrivals.count < total:
            now = time.perf_counter()
            if index < total and now >= start + index / rate:
                if index == warm_up:
                    first_ns = time.perf_counter_ns()
                producer.produce(topic, record(index), partition=0, on_delivery=on_delivery)
                producer.poll(0)
                index += 1
                if index == total:
                    last_ns = time.perf_counter_ns()
                    deadline = now + DRAIN_TIMEOUT_S
                continue
            if deadline is not None and now > deadline:
                break
            wait = start + index / rate - now if index < total else 0.1
            # librdkafka waits in whole milliseconds: a shorter wait would spin.
            message = consumer.poll(max(wait, 0.001))
            if message is None:
                continue
            received = time.perf_counter_ns()
            if message.error() is not None:
                raise RuntimeError(f"consume failed: {message.error()}")
            arrivals.note(message.value(), received)
        if producer.flush(30) or failures:
            raise RuntimeError(f"produce failed: {failures[:3]}")
    finally:
        consumer.close()
    return arrivals.result(warm_up, first_ns, last_ns)


WORKERS = {"sdk": _sdk, "confluent-kafka": _confluent}


def run_worker(args: argparse.Namespace) -> None:
    """The worker process: one client's run, its result as JSON on the last line."""
    worker = WORKERS[args.worker]
    result = worker(args.bootstrap, args.topic, args.rate, args.records, args.warm_up_records)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    print(json.dumps(result))


# -- the driver -----------------------------------------------------------------------------------


class RunFigures(NamedTuple):
    p50_ms: float
    p99_ms: float
    rate: float  # records a second the sender achieved


def percentiles(latency_ms: list[float]) -> tuple[float, float]:
    """p50 and p99 (inclusive method: within the observed values)."""
    cuts = statistics.quantiles(latency_ms, n=100, method="inclusive")
    return cuts[49], cuts[98]


def create_topic(bootstrap: str, name: str) -> None:
    import confluent_kafka.admin as ck_admin

    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ck_admin.NewTopic(name, 1, 1)])[name].result(30)


def measure(client: str, bootstrap: str, args: argparse.Namespace) -> RunFigures:
    """One run of ``client`` in a fresh process, on a fresh topic."""
    topic = f"latency-{uuid.uuid4().hex[:12]}"
    create_topic(bootstrap, topic)
    warm_up = round(args.warm_up * args.rate)
    total = warm_up + max(2, round(args.seconds * args.rate))
    command = [
        os.path.abspath(__file__), "--worker", client, "--bootstrap", bootstrap, "--topic", topic,
        "--rate", str(args.rate), "--records", str(total), "--warm-up-records", str(warm_up),
    ]
    result = run_in_process(client, command)
    p50, p99 = percentiles(result["latency_ms"])
    return RunFigures(p50, p99, result["rate"])


@contextlib.contextmanager
def broker(name: str) -> Iterator[str]:
    """A started broker's bootstrap address, stopped on exit."""
    if name == "reference":
        from reference_broker.testing import BrokerProcess

        with BrokerProcess() as process:
            yield process.bootstrap
    else:
        from _kafka import running_kafka

        with running_kafka() as cluster:
            yield cluster.bootstrap


def chosen(parser: argparse.ArgumentParser, option: str, given: str | None, known: list[str]) -> list[str]:
    """The names a comma-separated option lists (an error for an unknown one), or all of ``known``."""
    names = known if given is None else [name.strip() for name in given.split(",") if name.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        parser.error(f"{option} takes some of {', '.join(known)}, not {given!r}")
    return list(dict.fromkeys(names))


def print_table(
    brokers: list[str], clients: list[str], runs: dict[tuple[str, str], list[RunFigures]], count: int
) -> None:
    """A Markdown table, a row per broker and client."""
    name = spread_name(count)
    print(
        f"| {'broker':<9} | {'client':<15} | {'sent/s':>7} | {'p50 ms':>7} | {'p50 ' + name:>13} "
        f"| {'p99 ms':>7} | {'p99 ' + name:>13} | {'p50 sdk/ck':>10} | {'p99 sdk/ck':>10} |"
    )
    widths = (11, 17, 9, 9, 15, 9, 15, 12, 12)
    print("|" + "|".join("-" * width for width in widths) + "|")
    for target in brokers:
        medians: dict[str, tuple[float, float]] = {}
        for client in clients:
            figures = runs[target, client]
            p50s, p99s = [f.p50_ms for f in figures], [f.p99_ms for f in figures]
            medians[client] = statistics.median(p50s), statistics.median(p99s)
        for client in clients:
            figures = runs[target, client]
            p50, p99 = medians[client]
            (p50_low, p50_high), (p99_low, p99_high) = (
                spread([f.p50_ms for f in figures]), spread([f.p99_ms for f in figures])
            )
            rate = statistics.median(f.rate for f in figures)
            ratios = ["", ""]
            if client == "sdk" and "confluent-kafka" in medians:
                base = medians["confluent-kafka"]
                ratios = [f"{p50 / base[0]:.2f}", f"{p99 / base[1]:.2f}"]
            print(
                f"| {target:<9} | {client:<15} | {rate:>7,.0f} | {p50:>7.2f} | "
                f"{f'{p50_low:.2f}-{p50_high:.2f}':>13} | {p99:>7.2f} | "
                f"{f'{p99_low:.2f}-{p99_high:.2f}':>13} | {ratios[0]:>10} | {ratios[1]:>10} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=2000.0, help="records a second (default 2000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warm-up", type=float, default=1.0, help="unmeasured seconds at a run's start")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", default=None, help=f"comma-separated of {', '.join(CLIENTS)}")
    parser.add_argument("--brokers", default=None, help=f"comma-separated of {', '.join(BROKERS)}")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--warm-up-records", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    if args.rate <= 0 or args.seconds <= 0 or args.warm_up < 0 or args.runs < 1:
        parser.error("--rate, --seconds and --runs must be positive, --warm-up not negative")
    clients = chosen(parser, "--clients", args.clients, CLIENTS)
    brokers = chosen(parser, "--brokers", args.brokers, BROKERS)
    if "kafka" in brokers:
        from _kafka import unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
            brokers.remove("kafka")
    if not brokers:
        parser.error("no broker left to measure")
    print(
        f"{args.rate:,.0f} records/s of {RECORD_BYTES} bytes, acks=all, idempotent, linger 0, one"
        f" partition; {args.seconds:g} s measured after {args.warm_up:g} s of warm-up per run;"
        f" median of {args.runs} runs; latency from send to the consumer's hands"
    )
    runs: dict[tuple[str, str], list[RunFigures]] = {}
    for target in brokers:
        with broker(target) as bootstrap:
            for client in clients:
                measure(client, bootstrap, args)  # untimed: a warm broker and page cache
            for run in range(args.runs):
                for client in clients if run % 2 == 0 else list(reversed(clients)):
                    figures = measure(client, bootstrap, args)
                    runs.setdefault((target, client), []).append(figures)
                    print(
                        f"  {target} {client}: p50 {figures.p50_ms:.2f} ms p99 {figures.p99_ms:.2f} ms"
                        f" at {figures.rate:,.0f}/s",
                        file=sys.stderr,
                        flush=True,
                    )
    print_table(brokers, clients, runs, args.runs)


if __name__ == "__main__":
    main()
