"""A classic static member that replaces the last consumer-protocol static member of a consumer
group (same group.instance.id) turns the group into a classic group at that JoinGroup, on our broker
as on Apache Kafka 4.1 (``classicGroupJoinToConsumerGroup``): no leave needed, no rebalance; the new
member is answered the replaced member's partitions at SyncGroup."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.consumer.assignors.protocol import Subscription, decode_assignment, encode_subscription
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    SyncGroupRequest,
)
from tests.reference_broker.wire import WireClient

TIMEOUT_S = 30.0
COORDINATOR_NOT_READY = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory().bootstrap


def _group_type(client: WireClient, group: str) -> str | None:
    listed = client.request(ListGroupsRequest(), 5).groups
    return next((g.group_type for g in listed if g.group_id == group), None)


def _static_consumer_member(client: WireClient, group: str, topic: str, instance_id: str) -> str:
    """A consumer-protocol static member holding the topic's partition; its member id."""
    member_id = uuid.uuid4().hex[:22]
    heartbeat = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        instance_id=instance_id,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    deadline = time.monotonic() + TIMEOUT_S
    while (answer := client.request(heartbeat, 1)).error_code in COORDINATOR_NOT_READY:
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
    assert answer.error_code == 0, answer
    while answer.assignment is None or not answer.assignment.topic_partitions:
        assert time.monotonic() < deadline, f"the static member got no partition: {answer}"
        time.sleep(0.1)
        heartbeat = ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=answer.member_epoch, topic_partitions=[]
        )
        answer = client.request(heartbeat, 1)
        assert answer.error_code == 0, answer
    # Acknowledge the partition so the member owns it.
    owned = [
        ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t.topic_id, partitions=list(t.partitions))
        for t in answer.assignment.topic_partitions
    ]
    acknowledged = client.request(
        ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=answer.member_epoch, topic_partitions=owned
        ),
        1,
    )
    assert acknowledged.error_code == 0, acknowledged
    return member_id


def _summary(described: Any) -> tuple[Any, ...]:
    return (
        described.error_code,
        described.group_state,
        described.protocol_type,
        described.protocol_data,
        [(m.member_id, m.group_instance_id) for m in described.members],
    )


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group(
    bootstrap: str,
) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group, instance_id = f"static-down-{tag}", f"static-down-group-{tag}", f"instance-{tag}"
    client = WireClient(bootstrap)
    try:
        new_topic = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
        client.request(CreateTopicsRequest(topics=[new_topic], timeout_ms=10_000), 5)
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        replaced = _static_consumer_member(client, group, topic, instance_id)
        assert _group_type(client, group) == "consumer"

        metadata = encode_subscription(Subscription(topics=[topic]), 3)
        joined = client.request(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id="",
                group_instance_id=instance_id,
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
            ),
            5,
        )
        assert joined.error_code == 0, joined
        assert joined.member_id != replaced
        # The group is classic as of this JoinGroup's answer.
        assert _group_type(client, group) == "classic"
        described = client.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert _summary(described)[:4] == (E.NONE, "Stable", "consumer", "range")
        assert _summary(described)[4] == [(joined.member_id, instance_id)]
        synced = client.request(
            SyncGroupRequest(
                group_id=group,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id=instance_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[],
            ),
            5,
        )
        assert synced.error_code == 0, synced
        assert [tuple(tp) for tp in decode_assignment(synced.assignment).partitions] == [(topic, 0)]
        # Stable and nobody else: the heartbeat needs no rebalance.
        beat = HeartbeatRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
        )
        assert client.request(beat, 4).error_code == E.NONE
    finally:
        client.close()
