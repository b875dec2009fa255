"""What a transactional producer raises when the group coordinator refuses its offsets (KIP-447).

Offsets sent with a consumer's ``group_metadata()`` are checked against the group: a generation
the group has left behind (ILLEGAL_GENERATION) or a member it does not know (UNKNOWN_MEMBER_ID)
makes the transaction abortable with a ``CommitFailedError`` as the cause, and a static member's
instance id now held by another member id (FENCED_INSTANCE_ID) with a ``FencedInstanceIdError``,
as Kafka's Java producer reports them. The producer is not fenced: after ``abort_transaction``
the next transaction commits.

Against the reference broker and Apache Kafka, with a real static member in the group.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import sync
from sdk.client.cluster import TopicPartition
from sdk.consumer import ConsumerGroupMetadata
from sdk.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    TransactionAbortableError,
    UnknownMemberIdError,
)

pytestmark = pytest.mark.timeout(120)

BROKER_CONFIG = {
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}
INSTANCE_ID = "instance-1"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["reference", pytest.param("kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    if request.param == "kafka":
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return str(request.getfixturevalue("broker_factory")(BROKER_CONFIG).bootstrap)


@pytest.fixture
def member(bootstrap: str) -> Iterator[sync.Consumer]:
    """A static member that owns the topic's only partition."""
    topic = unique("refused")
    with sync.Producer(bootstrap_servers=bootstrap) as producer:
        producer.send(topic, b"input").get(timeout=30)
    with sync.Consumer(topic, bootstrap_servers=bootstrap, group_id=unique("group"),
                       group_instance_id=INSTANCE_ID, auto_offset_reset="earliest",
                       enable_auto_commit=False, session_timeout_ms=10000) as consumer:
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the member was never assigned"
            consumer.poll(timeout_ms=100)
        yield consumer


def refused_identity(joined: ConsumerGroupMetadata, answer: str) -> ConsumerGroupMetadata:
    """The member's identity, altered so that the coordinator gives ``answer``."""
    if answer == "ILLEGAL_GENERATION":
        return joined._replace(generation_id=joined.generation_id + 5)
    if answer == "UNKNOWN_MEMBER_ID":
        return joined._replace(member_id="not-a-member", group_instance_id=None)
    assert answer == "FENCED_INSTANCE_ID"
    return joined._replace(member_id="not-a-member")


@pytest.mark.parametrize(
    "answer, cause, refusal",
    [
        ("ILLEGAL_GENERATION", CommitFailedError, IllegalGenerationError),
        ("UNKNOWN_MEMBER_ID", CommitFailedError, UnknownMemberIdError),
        ("FENCED_INSTANCE_ID", FencedInstanceIdError, None),
    ],
)
def test_refused_offsets_make_the_transaction_abortable_with_the_groups_reason(
    bootstrap: str, member: sync.Consumer, answer: str, cause: type[Exception], refusal: Any
) -> None:
    (tp,) = member.assignment()
    joined = member.group_metadata()
    output = unique("out")
    with sync.Producer(bootstrap_servers=bootstrap, transactional_id=unique("txn")) as producer:
        producer.begin_transaction()
        producer.send(output, b"never visible")
        with pytest.raises(TransactionAbortableError) as raised:
            producer.send_offsets_to_transaction({tp: 1}, refused_identity(joined, answer))
        error = raised.value.__cause__
        assert isinstance(error, cause), repr(error)
        if refusal is not None:
            assert isinstance(error.__cause__, refusal), repr(error.__cause__)
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(output, b"visible")
        producer.send_offsets_to_transaction({TopicPartition(tp.topic, tp.partition): 1}, joined)
        producer.commit_transaction()
    assert member.committed(tp) == 1
