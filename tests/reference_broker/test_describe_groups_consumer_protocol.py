"""DescribeGroups (the classic API) asked about a KIP-848 consumer-protocol group, on our broker and
on Apache Kafka 4.1: the answer must be the one Kafka gives (error code, state, protocol type,
members) at the versions before and after v6 started reporting unknown groups as errors."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
)
from tests.reference_broker.security.conftest import PLAIN_JAAS, free_port, plain_login
from tests.reference_broker.wire import WireClient

TIMEOUT_S = 30.0
AUTHORIZED_OPS_OMITTED = -(2**31)
#: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS as bits of Kafka's AclOperation codes.
GROUP_OPERATIONS = sum(1 << code for code in (3, 6, 8, 10, 11))
COORDINATOR_NOT_READY = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory().bootstrap


def _join_consumer_group(client: WireClient, group: str, topic: str, member_id: str) -> None:
    new_topic = CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
    client.request(CreateTopicsRequest(topics=[new_topic], timeout_ms=10_000), 5)
    client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
    join = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    deadline = time.monotonic() + TIMEOUT_S
    while (joined := client.request(join, 1)).error_code in COORDINATOR_NOT_READY:
        assert time.monotonic() < deadline, joined
        time.sleep(0.1)
    assert joined.error_code == 0, joined


def _summary(described: Any) -> tuple[Any, ...]:
    return (
        described.error_code,
        described.error_message,
        described.group_state,
        described.protocol_type,
        described.protocol_data,
        list(described.members),
        described.authorized_operations,
    )


def test_describe_groups_of_a_consumer_protocol_group_answers_as_kafka(bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group = f"describe-848-{tag}", f"describe-848-group-{tag}"
    client = WireClient(bootstrap)
    try:
        _join_consumer_group(client, group, topic, f"member-{tag}")
        answers = {
            (version, with_operations): _summary(
                client.request(
                    DescribeGroupsRequest(groups=[group], include_authorized_operations=with_operations),
                    version,
                ).groups[0]
            )
            for version in (0, 5, 6)
            for with_operations in (False, True)
        }
    finally:
        client.close()
    not_classic = f"Group {group} is not a classic group."
    not_classic = f"Group {group} is not a classic group."
    omitted = AUTHORIZED_OPS_OMITTED
    for with_operations in (False, True):
        assert answers[(0, with_operations)] == (E.NONE, None, "Dead", "", "", [], omitted)
        # An error answer carries no operations, asked for or not.
        unknown = (E.GROUP_ID_NOT_FOUND, not_classic, "Dead", "", "", [], omitted)
        assert answers[(6, with_operations)] == unknown
    assert answers[(5, False)] == (E.NONE, None, "Dead", "", "", [], omitted)
    assert answers[(5, True)] == (E.NONE, None, "Dead", "", "", [], GROUP_OPERATIONS)


def test_group_operations_are_every_operation_a_group_acl_can_name(bootstrap: str) -> None:
    """Without an authorizer a group's authorized operations are all the group ACL operations,
    the config ones included, for a classic group (DescribeGroups) as for a consumer group
    (ConsumerGroupDescribe)."""
    tag = uuid.uuid4().hex[:8]
    topic, group, classic = f"ops-848-{tag}", f"ops-848-group-{tag}", f"ops-classic-{tag}"
    client = WireClient(bootstrap)
    try:
        _join_consumer_group(client, group, topic, f"member-{tag}")
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[classic]), 4)
        joined = client.request(
            JoinGroupRequest(
                group_id=classic,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            3,
        )
        assert joined.error_code == 0, joined
        classic_ops = client.request(
            DescribeGroupsRequest(groups=[classic], include_authorized_operations=True), 5
        ).groups[0]
        consumer_ops = client.request(
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=True), 0
        ).groups[0]
    finally:
        client.close()
    assert (classic_ops.error_code, classic_ops.authorized_operations) == (E.NONE, GROUP_OPERATIONS)
    assert (consumer_ops.error_code, consumer_ops.authorized_operations) == (E.NONE, GROUP_OPERATIONS)


def test_with_an_authorizer_an_error_answer_still_carries_no_operations(
    broker_factory: BrokerFactory,
) -> None:
    """Kafka fills in the operations of the groups described without error only: an unknown (or
    not classic) group's answer keeps the 'omitted' value, for a super user too."""
    address = f"127.0.0.1:{free_port()}"
    broker_factory(
        {
            "listeners": f"SASL_PLAINTEXT://{address}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        }
    )
    tag = uuid.uuid4().hex[:8]
    topic, group, classic = f"ops-acl-{tag}", f"ops-acl-group-{tag}", f"ops-acl-classic-{tag}"
    client = WireClient(address)
    try:
        plain_login(client, "admin", "admin-pw")
        _join_consumer_group(client, group, topic, f"member-{tag}")
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[classic]), 4)
        joined = client.request(
            JoinGroupRequest(
                group_id=classic,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            3,
        )
        assert joined.error_code == 0, joined
        request = DescribeGroupsRequest(
            groups=[group, f"missing-{tag}", classic], include_authorized_operations=True
        )
        answers = {g.group_id: g for g in client.request(request, 6).groups}
    finally:
        client.close()
    assert (answers[group].error_code, answers[group].authorized_operations) == (
        E.GROUP_ID_NOT_FOUND,
        AUTHORIZED_OPS_OMITTED,
    )
    missing = answers[f"missing-{tag}"]
    assert (missing.error_code, missing.authorized_operations) == (
        E.GROUP_ID_NOT_FOUND,
        AUTHORIZED_OPS_OMITTED,
    )
    assert (answers[classic].error_code, answers[classic].authorized_operations) == (E.NONE, GROUP_OPERATIONS)
