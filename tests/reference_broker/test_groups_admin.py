"""Group administration through confluent-kafka's AdminClient (librdkafka's ListGroups,
DescribeGroups, DeleteGroups, OffsetFetch and OffsetCommit requests) against the reference broker."""

from __future__ import annotations

import time
import uuid

import pytest

from reference_broker.testing import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

CONFIG = {"num.partitions": 2, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def group_broker() -> BrokerProcess:
    with BrokerProcess(config=CONFIG) as proc:
        yield proc


def test_list_describe_alter_and_delete_consumer_groups(group_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    topic, group = unique("t"), unique("g")
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 2)])[topic].result(10)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert len(consumer.assignment()) == 2

    listed = admin.list_consumer_groups(request_timeout=10).result()
    states = {g.group_id: g.state for g in listed.valid}
    assert states.get(group) == ConsumerGroupState.STABLE
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert described.state == ConsumerGroupState.STABLE and described.partition_assignor == "range"
    assert len(described.members) == 1
    assigned = {(tp.topic, tp.partition) for tp in described.members[0].assignment.topic_partitions}
    assert assigned == {(topic, 0), (topic, 1)}

    deleted = admin.delete_consumer_groups([group], request_timeout=10)[group]
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        deleted.result()
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
    consumer.close()

    offsets = [TopicPartition(topic, 0, 11), TopicPartition(topic, 1, 12)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result()
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    assert sorted((tp.partition, tp.offset) for tp in fetched.topic_partitions) == [(0, 11), (1, 12)]

    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    remaining = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}
    assert group not in remaining
