"""Group membership APIs of the classic protocol, answered by ``broker.groups`` (the coordinator).

Versions served and per-version notes:

- FindCoordinator (10) v0-5: v4+ batched (``coordinator_keys``). key_type 0 (group) is always this
  node. key_type 1 (transaction) is this node once a transaction coordinator is installed
  (``broker.transaction_coordinator``), COORDINATOR_NOT_AVAILABLE until then. In cluster mode
  both are the leader of the key's partition of the replicated ``__consumer_offsets`` /
  ``__transaction_state`` (``reference_broker.cluster.coordinators``). v6 (share groups,
  key_type 2) is not served.
- JoinGroup (11) v0-9: v4+ joins without a member id get MEMBER_ID_REQUIRED and an id (dynamic
  members); v5+ group.instance.id (static membership, KIP-345); v7+ protocol_type in the answer;
  v9 skip_assignment for a static leader rejoining a Stable group (KIP-814). ``async``: it waits
  for the join window.
- SyncGroup (14) v0-5: v5+ protocol_type/protocol_name checked and returned. ``async``: followers
  wait for the leader's assignment.
- Heartbeat (12) v0-4, LeaveGroup (13) v0-5 (v3+ several members, by member id or instance id).
- ListGroups (16) v0-5 (v4 states filter, v5 types filter: "classic", or "consumer" for the
  KIP-848 groups), DescribeGroups (15) v0-6 (v6: GROUP_ID_NOT_FOUND for an unknown group; a
  consumer group is described as an unknown one, as Kafka does), DeleteGroups (42) v0-2.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from reference_broker.coordinator.group.state import GroupState, JoinResult, SyncResult
from reference_broker.handlers.consumer_group_heartbeat import listed_consumer_groups
from reference_broker.security.acl import ResourceType
from reference_broker.security.authorizer import SUPPORTED_OPERATIONS
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

E = ErrorCode
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
AUTHORIZED_OPS_OMITTED = -(2**31)
# READ (3), DELETE (6), DESCRIBE (8): everything a group allows on an ACL-less broker.
#: Every operation a group ACL can name, as bits: what a group's authorized operations are without
#: an authorizer (one replaces them with what the principal may do).
ALL_GROUP_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP])
CLASSIC = "classic"
CONSUMER = "consumer"


# -- FindCoordinator ---------------------------------------------------------------------


def _coordinator_for(broker: Broker, key: str, key_type: int) -> tuple[int, str | None]:
    if key_type == GROUP_KEY_TYPE:
        if broker.group_service is not None:
            broker.group_service.ensure_offsets_topic()
        return ErrorCode.NONE, None
    if key_type == TRANSACTION_KEY_TYPE:
        if getattr(broker, "transaction_coordinator", None) is None:
            return E.COORDINATOR_NOT_AVAILABLE, "The transaction coordinator is not available yet"
        return ErrorCode.NONE, None
    return E.INVALID_REQUEST, f"Unknown coordinator type {key_type}"


def handle_find_coordinator(
    broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    (host, port), node = broker.advertised_address(ctx), broker.node_id
    if request.key_type in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) and broker.replica_manager is not None:
        return _find_coordinator_in_cluster(broker, ctx, request)
    if ctx.api_version < 4:
        error, message = _coordinator_for(broker, request.key, request.key_type)
        if error:
            return FindCoordinatorResponse(
                error_code=error, error_message=message, node_id=-1, host="", port=-1
            )
        return FindCoordinatorResponse(error_code=ErrorCode.NONE, node_id=node, host=host, port=port)
    coordinators = []
    for key in request.coordinator_keys:
        error, message = _coordinator_for(broker, key, request.key_type)
        coordinators.append(
            FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=-1 if error else node,
                host="" if error else host,
                port=-1 if error else port,
                error_code=error,
                error_message=message,
            )
        )
    return FindCoordinatorResponse(coordinators=coordinators)


def _find_coordinator_in_cluster(
    broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    """Cluster mode: each group's coordinator is its ``__consumer_offsets`` partition's leader,
    each transactional id's its ``__transaction_state`` partition's leader."""
    from reference_broker.cluster.coordinators import find_group_coordinator, find_transaction_coordinator

    find = find_group_coordinator if request.key_type == GROUP_KEY_TYPE else find_transaction_coordinator
    listener = ctx.connection.session.listener.name
    if ctx.api_version < 4:
        error, message, node, host, port = find(broker, listener, request.key)
        return FindCoordinatorResponse(
            error_code=error, error_message=message, node_id=node, host=host, port=port
        )
    coordinators = []
    for key in request.coordinator_keys:
        error, message, node, host, port = find(broker, listener, key)
        coordinators.append(
            FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error, error_message=message
            )
        )
    return FindCoordinatorResponse(coordinators=coordinators)


def find_coordinator_error(
    request: FindCoordinatorRequest, version: int, code: int
) -> FindCoordinatorResponse:
    if version < 4:
        return FindCoordinatorResponse(error_code=code, node_id=-1, host="", port=-1)
    return FindCoordinatorResponse(
        coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
            for k in request.coordinator_keys
        ]
    )


# -- JoinGroup / SyncGroup ---------------------------------------------------------------


def _client_host(ctx: RequestContext) -> str:
    peer = getattr(ctx.connection, "peer", "?")
    return "/" + peer.rpartition(":")[0] if ":" in peer else peer


async def handle_join_group(
    broker: Broker, ctx: RequestContext, request: JoinGroupRequest
) -> JoinGroupResponse:
    version = ctx.api_version
    future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()

    def respond(result: JoinResult) -> None:
        if not future.done():
            future.set_result(result)

    broker.groups.join_group(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 5 else None,
        version >= 4,
        ctx.client_id or "",
        _client_host(ctx),
        request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        request.session_timeout_ms,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        respond,
    )
    result = await future
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment and version >= 9,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ],
    )


def join_group_error(request: JoinGroupRequest, version: int, code: int) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, generation_id=-1, member_id=request.member_id, protocol_name="")


async def handle_sync_group(
    broker: Broker, ctx: RequestContext, request: SyncGroupRequest
) -> SyncGroupResponse:
    version = ctx.api_version
    future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()

    def respond(result: SyncResult) -> None:
        if not future.done():
            future.set_result(result)

    broker.groups.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
        respond,
    )
    result = await future
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def sync_group_error(request: SyncGroupRequest, version: int, code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code)


# -- Heartbeat / LeaveGroup --------------------------------------------------------------


def handle_heartbeat(broker: Broker, ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    instance_id = request.group_instance_id if ctx.api_version >= 3 else None
    error = broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id, instance_id)
    return HeartbeatResponse(error_code=error)


def heartbeat_error(request: HeartbeatRequest, version: int, code: int) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code)


def handle_leave_group(broker: Broker, ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    leaving: list[tuple[str, str | None]]
    if ctx.api_version < 3:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, outcomes = broker.groups.leave_group(request.group_id, leaving)
    if ctx.api_version < 3:
        # One member, one top-level code (Kafka's LeaveGroupResponse for v0-2).
        return LeaveGroupResponse(error_code=error or (outcomes[0].error if outcomes else 0))
    return LeaveGroupResponse(
        error_code=error,
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=o.member_id, group_instance_id=o.group_instance_id, error_code=o.error
            )
            for o in outcomes
        ],
    )


def leave_group_error(request: LeaveGroupRequest, version: int, code: int) -> LeaveGroupResponse:
    return LeaveGroupResponse(error_code=code)


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------


def handle_list_groups(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter} if ctx.api_version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if ctx.api_version >= 5 else set()
    if broker.groups.loading:
        return ListGroupsResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS)
    listed = []
    for group in broker.groups.list_groups():
        if states and group.state.value.lower() not in states:
            continue
        if types and CLASSIC not in types:
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type=CLASSIC,
            )
        )
    for group_id, state in listed_consumer_groups(broker):
        if (states and state.lower() not in states) or (types and CONSUMER not in types):
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=group_id, protocol_type=CONSUMER, group_state=state, group_type=CONSUMER
            )
        )
    return ListGroupsResponse(error_code=ErrorCode.NONE, groups=listed)


def list_groups_error(request: ListGroupsRequest, version: int, code: int) -> ListGroupsResponse:
    return ListGroupsResponse(error_code=code)


def _described(
    group_id: str, group: Any, version: int, include_ops: bool
) -> DescribeGroupsResponse.DescribedGroup:
    ops = ALL_GROUP_OPERATIONS if include_ops else AUTHORIZED_OPS_OMITTED
    if group is None:
        if version >= 6:
            return DescribeGroupsResponse.DescribedGroup(
                error_code=E.GROUP_ID_NOT_FOUND,
                error_message=f"Group {group_id} not found.",
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                authorized_operations=AUTHORIZED_OPS_OMITTED,  # an error answer carries none
            )
        return DescribeGroupsResponse.DescribedGroup(
            group_id=group_id, group_state=GroupState.DEAD.value, authorized_operations=ops
        )
    stable = group.is_(GroupState.STABLE)
    members = [
        DescribeGroupsResponse.DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
        for m in group.members.values()
    ]
    return DescribeGroupsResponse.DescribedGroup(
        group_id=group.group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
        authorized_operations=ops,
    )


def handle_describe_groups(
    broker: Broker, ctx: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    described = []
    for group_id in request.groups:
        error, group = broker.groups.describe_group(group_id)
        if error:
            described.append(DescribeGroupsResponse.DescribedGroup(error_code=error, group_id=group_id))
        else:
            entry = _described(group_id, group, ctx.api_version, request.include_authorized_operations)
            if group is None and entry.error_code and group_id in broker.groups.consumer.groups:
                entry.error_message = f"Group {group_id} is not a classic group."
            described.append(entry)
    return DescribeGroupsResponse(groups=described)


def describe_groups_error(request: DescribeGroupsRequest, version: int, code: int) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        groups=[DescribeGroupsResponse.DescribedGroup(error_code=code, group_id=g) for g in request.groups]
    )


def handle_delete_groups(
    broker: Broker, ctx: RequestContext, request: DeleteGroupsRequest
) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=broker.groups.delete_group(g))
            for g in request.groups_names
        ]
    )


def delete_groups_error(request: DeleteGroupsRequest, version: int, code: int) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code)
            for g in request.groups_names
        ]
    )


VERSIONS = {
    FindCoordinatorRequest.API_KEY: (0, 6),
    JoinGroupRequest.API_KEY: (0, 9),
    HeartbeatRequest.API_KEY: (0, 4),
    LeaveGroupRequest.API_KEY: (0, 5),
    SyncGroupRequest.API_KEY: (0, 5),
    DescribeGroupsRequest.API_KEY: (0, 6),
    ListGroupsRequest.API_KEY: (0, 5),
    DeleteGroupsRequest.API_KEY: (0, 2),
}


def install(registry: HandlerRegistry) -> None:
    for request_cls, handle, error in (
        (FindCoordinatorRequest, handle_find_coordinator, find_coordinator_error),
        (JoinGroupRequest, handle_join_group, join_group_error),
        (SyncGroupRequest, handle_sync_group, sync_group_error),
        (HeartbeatRequest, handle_heartbeat, heartbeat_error),
        (LeaveGroupRequest, handle_leave_group, leave_group_error),
        (ListGroupsRequest, handle_list_groups, list_groups_error),
        (DescribeGroupsRequest, handle_describe_groups, describe_groups_error),
        (DeleteGroupsRequest, handle_delete_groups, delete_groups_error),
    ):
        registry.register(
            request_cls.API_KEY, handle, versions=VERSIONS[request_cls.API_KEY], error_response=error
        )
