"""DeleteRecords on the internal topics is refused, as Kafka refuses it.

``__consumer_offsets`` and ``__transaction_state`` are the coordinators' memory: a log start moved
forward there loses committed offsets and open transactions at the next load. Kafka's
``ReplicaManager.deleteRecordsOnLocalLog`` answers INVALID_TOPIC_EXCEPTION for any partition of an
internal topic (``Topic.isInternal``), with the low watermark -1, and deletes nothing.
"""

from __future__ import annotations

import uuid

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DeleteRecordsRequest, ListOffsetsRequest
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.reference_broker.read_committed_helpers import read_committed_values  # noqa: E402

INTERNAL_PARTITIONS = 3
BROKER_CONFIG = {
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
}
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
HIGH_WATERMARK = -1


def delete_everything(topics: tuple[str, ...]) -> DeleteRecordsRequest:
    """DeleteRecords up to the high watermark of every partition of ``topics``."""
    return DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name=topic,
                partitions=[
                    DeleteRecordsRequest.DeleteRecordsPartition(partition_index=p, offset=HIGH_WATERMARK)
                    for p in range(INTERNAL_PARTITIONS)
                ],
            )
            for topic in topics
        ],
        timeout_ms=5000,
    )


def earliest_offsets(wire: WireClient, topic: str) -> list[int]:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-2)
                    for p in range(INTERNAL_PARTITIONS)
                ],
            )
        ],
    )
    return [p.offset for p in wire.request(request, 7).topics[0].partitions]


def test_delete_records_on_internal_topics_is_refused_and_their_state_survives_a_restart(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic, group = f"data-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        member.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        member.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tid-{group}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"sent-before-the-delete")
    assert producer.flush(30) == 0

    with WireClient(broker.bootstrap) as wire:
        answer = wire.request(delete_everything(INTERNAL_TOPICS), 2)
        # The connection still serves.
        log_starts = {name: earliest_offsets(wire, name) for name in INTERNAL_TOPICS}

    broker.restart()
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [committed] = reader.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        reader.close()
    assert committed.offset == 5, "the committed offset did not survive"
    producer.commit_transaction(30)  # the transaction is still known to its coordinator
    assert read_committed_values(broker.bootstrap, topic) == [b"sent-before-the-delete"]

    codes = {
        (t.name, p.partition_index): (p.error_code, p.low_watermark)
        for t in answer.topics
        for p in t.partitions
    }
    assert log_starts == {name: [0] * INTERNAL_PARTITIONS for name in INTERNAL_TOPICS}
    assert codes == {
        (name, p): (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
        for name in INTERNAL_TOPICS
        for p in range(INTERNAL_PARTITIONS)
    }


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "reference_broker":
        return broker_factory(BROKER_CONFIG).bootstrap
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def test_the_refusal_is_kafkas(bootstrap: str) -> None:
    """Same request, same answer from Apache Kafka and from the reference broker."""
    topic, group = f"data-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:  # makes __consumer_offsets exist
        member.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        member.close()
    with WireClient(bootstrap) as wire:
        answer = wire.request(delete_everything(("__consumer_offsets",)), 2)
    assert [(p.error_code, p.low_watermark) for p in answer.topics[0].partitions] == [
        (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    ] * INTERNAL_PARTITIONS
