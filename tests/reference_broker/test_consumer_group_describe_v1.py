"""ConsumerGroupDescribe v1 (KIP-1099) on our broker and on Apache Kafka 4.1: both advertise it,
and a consumer-protocol member is described with MemberType 1 (v0 has no MemberType)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    FindCoordinatorRequest,
)
from tests.reference_broker.wire import WireClient

TIMEOUT_S = 30.0
CONSUMER_MEMBER_TYPE = 1
COORDINATOR_NOT_READY = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory().bootstrap


def _described_member(client: WireClient, group: str) -> Any:
    """The group's only member as ConsumerGroupDescribe v1 shows it, once the group has one."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        answer = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]
        if answer.error_code == 0 and answer.members:
            return answer.members[0]
        assert time.monotonic() < deadline, f"{group} never had a member: {answer}"
        time.sleep(0.05)


def test_consumer_group_describe_v1_gives_the_member_type(bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group = f"describe-v1-{tag}", f"describe-v1-group-{tag}"
    client = WireClient(bootstrap)
    try:
        versions = client.request(
            ApiVersionsRequest(client_software_name="wire-test", client_software_version="1"), 3
        )
        offered = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
        assert offered[ConsumerGroupDescribeRequest.API_KEY] == (0, 1)
        new_topic = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
        client.request(CreateTopicsRequest(topics=[new_topic], timeout_ms=10_000), 5)
        join = ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=f"member-{tag}",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
        # FindCoordinator makes Kafka create __consumer_offsets if no group used it yet.
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        deadline = time.monotonic() + TIMEOUT_S
        # A new coordinator (Kafka's __consumer_offsets partition) answers these until it is ready.
        while (joined := client.request(join, 1)).error_code in COORDINATOR_NOT_READY:
            assert time.monotonic() < deadline, joined
            time.sleep(0.1)
        assert joined.error_code == 0, joined
        member = _described_member(client, group)
        assert (member.member_id, member.member_type) == (f"member-{tag}", CONSUMER_MEMBER_TYPE)
    finally:
        client.close()
