"""Consumer throughput: this SDK next to aiokafka, kafka-python and confluent-kafka.

One topic of 16 partitions is filled once per target with ``--messages`` 100-byte records
(confluent-kafka's producer, 16 KiB batches, no compression); then every client reads all of
them from the beginning, by manual assignment (no group), in its own fresh process. The clock
runs from the first poll until the last record is in hand. Targets: the reference broker
(``BrokerProcess``) and librdkafka's mock cluster (own process; it keeps only ~5 MiB per
partition, so it gets at most ``MOCK_MAX_MESSAGES``). Medians of ``--runs`` runs, the clients
taking turns, with ratios to aiokafka's ``getmany``.

    python benchmarks/bench_consumer.py                      # everything, 1M messages, 3 runs
    python benchmarks/bench_consumer.py --messages 50000 --targets reference --clients sdk,aiokafka
    python benchmarks/bench_consumer.py --profile sdk        # where the time goes (cProfile)
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as common
from _common import (
    ROOT,
    Clock,
    client_parser,
    in_turns,
    measure_rate,
    medians,
    print_ratio_table,
    report_worker,
    run_worker,
    show_runs,
)

VALUE = b"v" * 100
PARTITIONS = 16
#: What 16 of the mock's ~5 MiB partitions hold of these records, with room to spare.
MOCK_MAX_MESSAGES = 600_000
CLIENTS = ["sdk", "sdk-sync", "aiokafka", "kafka-python", "confluent-kafka"]
TARGETS = ["reference", "mock"]


# -- the clients (each runs in a worker process) --------------------------------------------------


async def _read_async(getmany: Callable[..., Any], n: int) -> None:
    """Awaits ``getmany(timeout_ms=1000)`` (a dict of record lists) until ``n`` records came back."""
    seen = 0
    while seen < n:
        for records in (await getmany(timeout_ms=1000)).values():
            seen += len(records)


def _read_sync(getmany: Callable[..., Any], n: int) -> None:
    """Calls ``getmany(timeout_ms=1000)`` (a dict of record lists) until ``n`` records came back."""
    seen = 0
    while seen < n:
        for records in getmany(timeout_ms=1000).values():
            seen += len(records)


async def _sdk(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from sdk.consumer import Consumer, TopicPartition

    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        await _read_async(consumer.getmany, n)
        return clock.stop()


def _sdk_sync(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from sdk.consumer import TopicPartition
    from sdk.sync import Consumer

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        _read_sync(consumer.getmany, n)
        return clock.stop()


async def _aiokafka(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        await _read_async(consumer.getmany, n)
        return clock.stop()
    finally:
        await consumer.stop()


def _kafka_python(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaConsumer, TopicPartition

    pinned = {"api_version": (2, 3)} if os.environ.get("BENCH_TARGET") == "mock" else {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **pinned)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        _read_sync(consumer.poll, n)
        return clock.stop()
    finally:
        consumer.close()


def _confluent(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
         "enable.auto.commit": False, "log_level": 0}
    )
    try:
        beginning = confluent_kafka.OFFSET_BEGINNING
        consumer.assign([confluent_kafka.TopicPartition(topic, p, beginning) for p in range(PARTITIONS)])
        clock = Clock()
        seen = 0
        consume = consumer.consume
        while seen < n:
            for message in consume(num_messages=10000, timeout=1.0):
                if message.error() is None:
                    seen += 1
        return clock.stop()
    finally:
        consumer.close()


WORKERS: dict[str, Callable[[str, str, int], Any]] = {  # each returns (wall s, CPU s)
    "sdk": _sdk,
    "sdk-sync": _sdk_sync,
    "aiokafka": _aiokafka,
    "kafka-python": _kafka_python,
    "confluent-kafka": _confluent,
}


# -- clusters and data ----------------------------------------------------------------------------


class MockClusterProcess(common.MockClusterProcess):
    """librdkafka's mock cluster (``sdk.testing.librdkafka_mock``, 1 broker) in a child process, so
    it does not share our GIL; topics are created through it (the mock does not serve
    CreateTopics). It keeps only about 5 MiB per partition: 16 partitions hold ~700k records."""

    SCRIPT = (
        "import sys\n"
        "from sdk.testing.librdkafka_mock import LibrdkafkaMockCluster\n"
        "cluster = LibrdkafkaMockCluster(1)\n"
        "print(cluster.bootstrap, flush=True)\n"
        "for line in sys.stdin:\n"
        "    name, partitions = line.split()\n"
        "    cluster.create_topic(name, int(partitions))\n"
        "    print('ok', flush=True)\n"
        "cluster.close()\n"
    )

    def popen_options(self) -> dict[str, Any]:
        """The script imports ``sdk``: it runs from the project root, on its path."""
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return {"cwd": ROOT, "env": env}

    def create_topic(self, name: str, partitions: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{name} {partitions}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"


def fill(cluster: Any, n: int) -> str:
    """A new 16-partition topic holding ``n`` 100-byte records, spread evenly."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-consume-{uuid.uuid4().hex[:8]}"
    bootstrap = cluster.bootstrap
    if isinstance(cluster, MockClusterProcess):
        cluster.create_topic(topic, PARTITIONS)
    else:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "log_level": 0}
    )
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return topic


def measure(client: str, target: str, bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """One run in a fresh process: messages per second, and CPU microseconds per message."""
    return measure_rate(__file__, client, target, bootstrap, topic, n)


def main() -> None:
    args = client_parser(__doc__, 1_000_000, CLIENTS, TARGETS).parse_args()
    if args.worker:
        report_worker(WORKERS[args.worker], args)
        return
    if args.profile:
        with MockClusterProcess() as mock:
            count = min(args.messages, MOCK_MAX_MESSAGES)
            topic = fill(mock, count)
            started = time.perf_counter()
            run_worker(WORKERS[args.profile], mock.bootstrap, topic, count, profile=True)
            elapsed = time.perf_counter() - started
        print(f"{args.profile}: {count / elapsed:,.0f} msgs/s under cProfile")
        return

    clients = args.clients.split(",")
    targets = args.targets.split(",")
    rate: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    counts: dict[str, int] = {}
    for target in targets:
        if target == "reference":
            sys.path.insert(0, ROOT)
            from reference_broker.testing import BrokerProcess

            cluster: Any = BrokerProcess(log_level="WARNING")
        else:
            cluster = MockClusterProcess()
        count = args.messages if target == "reference" else min(args.messages, MOCK_MAX_MESSAGES)
        counts[target] = count
        with cluster:
            topic = fill(cluster, count)
            runs = in_turns(args.runs, clients, measure, target, cluster.bootstrap, topic, count)
            for client in clients:
                rate[(target, client)], cpu[(target, client)] = medians(runs[client])
                show_runs(target, client, runs[client])

    sizes = ", ".join(f"{target} {count:,}" for target, count in counts.items())
    print(
        f"\nMessages: {sizes}; {args.runs} runs, 100-byte values, {PARTITIONS} partitions, manual "
        "assignment from the beginning. Median msgs/s (ratio vs aiokafka) and median client CPU "
        "microseconds per message (ratio: aiokafka's CPU / this client's).\n"
    )
    print_ratio_table(clients, targets, rate, cpu)


if __name__ == "__main__":
    main()
