"""aiokafka against the shared broker: plain and idempotent produce, assign-mode consume."""

from __future__ import annotations

import uuid

import pytest

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

from reference_broker.testing import BrokerProcess  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def consume(broker: BrokerProcess, topic: str, partitions: int, expected: int) -> list:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list = []
        for _ in range(100):
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend(records)
            if len(got) >= expected:
                break
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("idempotent", [False, True])
async def test_produce_and_consume(broker: BrokerProcess, idempotent: bool) -> None:
    topic = unique("aio")
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=idempotent, acks="all", linger_ms=5
    )
    await producer.start()
    try:
        # The first send auto-creates the topic through Metadata.
        sent = []
        for i in range(100):
            meta = await producer.send_and_wait(topic, f"value-{i}".encode(), key=f"key-{i}".encode())
            sent.append((meta.partition, meta.offset))
        assert [o for _, o in sent] == list(range(100))
        futures = [await producer.send(topic, f"batch-{i}".encode()) for i in range(200)]
        metas = [await f for f in futures]
        assert [m.offset for m in metas] == list(range(100, 300))
    finally:
        await producer.stop()
    records = await consume(broker, topic, 1, 300)
    assert [r.offset for r in records] == list(range(300))
    assert records[0].key == b"key-0" and records[0].value == b"value-0"
    assert records[-1].value == b"batch-199"


async def test_gzip_and_lz4(broker: BrokerProcess) -> None:
    topic = unique("aio-codec")
    for codec in ("gzip", "lz4"):
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=10)
        await producer.start()
        try:
            futures = [await producer.send(topic, f"{codec}-{i}".encode()) for i in range(50)]
            for f in futures:
                await f
        finally:
            await producer.stop()
    records = await consume(broker, topic, 1, 100)
    assert [r.value for r in records] == [f"gzip-{i}".encode() for i in range(50)] + [
        f"lz4-{i}".encode() for i in range(50)
    ]


async def test_end_offsets_and_offsets_for_times(broker: BrokerProcess) -> None:
    topic = unique("aio-offsets")
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, b"x", timestamp_ms=1_000_000 + i * 1000)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        assert (await consumer.end_offsets([tp]))[tp] == 10
        assert (await consumer.beginning_offsets([tp]))[tp] == 0
        found = (await consumer.offsets_for_times({tp: 1_004_500}))[tp]
        assert found.offset == 5 and found.timestamp == 1_005_000
        assert (await consumer.offsets_for_times({tp: 2_000_000}))[tp] is None
    finally:
        await consumer.stop()
