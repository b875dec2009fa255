"""AdminClient's consumer groups and their offsets, on the reference broker and Apache Kafka;
the groups are confluent-kafka consumers and every result is read back by confluent-kafka."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from sdk.admin import AclOperation, AdminClient, NewTopic
from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import GroupIdNotFoundError, NonEmptyGroupError, UnknownMemberIdError

from .conftest import Cluster, oracle_topic, wait_for

PARTITIONS = 3
PER_PARTITION = 5


async def make_topic(admin: AdminClient, cluster: Cluster, topic: str) -> None:
    assert (await admin.create_topics([NewTopic(topic, PARTITIONS, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def group_consumer(cluster: Cluster, group: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "log_level": 0,
        }
    )


def consume_and_commit(cluster: Cluster, topic: str, group: str, count: int) -> confluent_kafka.Consumer:
    """A member of ``group`` that read ``count`` records of every partition and committed them
    (still in the group: close it to leave)."""
    consumer = group_consumer(cluster, group)
    consumer.subscribe([topic])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while any(seen.get(p, 0) < count for p in range(PARTITIONS)):
        assert time.monotonic() < deadline, f"consumed only {seen}"
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        seen[msg.partition()] = seen.get(msg.partition(), 0) + 1
    consumer.commit(
        offsets=[confluent_kafka.TopicPartition(topic, p, count) for p in range(PARTITIONS)],
        asynchronous=False,
    )
    return consumer


def oracle_committed(cluster: Cluster, topic: str, group: str) -> dict[int, int]:
    """What librdkafka reads as the group's committed offsets (-1001: none)."""
    consumer = group_consumer(cluster, group)
    try:
        answer = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15
        )
        return {tp.partition: tp.offset for tp in answer}
    finally:
        consumer.close()


def oracle_groups(cluster: Cluster) -> set[str]:
    oracle = cluster.oracle()
    result = oracle.list_consumer_groups(request_timeout=10).result(timeout=15)
    return {g.group_id for g in result.valid}


@pytest.fixture
def members() -> Iterator[list[confluent_kafka.Consumer]]:
    started: list[confluent_kafka.Consumer] = []
    try:
        yield started
    finally:
        for consumer in started:
            consumer.close()


async def test_list_describe_and_offsets_of_a_group(
    admin: AdminClient, cluster: Cluster, name: Any, members: list[Any]
) -> None:
    topic, group = name("t"), name("g")
    await make_topic(admin, cluster, topic)
    member = consume_and_commit(cluster, topic, group, 2)
    members.append(member)

    listed = {g.group_id: g for g in await admin.list_consumer_groups()}
    assert group in listed and listed[group].protocol_type == "consumer"
    assert group in oracle_groups(cluster)

    missing = name("missing")
    both = await admin.describe_consumer_groups([group, missing])
    assert both[missing].state == "Dead" or isinstance(both[missing].error, GroupIdNotFoundError)
    described = both[group]
    assert described.error is None and described.state == "Stable"
    assert described.protocol_type == "consumer" and described.partition_assignor in ("range", "roundrobin")
    assert len(described.members) == 1
    assert described.members[0].assignment == {TopicPartition(topic, p) for p in range(PARTITIONS)}
    assert described.coordinator >= 0

    offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        TopicPartition(topic, p): (2, "") for p in range(PARTITIONS)
    }
    assert {tp.partition: o.offset for tp, o in offsets.items()} == oracle_committed(cluster, topic, group)
    coordinator = await admin.find_coordinator(group)
    some = await admin.list_consumer_group_offsets(group, coordinator, [TopicPartition(topic, 1)])
    assert list(some) == [TopicPartition(topic, 1)]

    # aiokafka's positional arguments: the coordinator given, authorized operations asked for.
    [again] = (await admin.describe_consumer_groups([group], coordinator, True)).values()
    assert again.coordinator == coordinator and again.members == described.members
    assert again.authorized_operations is not None
    assert {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE} <= again.authorized_operations
    listed_here = await admin.list_consumer_groups([coordinator])
    assert group in {g.group_id for g in listed_here}

    states = {g.group_id: g.state for g in await admin.list_consumer_groups(states=["Stable"])}
    assert states.get(group) == "Stable"


async def test_alter_offsets_needs_an_empty_group_and_shows_in_lag(
    admin: AdminClient, cluster: Cluster, name: Any, members: list[Any]
) -> None:
    topic, group = name("t"), name("g")
    await make_topic(admin, cluster, topic)
    member = consume_and_commit(cluster, topic, group, 2)
    refused = await admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 4})
    assert isinstance(refused[TopicPartition(topic, 0)], UnknownMemberIdError)
    member.close()

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    answers = await admin.alter_consumer_group_offsets(
        group, {tps[0]: 4, tps[1]: OffsetAndMetadata(1, "by admin")}
    )
    assert answers == {tps[0]: None, tps[1]: None}
    assert oracle_committed(cluster, topic, group) == {0: 4, 1: 1, 2: 2}
    assert (await admin.list_consumer_group_offsets(group))[tps[1]].metadata == "by admin"

    lag = await admin.consumer_lag(group)
    assert {tp.partition: (x.committed, x.end_offset, x.lag) for tp, x in lag.items()} == {
        0: (4, PER_PARTITION, 1),
        1: (1, PER_PARTITION, 4),
        2: (2, PER_PARTITION, 3),
    }
    oracle = group_consumer(cluster, group)
    try:
        assert (
            oracle.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1]
            == PER_PARTITION
        )
    finally:
        oracle.close()


async def test_delete_group_offsets_and_groups(
    admin: AdminClient, cluster: Cluster, name: Any, members: list[Any]
) -> None:
    topic, group, missing = name("t"), name("g"), name("missing")
    await make_topic(admin, cluster, topic)
    member = consume_and_commit(cluster, topic, group, 3)

    busy = await admin.delete_consumer_groups([group, missing])
    assert isinstance(busy[group], NonEmptyGroupError)
    assert isinstance(busy[missing], GroupIdNotFoundError)
    member.close()

    deleted = await admin.delete_consumer_group_offsets(group, [TopicPartition(topic, 0)])
    assert deleted == {TopicPartition(topic, 0): None}
    assert oracle_committed(cluster, topic, group) == {0: -1001, 1: 3, 2: 3}

    assert await admin.delete_consumer_groups([group]) == {group: None}
    wait_for(lambda: group not in oracle_groups(cluster), f"{group} gone")
    assert oracle_committed(cluster, topic, group) == {0: -1001, 1: -1001, 2: -1001}
    gone = (await admin.describe_consumer_groups([group]))[group]
    assert gone.state == "Dead" or isinstance(gone.error, GroupIdNotFoundError)
