"""Crashes and damaged files, checked through real clients after a restart on the same port.

The storage layer's documented behaviour (``reference_broker/log/partition_log.py``): a torn or
garbage tail of the last segment is truncated at recovery; damage inside an older segment is kept
on disk, logged, and never served: fetches before it succeed, a fetch that must cross it gets
KAFKA_STORAGE_ERROR, and offsets after it stay readable when the damaged batch could be framed.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from reference_broker.testing import BrokerFactory, BrokerProcess  # noqa: E402
from sdk.protocol.errors import ErrorCode  # noqa: E402
from sdk.records import iter_batches  # noqa: E402
from tests.reference_broker.wire import WireClient, fetch_request  # noqa: E402


def create_topic(broker: BrokerProcess, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(20)


def read_everything(broker: BrokerProcess, topic: str, partitions: int, expected: int) -> dict[int, list]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    got: dict[int, list] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, timeout=0.2)
            for msg in batch:
                if msg.error() is None:
                    got[msg.partition()].append((msg.offset(), msg.value()))
            if batch:
                idle_since = time.monotonic()
            if sum(map(len, got.values())) >= expected and time.monotonic() - idle_since > 0.5:
                break
    finally:
        consumer.close()
    return got


def test_kill_during_idempotent_produce_loses_and_duplicates_nothing(broker_factory: BrokerFactory) -> None:
    proc = broker_factory()
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    partitions = 3
    create_topic(proc, topic, partitions, {"internal.segment.bytes": str(256 * 1024)})
    acked: list[tuple[int, int, bytes]] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        producer = Producer(
            {
                "bootstrap.servers": proc.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.size": 16384,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            }
        )

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                failures.append(str(err))

        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, value=b"m%08d" % i, key=b"%d" % (i % 50), on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
            if i % 100 == 0:
                producer.poll(0.01)
        assert producer.flush(60) == 0

    thread = threading.Thread(target=load)
    thread.start()
    try:
        # Load for a second after the first acknowledgement (the producer's start-up, which
        # waits for the broker's fsync of its producer-id block, may take longer on a busy disk).
        deadline = time.monotonic() + 30
        while not acked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert acked, "no acknowledgements before the crash"
        time.sleep(1.0)
        before = len(acked)
        proc.kill()
        time.sleep(0.3)
        proc.start()
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join(90)
    assert not failures, failures[:5]
    assert len(acked) > before
    got = read_everything(proc, topic, partitions, len(acked))
    values = [v for msgs in got.values() for _, v in msgs]
    assert len(values) == len(set(values)), "a message was written twice"
    for p, msgs in got.items():
        offsets = [o for o, _ in msgs]
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"
    stored = {(p, o): v for p, msgs in got.items() for o, v in msgs}
    for p, o, v in acked:
        assert stored.get((p, o)) == v, f"acknowledged {v!r} at {p}/{o} is missing"
    for p in range(partitions):  # per-partition order: acknowledged values by increasing offset
        ours = sorted((o, v) for q, o, v in acked if q == p)
        assert [v for _, v in ours] == sorted(v for _, v in ours)


def produce_values(broker: BrokerProcess, topic: str, values: list[bytes], linger_ms: int = 0) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": linger_ms, "batch.num.messages": 1}
    )
    for value in values:
        producer.produce(topic, value=value)
        producer.flush(10)  # one batch per message, so damage hits exactly one
    assert producer.flush(20) == 0


def log_files(proc: BrokerProcess, topic: str) -> list[Path]:
    return sorted((proc.data_dir / f"{topic}-0").glob("*.log"))


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_torn_active_segment_is_truncated(broker_factory: BrokerFactory, damage: str) -> None:
    proc = broker_factory()
    topic = f"torn-{uuid.uuid4().hex[:8]}"
    create_topic(proc, topic, 1)
    values = [b"value-%d" % i for i in range(10)]
    produce_values(proc, topic, values)
    proc.kill()
    (active,) = log_files(proc, topic)
    size = active.stat().st_size
    if damage == "garbage":
        with open(active, "ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x01\x00garbage-garbage")
        survivors = values
    else:
        with open(active, "r+b") as f:
            f.truncate(size - 5)  # cut the last batch
        survivors = values[:-1]
    proc.start()
    got = read_everything(proc, topic, 1, len(survivors))
    assert [v for _, v in got[0]] == survivors
    produce_values(proc, topic, [b"after"])
    got = read_everything(proc, topic, 1, len(survivors) + 1)
    assert [o for o, _ in got[0]] == list(range(len(survivors) + 1))
    assert got[0][-1][1] == b"after"
    assert "truncat" in proc.stderr().lower()


def raw_fetch(proc: BrokerProcess, topic: str, offset: int) -> object:
    with WireClient(proc.bootstrap) as client:
        return client.request(fetch_request(topic, 0, offset), 12).responses[0].partitions[0]


def test_corrupt_byte_in_closed_segment_is_never_served(broker_factory: BrokerFactory) -> None:
    proc = broker_factory()
    topic = f"rot-{uuid.uuid4().hex[:8]}"
    create_topic(proc, topic, 1, {"internal.segment.bytes": "400"})
    values = [b"payload-%03d-" % i + b"x" * 60 for i in range(30)]
    produce_values(proc, topic, values)
    assert proc.terminate() == 0
    segments = log_files(proc, topic)
    assert len(segments) >= 4
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    first = next(iter_batches(bytes(data)))
    bad_offset = first.base_offset
    data[first.size_in_bytes - 3] ^= 0xFF  # inside the first batch's last record
    victim.write_bytes(bytes(data))
    proc.start()

    got = read_everything(proc, topic, 1, bad_offset)
    assert [v for _, v in got[0]] == values[:bad_offset]
    assert raw_fetch(proc, topic, bad_offset).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    after = raw_fetch(proc, topic, bad_offset + 1)
    assert after.error_code == 0
    assert next(iter_batches(bytes(after.records))).base_offset == bad_offset + 1
    assert "corrupt" in proc.stderr().lower()
