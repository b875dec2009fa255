"""AdminClient's ListOffsets and DeleteRecords, routed to the partitions' leaders, on the
reference broker and Apache Kafka; records written and read back by confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka

from sdk.admin import AdminClient, NewTopic, OffsetSpec, RecordsToDelete
from sdk.client.cluster import TopicPartition
from sdk.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

from .conftest import Cluster, oracle_topic, wait_for

#: Offsets 0..4 of partition 0, relative to a base time: offset 2 has the largest timestamp.
TIMESTAMP_STEPS = [0, 1000, 5000, 2000, 3000]


async def timed_topic(admin: AdminClient, cluster: Cluster, topic: str) -> int:
    """A 2-partition topic: partition 0 with records at base + TIMESTAMP_STEPS, partition 1 with
    5 records; returns the base time."""
    assert (await admin.create_topics([NewTopic(topic, 2, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    base = int(time.time() * 1000) - 60000
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    for step in TIMESTAMP_STEPS:
        producer.produce(topic, value=b"p0", partition=0, timestamp=base + step)
    for _ in range(5):
        producer.produce(topic, value=b"p1", partition=1)
    assert producer.flush(30) == 0
    return base


def read_partition(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of the partition, read by librdkafka."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "oracle",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)])
        records = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return records
                raise AssertionError(msg.error())
            records.append((msg.offset(), msg.timestamp()[1]))
        raise AssertionError(f"no end of {topic}-{partition} within 30 s")
    finally:
        consumer.close()


def oracle_watermarks(cluster: Cluster, topic: str, partition: int) -> tuple[int, int]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "oracle", "log_level": 0}
    )
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, partition), timeout=10
        )
        return low, high
    finally:
        consumer.close()


async def test_list_offsets_earliest_latest_by_time_and_max_timestamp(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic = name("lo")
    base = await timed_topic(admin, cluster, topic)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    records = read_partition(cluster, topic, 0)
    assert [ts - base for _, ts in records] == TIMESTAMP_STEPS

    answers = await admin.list_offsets({p0: OffsetSpec.earliest(), p1: OffsetSpec.latest()})
    assert (answers[p0].offset, answers[p1].offset) == (0, 5)
    assert oracle_watermarks(cluster, topic, 0)[0] == 0 and oracle_watermarks(cluster, topic, 1)[1] == 5

    by_time = (await admin.list_offsets({p0: OffsetSpec.for_timestamp(base + 1500)}))[p0]
    first_at_or_after = next(offset for offset, ts in records if ts >= base + 1500)
    assert (by_time.offset, by_time.timestamp) == (first_at_or_after, base + 5000)
    oracle = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "oracle", "log_level": 0}
    )
    try:
        [found] = oracle.offsets_for_times(
            [confluent_kafka.TopicPartition(topic, 0, base + 1500)], timeout=10
        )
    finally:
        oracle.close()
    assert found.offset == by_time.offset

    newest = (await admin.list_offsets({p0: OffsetSpec.max_timestamp()}))[p0]
    assert (newest.offset, newest.timestamp) == max(records, key=lambda r: r[1])

    after_all = (await admin.list_offsets({p0: OffsetSpec.for_timestamp(base + 10**6)}))[p0]
    assert after_all.offset == -1 and after_all.error is None


async def test_delete_records_moves_the_log_start_per_partition(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic = name("dr")
    await timed_topic(admin, cluster, topic)
    p0, p1, beyond = TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 7)
    answers = await admin.delete_records({p0: RecordsToDelete(3), p1: -1, beyond: 1})
    assert answers[p0].low_watermark == 3 and answers[p0].error is None
    assert answers[p1].low_watermark == 5
    assert isinstance(answers[beyond].error, UnknownTopicOrPartitionError)
    assert oracle_watermarks(cluster, topic, 0) == (3, 5)
    assert oracle_watermarks(cluster, topic, 1) == (5, 5)
    assert [offset for offset, _ in read_partition(cluster, topic, 0)] == [3, 4]
    assert (await admin.list_offsets({p0: OffsetSpec.earliest()}))[p0].offset == 3

    too_far = await admin.delete_records({p0: 99})
    assert isinstance(too_far[p0].error, OffsetOutOfRangeError)


async def test_an_unknown_topic_is_retried_until_the_deadline(admin: AdminClient, name: Any) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION is retried, so the deadline ends the call with a timeout whose
    cause is that error. A broker too loaded to answer a Metadata request within the deadline (a
    Kafka JVM on a busy runner) leaves a request timeout or a dropped connection as the cause,
    which says nothing about how the error is handled: such an attempt is made again with a
    longer deadline, while an unknown topic answered at once or a lost cause shows on every
    attempt."""
    tp = TopicPartition(name("missing"), 0)
    causes: list[BaseException | None] = []
    for timeout_ms in (1500, 5000, 15000):
        answer = (await admin.list_offsets({tp: OffsetSpec.latest()}, timeout_ms=timeout_ms))[tp]
        assert isinstance(answer.error, KafkaTimeoutError), answer.error
        causes.append(answer.error.__cause__)
        if not isinstance(causes[-1], KafkaTimeoutError | KafkaConnectionError):
            break
    assert isinstance(causes[-1], UnknownTopicOrPartitionError), causes
