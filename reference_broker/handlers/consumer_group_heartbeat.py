"""The KIP-848 consumer group APIs, answered by ``broker.groups.consumer``.

Versions served and per-version notes:

- ConsumerGroupHeartbeat (68) v0-1: v0 joins with an empty member id get one from the broker;
  v1 (KIP-1082) requires the client's own member id. SubscribedTopicRegex (v1) is resolved on the
  broker with RE2 semantics (``reference_broker.patterns``) after the heartbeat is answered; an
  invalid one gets INVALID_REGULAR_EXPRESSION.
- ConsumerGroupDescribe (69) v0-1: v1 (KIP-1099) adds each member's type, 0 for a classic
  member inside the consumer group and 1 for a consumer-protocol one. It shows the group as
  committed (``consumer_views``), as Kafka reads it at the last committed offset; so does
  ListGroups.

Both are offered (and so advertised by ApiVersions) only when ``group.coordinator.rebalance.protocols``
lists ``consumer``, as Kafka does; Kafka 4's default, and this broker's, lists it. While the
finalized ``group.version`` is below 1 (a cluster's ``kafka-features downgrade``), both answer
UNSUPPORTED_VERSION, as Kafka's KafkaApis does while the consumer protocol is not enabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.controller.supported_features import GROUP_VERSION
from reference_broker.coordinator.group.consumer_coordinator import HeartbeatArgs
from reference_broker.coordinator.group.consumer_group import Assignment, ConsumerGroupState
from reference_broker.features import finalized_level
from reference_broker.security.acl import ResourceType
from reference_broker.security.authorizer import SUPPORTED_OPERATIONS
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

E = ErrorCode
CONSUMER_PROTOCOL = "consumer"
PROTOCOLS_KEY = "group.coordinator.rebalance.protocols"
AUTHORIZED_OPS_OMITTED = -(2**31)
#: the message of Kafka's UnsupportedVersionException, which its answers carry
_DISABLED = "The version of API is not supported."
#: ConsumerGroupDescribe v1's MemberType of a member speaking ConsumerGroupHeartbeat.
CONSUMER_MEMBER_TYPE = 1
#: A member speaking the classic protocol inside the consumer group.
CLASSIC_MEMBER_TYPE = 0
# READ (3), DELETE (6), DESCRIBE (8): everything a group allows on an ACL-less broker.
#: Every operation a group ACL can name, as bits (an authorizer narrows them to the principal's).
ALL_GROUP_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP])


def _client_host(ctx: RequestContext) -> str:
    peer = getattr(ctx.connection, "peer", "?")
    return "/" + peer.rpartition(":")[0] if ":" in peer else peer


def _consumer_protocol_enabled(broker: Broker) -> bool:
    return finalized_level(broker, GROUP_VERSION) >= 1


def handle_heartbeat(
    broker: Broker, ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    if not _consumer_protocol_enabled(broker):
        return ConsumerGroupHeartbeatResponse(error_code=E.UNSUPPORTED_VERSION, error_message=_DISABLED)
    owned: Assignment | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    answer = broker.groups.consumer.heartbeat(
        HeartbeatArgs(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=None
            if request.subscribed_topic_names is None
            else list(request.subscribed_topic_names),
            subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=_client_host(ctx),
            api_version=ctx.api_version,
        )
    )
    if answer.error:
        return ConsumerGroupHeartbeatResponse(error_code=answer.error, error_message=answer.message)
    R = ConsumerGroupHeartbeatResponse
    return R(
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        assignment=None
        if answer.assignment is None
        else R.Assignment(
            topic_partitions=[
                R.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in sorted(answer.assignment.items(), key=lambda i: str(i[0]))
                if ps
            ]
        ),
    )


def heartbeat_error(
    request: ConsumerGroupHeartbeatRequest, version: int, code: int
) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=code)


def _described_assignment(broker: Broker, assignment: Assignment) -> ConsumerGroupDescribeResponse.Assignment:
    R = ConsumerGroupDescribeResponse
    parts = []
    for topic_id, partitions in sorted(assignment.items(), key=lambda i: str(i[0])):
        meta = broker.storage.topic_by_id(topic_id) if partitions and broker.storage is not None else None
        if meta is not None:
            parts.append(
                R.TopicPartitions(topic_id=topic_id, topic_name=meta.name, partitions=sorted(partitions))
            )
    return R.Assignment(topic_partitions=parts)


def handle_describe(
    broker: Broker, ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    R = ConsumerGroupDescribeResponse
    if not _consumer_protocol_enabled(broker):
        return R(groups=[
            R.DescribedGroup(group_id=g, error_code=E.UNSUPPORTED_VERSION, error_message=_DISABLED)
            for g in request.group_ids])
    coordinator = broker.groups
    ops = ALL_GROUP_OPERATIONS if request.include_authorized_operations else AUTHORIZED_OPS_OMITTED
    described = []
    for group_id in request.group_ids:
        if unavailable := coordinator.unavailable(group_id):
            described.append(R.DescribedGroup(group_id=group_id, error_code=unavailable))
            continue
        group = coordinator.consumer.committed.group(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in coordinator.groups
                else f"Group {group_id} not found."
            )
            described.append(
                R.DescribedGroup(group_id=group_id, error_code=E.GROUP_ID_NOT_FOUND, error_message=message)
            )
            continue
        default = coordinator.consumer.config.assignors[0] if coordinator.consumer.config.assignors else ""
        described.append(
            R.DescribedGroup(
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.preferred_assignor(default),
                members=[
                    R.Member(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=list(m.subscribed_topic_names),
                        subscribed_topic_regex=m.subscribed_topic_regex,
                        assignment=_described_assignment(broker, m.assigned),
                        target_assignment=_described_assignment(broker, group.target.get(m.member_id, {})),
                        member_type=CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE,
                    )
                    for m in group.members.values()
                ],
                authorized_operations=ops,
            )
        )
    return R(groups=described)


def describe_error(
    request: ConsumerGroupDescribeRequest, version: int, code: int
) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(
        groups=[
            ConsumerGroupDescribeResponse.DescribedGroup(group_id=g, error_code=code)
            for g in request.group_ids
        ]
    )


def listed_consumer_groups(broker: Broker) -> list[tuple[str, str]]:
    """(group id, state name) of every consumer group as committed, for ListGroups."""
    return [
        (g.group_id, g.state.value)
        for g in broker.groups.consumer.committed.groups()
        if g.state != ConsumerGroupState.DEAD
    ]


VERSIONS = {
    ConsumerGroupHeartbeatRequest.API_KEY: (0, 1),
    ConsumerGroupDescribeRequest.API_KEY: (0, 1),
}


def install(registry: HandlerRegistry) -> None:
    broker = registry.broker
    protocols = ["classic", CONSUMER_PROTOCOL] if broker is None else broker.config.get(PROTOCOLS_KEY)
    if CONSUMER_PROTOCOL not in protocols:
        return
    registry.register(
        ConsumerGroupHeartbeatRequest.API_KEY,
        handle_heartbeat,
        versions=VERSIONS[ConsumerGroupHeartbeatRequest.API_KEY],
        error_response=heartbeat_error,
    )
    registry.register(
        ConsumerGroupDescribeRequest.API_KEY,
        handle_describe,
        versions=VERSIONS[ConsumerGroupDescribeRequest.API_KEY],
        error_response=describe_error,
    )
