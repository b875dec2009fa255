"""Shared by the read_committed tests across segment rolls: topics with a segment size, and the two
read_committed readers (confluent-kafka's consumer and ``sdk.sync.Consumer``) reading every
partition from its start to its end, optionally with fetch sizes small enough for one batch."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from sdk.consumer import TopicPartition
from sdk.sync import Consumer

#: (partition, offset, value) of one record read.
Read = tuple[int, int, bytes]

#: Broker settings for transactions on one node with quick coordinator housekeeping.
TXN_BROKER = {
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: Any) -> str:
    """Create ``name`` with topic configs (``segment_bytes=...`` for ``segment.bytes``; a size
    below Kafka 4's 1 MiB floor becomes the test-only ``internal.segment.bytes``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1,
        config={_config_name(key, value): str(value) for key, value in configs.items()},
    )
    admin.create_topics([topic], operation_timeout=20)[name].result(30)
    return name


def _config_name(key: str, value: Any) -> str:
    name = key.replace("_", ".")
    if name == "segment.bytes" and int(value) < 1 << 20:
        return "internal.segment.bytes"
    return name


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> int:
    """DeleteRecords up to ``before``; the new log start offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    tp = confluent_kafka.TopicPartition(topic, partition, before)
    result = admin.delete_records([tp], operation_timeout=20)[tp].result(30)
    return int(result.low_watermark)


def confluent_transactional(bootstrap: str, **extra: Any) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "transactional.id": unique("tid"), "linger.ms": 5,
        "log_level": 0, **extra,
    })
    producer.init_transactions(30)
    return producer


def _confluent_fetch_sizes(fetch_bytes: int | None) -> dict[str, Any]:
    """Per-partition fetch size ``fetch_bytes``; librdkafka wants ``fetch.max.bytes`` at least
    ``message.max.bytes``, whose minimum is 1000."""
    if fetch_bytes is None:
        return {}
    return {"max.partition.fetch.bytes": fetch_bytes, "fetch.max.bytes": max(fetch_bytes, 1000),
            "message.max.bytes": 1000}


def read_committed_confluent(
    bootstrap: str, topic: str, partitions: int, expected: int, *,
    fetch_bytes: int | None = None, timeout: float = 60,
) -> list[Read]:
    """Records confluent-kafka's read_committed consumer returns from the start of every partition,
    until it has ``expected`` of them and stands at the end (the last stable offset) of each."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique("reader"),
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True, "log_level": 0, **_confluent_fetch_sizes(fetch_bytes),
    })
    start = confluent_kafka.OFFSET_BEGINNING
    consumer.assign([confluent_kafka.TopicPartition(topic, p, start) for p in range(partitions)])
    got: list[Read] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(got) < expected or len(at_end) < partitions):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            got.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def read_committed_values(bootstrap: str, topic: str, timeout: float = 30) -> list[bytes]:
    """The values of partition 0 of ``topic`` a read_committed reader sees, waiting up to
    ``timeout`` for the first and reading on to the last stable offset."""
    return [value for _, _, value in read_committed_confluent(bootstrap, topic, 1, 1, timeout=timeout)]


def read_committed_sdk(
    bootstrap: str, topic: str, partitions: int, expected: int, *,
    fetch_bytes: int | None = None, timeout: float = 60,
) -> list[Read]:
    """Records ``sdk.sync.Consumer`` returns under read_committed from the start of every
    partition, until it has ``expected`` of them and its positions reach the end offsets (the
    last stable offsets)."""
    sizes = {} if fetch_bytes is None else {
        "max_partition_fetch_bytes": fetch_bytes, "fetch_max_bytes": fetch_bytes}
    got: list[Read] = []
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                  enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                  **sizes) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
            len(got) < expected or any(consumer.position(tp) < ends[tp] for tp in tps)
        ):
            for tp, records in consumer.getmany(timeout_ms=200).items():
                got.extend((tp.partition, r.offset, r.value) for r in records)
    return got
