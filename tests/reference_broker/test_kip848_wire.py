"""KIP-848 on the wire against a broker process: ApiVersions offers ConsumerGroupHeartbeat and
ConsumerGroupDescribe only when the consumer protocol is enabled; ListGroups, DescribeGroups and
ConsumerGroupDescribe show a consumer group as Kafka does; a classic JoinGroup cannot enter it; and a
broker killed and restarted keeps the group (its records replayed from __consumer_offsets)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
)
from tests.reference_broker.wire import WireClient

TOPIC = "orders"


def _apis(bootstrap: str) -> dict[int, tuple[int, int]]:
    client = WireClient(bootstrap)
    try:
        answer = client.request(
            ApiVersionsRequest(client_software_name="wire-test", client_software_version="1"), 3
        )
        return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    finally:
        client.close()


def test_the_consumer_group_apis_are_offered_only_when_the_consumer_protocol_is_enabled(
    broker_factory: BrokerFactory,
) -> None:
    apis = _apis(broker_factory().bootstrap)
    assert (apis[68], apis[69]) == ((0, 1), (0, 0))
    classic_only = _apis(broker_factory({"group.coordinator.rebalance.protocols": "classic"}).bootstrap)
    assert 68 not in classic_only and 69 not in classic_only


def _until(call: Any, done: Any, timeout: float = 20.0) -> Any:
    """Repeat ``call`` until ``done(answer)`` (the group loads in the background after a start)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = call()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def _join(client: WireClient, group: str, member_id: str, epoch: int = 0, owned: Any = ()) -> Any:
    request = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=list(owned),
    )
    return _until(
        lambda: client.request(request, 1), lambda a: a.error_code != E.COORDINATOR_LOAD_IN_PROGRESS
    )


def test_a_consumer_group_is_listed_described_and_kept_across_a_broker_kill(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    group, member_id = f"g-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    client = WireClient(broker.bootstrap)
    try:
        client.request(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=3, replication_factor=1)
                ],
                timeout_ms=10_000,
            ),
            5,
        )
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        joined = _join(client, group, member_id)
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, member_id, 1)
        assert joined.heartbeat_interval_ms == 5000
        assert sorted(p for tp in joined.assignment.topic_partitions for p in tp.partitions) == [0, 1, 2]

        listed = client.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed] == [
            (group, "consumer", "Stable", "consumer")
        ]
        classic = client.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert classic.group_state == "Dead"
        refused = client.request(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            5,
        )
        assert refused.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    finally:
        client.close()

    broker.restart(kill=True)
    client = WireClient(broker.bootstrap)
    try:
        described = _until(
            lambda: client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0],
            lambda g: g.error_code != E.COORDINATOR_LOAD_IN_PROGRESS,
        )
        assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", 1)
        [member] = described.members
        assert (member.member_id, member.member_epoch) == (member_id, 1)
        assert [(tp.topic_name, sorted(tp.partitions)) for tp in member.assignment.topic_partitions] == [
            (TOPIC, [0, 1, 2])
        ]
        # The member goes on at its epoch, as if nothing happened.
        owned = [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
            for tp in member.assignment.topic_partitions
        ]
        beat = client.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=member_id, member_epoch=1, topic_partitions=owned
            ),
            1,
        )
        assert (beat.error_code, beat.member_epoch) == (0, 1)
        left = client.request(
            ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=-1), 1
        )
        assert (left.error_code, left.member_epoch) == (0, -1)
        empty = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
        assert (empty.group_state, empty.members) == ("Empty", [])
    finally:
        client.close()
