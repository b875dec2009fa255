"""Which operation on which resource each API needs, as Kafka's KafkaApis asks its authorizer.

Installed only when the broker has an authorizer (``authorizer.class.name``): ``install(registry)``
wraps the registered handlers of the APIs below, so a broker without one runs its handlers
unchanged. Produce, Fetch, ListOffsets and Metadata check inside their handlers (``handlers.auth``),
as their answers interleave authorization with topic lookups.

A wrapper either refuses the whole request with the API's error response (a group, transactional
id or cluster permission), or runs the handler on the items the client may touch and adds the
refused items to the answer with their error (TOPIC_AUTHORIZATION_FAILED per topic,
GROUP_AUTHORIZATION_FAILED per group, ...), or filters what the answer may show (ListGroups,
ListTransactions, OffsetFetch of all topics). Refused clients get the error, never a closed
connection.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reference_broker.handlers.auth import (
    Operation,
    ResourceType,
    authorize,
    authorize_any,
    authorize_cluster,
    authorized_operations,
)
from reference_broker.security.authorizer import SUPPORTED_OPERATIONS
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

#: (refusal to send instead, request to run, what to do to its response)
Plan = tuple[Message | None, Any, Callable[[Any], Any]]
Pre = Callable[["Broker", "RequestContext", Any], Plan]

GROUP, TOPIC, TXN = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
ALL_GROUP_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP])
#: DescribeConfigs/AlterConfigs resource types -> (ACL resource, its error).
_CONFIG_RESOURCES = {
    2: (TOPIC, E.TOPIC_AUTHORIZATION_FAILED),
    4: (ResourceType.CLUSTER, E.CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, E.CLUSTER_AUTHORIZATION_FAILED),
    32: (GROUP, E.GROUP_AUTHORIZATION_FAILED),
}


def _same(response: Any) -> Any:
    return response


def _run(request: Any, finish: Callable[[Any], Any] = _same) -> Plan:
    return None, request, finish


def _refuse(broker: Broker, ctx: RequestContext, request: Any, code: int) -> Plan:
    return broker.registry.error_response(ctx, request, code), None, _same


def _allowed(
    broker: Broker, ctx: RequestContext, op: Operation, kind: ResourceType, name: str | None
) -> bool:
    if kind == ResourceType.CLUSTER:
        return authorize_cluster(broker, ctx, op)
    return authorize(broker, ctx, op, kind, name or "")


def _split(items: list[Any], keep: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    allowed: list[Any] = []
    refused: list[Any] = []
    for item in items:
        (allowed if keep(item) else refused).append(item)
    return allowed, refused


def _with(request: Any, **fields: Any) -> Any:
    changed = copy.copy(request)
    for name, value in fields.items():
        setattr(changed, name, value)
    return changed


# -- whole-request checks -----------------------------------------------------------------------


def _group_member(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group."""
    if not authorize(broker, ctx, Operation.READ, GROUP, request.group_id):
        return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)
    return _run(request)


def _end_txn(broker: Broker, ctx: RequestContext, request: EndTxnRequest) -> Plan:
    if not authorize(broker, ctx, Operation.WRITE, TXN, request.transactional_id):
        return _refuse(broker, ctx, request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return _run(request)


def _add_offsets(broker: Broker, ctx: RequestContext, request: AddOffsetsToTxnRequest) -> Plan:
    if not authorize(broker, ctx, Operation.WRITE, TXN, request.transactional_id):
        return _refuse(broker, ctx, request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize(broker, ctx, Operation.READ, GROUP, request.group_id):
        return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)
    return _run(request)


def _init_producer_id(broker: Broker, ctx: RequestContext, request: InitProducerIdRequest) -> Plan:
    if request.transactional_id:
        if not authorize(broker, ctx, Operation.WRITE, TXN, request.transactional_id):
            return _refuse(broker, ctx, request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (
        authorize_cluster(broker, ctx, Operation.IDEMPOTENT_WRITE)
        or authorize_any(broker, ctx, Operation.WRITE, TOPIC)
    ):
        return _refuse(broker, ctx, request, E.CLUSTER_AUTHORIZATION_FAILED)
    return _run(request)


def _add_partitions(broker: Broker, ctx: RequestContext, request: AddPartitionsToTxnRequest) -> Plan:
    if ctx.api_version >= 4:
        if not authorize_cluster(broker, ctx, Operation.CLUSTER_ACTION):
            return _refuse(broker, ctx, request, E.CLUSTER_AUTHORIZATION_FAILED)
        return _run(request)
    if not authorize(broker, ctx, Operation.WRITE, TXN, request.v3_and_below_transactional_id):
        return _refuse(broker, ctx, request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    topics = request.v3_and_below_topics
    refused = {t.name for t in topics if not authorize(broker, ctx, Operation.WRITE, TOPIC, t.name)}
    if not refused:
        return _run(request)
    R = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
    results = [
        R.AddPartitionsToTxnTopicResult(
            name=t.name,
            results_by_partition=[
                R.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
                    partition_index=p,
                    partition_error_code=E.TOPIC_AUTHORIZATION_FAILED
                    if t.name in refused
                    else E.OPERATION_NOT_ATTEMPTED,
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results), None, _same


# -- per-topic checks ---------------------------------------------------------------------------


def _per_topic(
    op: Operation,
    topics_field: str,
    refused_entry: Callable[[Any], Any],
    response_field: str,
    empty_response: Callable[[], Any],
) -> Callable[[Broker, RequestContext, Any], Plan]:
    """Run the handler on the topics the client may ``op``; answer the others with
    ``refused_entry(topic)`` added to the response's ``response_field`` list."""

    def pre(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
        allowed, refused = _split(
            getattr(request, topics_field), lambda t: authorize(broker, ctx, op, TOPIC, t.name)
        )
        if not refused:
            return _run(request)
        entries = [refused_entry(t) for t in refused]
        if not allowed:
            response = empty_response()
            setattr(response, response_field, entries)
            return response, None, _same

        def finish(response: Any) -> Any:
            if response is not None:
                getattr(response, response_field).extend(entries)
            return response

        return _run(_with(request, **{topics_field: allowed}), finish)

    return pre


def _offset_commit_topic(t: Any) -> Any:
    T = OffsetCommitResponse.OffsetCommitResponseTopic
    return T(
        name=t.name,
        partitions=[
            T.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED
            )
            for p in t.partitions
        ],
    )


_commit_topics = _per_topic(Operation.READ, "topics", _offset_commit_topic, "topics", OffsetCommitResponse)


def _offset_commit(broker: Broker, ctx: RequestContext, request: OffsetCommitRequest) -> Plan:
    if not authorize(broker, ctx, Operation.READ, GROUP, request.group_id):
        return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)
    return _commit_topics(broker, ctx, request)


def _txn_commit_topic(t: Any) -> Any:
    T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return T(
        name=t.name,
        partitions=[
            T.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED
            )
            for p in t.partitions
        ],
    )


_txn_commit_topics = _per_topic(
    Operation.READ, "topics", _txn_commit_topic, "topics", TxnOffsetCommitResponse
)


def _txn_offset_commit(broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest) -> Plan:
    if not authorize(broker, ctx, Operation.WRITE, TXN, request.transactional_id):
        return _refuse(broker, ctx, request, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize(broker, ctx, Operation.READ, GROUP, request.group_id):
        return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)
    return _txn_commit_topics(broker, ctx, request)


def _offset_delete_topic(t: Any) -> Any:
    T = OffsetDeleteResponse.OffsetDeleteResponseTopic
    return T(
        name=t.name,
        partitions=[
            T.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED
            )
            for p in t.partitions
        ],
    )


_offset_delete_topics = _per_topic(
    Operation.READ, "topics", _offset_delete_topic, "topics", OffsetDeleteResponse
)


def _offset_delete(broker: Broker, ctx: RequestContext, request: OffsetDeleteRequest) -> Plan:
    if not authorize(broker, ctx, Operation.DELETE, GROUP, request.group_id):
        return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)
    return _offset_delete_topics(broker, ctx, request)


def _delete_records_topic(t: Any) -> Any:
    T = DeleteRecordsResponse.DeleteRecordsTopicResult
    return T(
        name=t.name,
        partitions=[
            T.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=E.TOPIC_AUTHORIZATION_FAILED
            )
            for p in t.partitions
        ],
    )


def _producers_topic(t: Any) -> Any:
    T = DescribeProducersResponse.TopicResponse
    return T(
        name=t.name,
        partitions=[
            T.PartitionResponse(partition_index=p, error_code=E.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partition_indexes
        ],
    )


def _create_topic(t: Any) -> Any:
    return CreateTopicsResponse.CreatableTopicResult(
        name=t.name,
        error_code=E.TOPIC_AUTHORIZATION_FAILED,
        error_message="Authorization failed.",
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def _create_topics(broker: Broker, ctx: RequestContext, request: CreateTopicsRequest) -> Plan:
    if authorize_cluster(broker, ctx, Operation.CREATE):
        return _run(request)
    return _create_per_topic(broker, ctx, request)


_create_per_topic = _per_topic(Operation.CREATE, "topics", _create_topic, "topics", CreateTopicsResponse)


def _create_partitions_topic(t: Any) -> Any:
    return CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=t.name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed."
    )


def _delete_topics(broker: Broker, ctx: RequestContext, request: DeleteTopicsRequest) -> Plan:
    def name_of(state: Any) -> str:
        if state.name is None:
            info = broker.logs.topic_by_id(state.topic_id)
            return info.name if info is not None else ""
        return str(state.name)

    def keep(name: str) -> bool:
        return authorize(broker, ctx, Operation.DELETE, TOPIC, name)

    Result = DeleteTopicsResponse.DeletableTopicResult
    if ctx.api_version >= 6:
        allowed, refused = _split(request.topics, lambda s: keep(name_of(s)))
        entries = [
            Result(
                name=s.name,
                topic_id=s.topic_id,
                error_code=E.TOPIC_AUTHORIZATION_FAILED,
                error_message="Authorization failed.",
            )
            for s in refused
        ]
        changed = {"topics": allowed}
    else:
        allowed, refused = _split(request.topic_names, keep)
        entries = [Result(name=n, error_code=E.TOPIC_AUTHORIZATION_FAILED) for n in refused]
        changed = {"topic_names": allowed}
    if not refused:
        return _run(request)
    if not allowed:
        return DeleteTopicsResponse(responses=entries), None, _same

    def finish(response: Any) -> Any:
        response.responses.extend(entries)
        return response

    return _run(_with(request, **changed), finish)


# -- groups, coordinators, configs, transactions ------------------------------------------------


def _find_coordinator(broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest) -> Plan:
    kind, code = (
        (TXN, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if request.key_type == 1
        else (GROUP, E.GROUP_AUTHORIZATION_FAILED)
    )
    if ctx.api_version < 4:
        if not authorize(broker, ctx, Operation.DESCRIBE, kind, request.key):
            return _refuse(broker, ctx, request, code)
        return _run(request)
    allowed, refused = _split(
        request.coordinator_keys, lambda key: authorize(broker, ctx, Operation.DESCRIBE, kind, key)
    )
    if not refused:
        return _run(request)
    entries = [
        FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
        for k in refused
    ]
    if not allowed:
        return FindCoordinatorResponse(coordinators=entries), None, _same

    def finish(response: Any) -> Any:
        response.coordinators.extend(entries)
        return response

    return _run(_with(request, coordinator_keys=allowed), finish)


def _describe_groups(broker: Broker, ctx: RequestContext, request: DescribeGroupsRequest) -> Plan:
    allowed, refused = _split(request.groups, lambda g: authorize(broker, ctx, Operation.DESCRIBE, GROUP, g))
    entries = [
        DescribeGroupsResponse.DescribedGroup(
            error_code=E.GROUP_AUTHORIZATION_FAILED, group_id=g, authorized_operations=-(2**31)
        )
        for g in refused
    ]

    def finish(response: Any) -> Any:
        if request.include_authorized_operations:
            for group in response.groups:
                group.authorized_operations = authorized_operations(
                    broker, ctx, GROUP, group.group_id, ALL_GROUP_OPERATIONS
                )
        response.groups.extend(entries)
        return response

    if not allowed:
        return DescribeGroupsResponse(groups=entries), None, _same
    return _run(_with(request, groups=allowed), finish)


def _consumer_group_describe(
    broker: Broker, ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> Plan:
    allowed, refused = _split(
        request.group_ids, lambda g: authorize(broker, ctx, Operation.DESCRIBE, GROUP, g)
    )
    entries = [
        ConsumerGroupDescribeResponse.DescribedGroup(
            error_code=E.GROUP_AUTHORIZATION_FAILED, group_id=g, authorized_operations=-(2**31)
        )
        for g in refused
    ]

    def finish(response: Any) -> Any:
        if request.include_authorized_operations:
            for group in response.groups:
                group.authorized_operations = authorized_operations(
                    broker, ctx, GROUP, group.group_id, ALL_GROUP_OPERATIONS
                )
        response.groups.extend(entries)
        return response

    if not allowed:
        return ConsumerGroupDescribeResponse(groups=entries), None, _same
    return _run(_with(request, group_ids=allowed), finish)


def _list_groups(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> Plan:
    if authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return _run(request)

    def finish(response: Any) -> Any:
        response.groups = [
            g for g in response.groups if authorize(broker, ctx, Operation.DESCRIBE, GROUP, g.group_id)
        ]
        return response

    return _run(request, finish)


def _delete_groups(broker: Broker, ctx: RequestContext, request: DeleteGroupsRequest) -> Plan:
    allowed, refused = _split(
        request.groups_names, lambda g: authorize(broker, ctx, Operation.DELETE, GROUP, g)
    )
    entries = [
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=E.GROUP_AUTHORIZATION_FAILED)
        for g in refused
    ]
    if not allowed:
        return DeleteGroupsResponse(results=entries), None, _same

    def finish(response: Any) -> Any:
        response.results.extend(entries)
        return response

    return _run(_with(request, groups_names=allowed), finish)


def _offset_fetch(broker: Broker, ctx: RequestContext, request: OffsetFetchRequest) -> Plan:
    def visible(name: str) -> bool:
        return authorize(broker, ctx, Operation.DESCRIBE, TOPIC, name)

    def restrict(topics: list[Any], asked_all: bool) -> list[Any]:
        if asked_all:
            return [t for t in topics if visible(t.name)]
        for t in topics:
            if not visible(t.name):
                for p in t.partitions:
                    p.committed_offset, p.metadata, p.error_code = -1, "", E.TOPIC_AUTHORIZATION_FAILED
        return topics

    if ctx.api_version < 8:
        if not authorize(broker, ctx, Operation.DESCRIBE, GROUP, request.group_id):
            return _refuse(broker, ctx, request, E.GROUP_AUTHORIZATION_FAILED)

        def finish_one(response: Any) -> Any:
            response.topics = restrict(response.topics, request.topics is None)
            return response

        return _run(request, finish_one)
    allowed, refused = _split(
        request.groups, lambda g: authorize(broker, ctx, Operation.DESCRIBE, GROUP, g.group_id)
    )
    asked_all = {g.group_id: g.topics is None for g in request.groups}
    entries = [
        OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=g.group_id, error_code=E.GROUP_AUTHORIZATION_FAILED
        )
        for g in refused
    ]

    def finish(response: Any) -> Any:
        for group in response.groups:
            group.topics = restrict(group.topics, asked_all.get(group.group_id, False))
        response.groups.extend(entries)
        return response

    if not allowed:
        return OffsetFetchResponse(groups=entries), None, _same
    return _run(_with(request, groups=allowed), finish)


def _configs(op: Operation, response_type: Any, result_type: Any, field: str) -> Callable[..., Plan]:
    def pre(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
        def keep(resource: Any) -> bool:
            kind, _ = _CONFIG_RESOURCES.get(resource.resource_type, (None, 0))
            return kind is None or _allowed(broker, ctx, op, kind, resource.resource_name)

        allowed, refused = _split(request.resources, keep)
        if not refused:
            return _run(request)
        entries = [
            result_type(
                error_code=_CONFIG_RESOURCES[r.resource_type][1],
                error_message="Authorization failed.",
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in refused
        ]
        if not allowed:
            response = response_type()
            setattr(response, field, entries)
            return response, None, _same

        def finish(response: Any) -> Any:
            getattr(response, field).extend(entries)
            return response

        return _run(_with(request, resources=allowed), finish)

    return pre


def _describe_transactions(broker: Broker, ctx: RequestContext, request: DescribeTransactionsRequest) -> Plan:
    allowed, refused = _split(
        request.transactional_ids, lambda t: authorize(broker, ctx, Operation.DESCRIBE, TXN, t)
    )
    State = DescribeTransactionsResponse.TransactionState
    entries = [
        State(
            error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            transactional_id=t,
            producer_id=-1,
            producer_epoch=-1,
        )
        for t in refused
    ]

    def finish(response: Any) -> Any:
        for state in response.transaction_states:
            state.topics = [
                t for t in state.topics if authorize(broker, ctx, Operation.DESCRIBE, TOPIC, t.topic)
            ]
        response.transaction_states.extend(entries)
        return response

    if not allowed:
        return DescribeTransactionsResponse(transaction_states=entries), None, _same
    return _run(_with(request, transactional_ids=allowed), finish)


def _list_transactions(broker: Broker, ctx: RequestContext, request: ListTransactionsRequest) -> Plan:
    def finish(response: Any) -> Any:
        response.transaction_states = [
            s
            for s in response.transaction_states
            if authorize(broker, ctx, Operation.DESCRIBE, TXN, s.transactional_id)
        ]
        return response

    return _run(request, finish)


CHECKS: dict[int, Pre] = {
    JoinGroupRequest.API_KEY: _group_member,
    SyncGroupRequest.API_KEY: _group_member,
    HeartbeatRequest.API_KEY: _group_member,
    LeaveGroupRequest.API_KEY: _group_member,
    OffsetCommitRequest.API_KEY: _offset_commit,
    OffsetFetchRequest.API_KEY: _offset_fetch,
    OffsetDeleteRequest.API_KEY: _offset_delete,
    FindCoordinatorRequest.API_KEY: _find_coordinator,
    DescribeGroupsRequest.API_KEY: _describe_groups,
    ListGroupsRequest.API_KEY: _list_groups,
    DeleteGroupsRequest.API_KEY: _delete_groups,
    CreateTopicsRequest.API_KEY: _create_topics,
    DeleteTopicsRequest.API_KEY: _delete_topics,
    DeleteRecordsRequest.API_KEY: _per_topic(
        Operation.DELETE, "topics", _delete_records_topic, "topics", DeleteRecordsResponse
    ),
    CreatePartitionsRequest.API_KEY: _per_topic(
        Operation.ALTER, "topics", _create_partitions_topic, "results", CreatePartitionsResponse
    ),
    DescribeConfigsRequest.API_KEY: _configs(
        Operation.DESCRIBE_CONFIGS,
        DescribeConfigsResponse,
        DescribeConfigsResponse.DescribeConfigsResult,
        "results",
    ),
    AlterConfigsRequest.API_KEY: _configs(
        Operation.ALTER_CONFIGS,
        AlterConfigsResponse,
        AlterConfigsResponse.AlterConfigsResourceResponse,
        "responses",
    ),
    IncrementalAlterConfigsRequest.API_KEY: _configs(
        Operation.ALTER_CONFIGS,
        IncrementalAlterConfigsResponse,
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
        "responses",
    ),
    InitProducerIdRequest.API_KEY: _init_producer_id,
    AddPartitionsToTxnRequest.API_KEY: _add_partitions,
    AddOffsetsToTxnRequest.API_KEY: _add_offsets,
    EndTxnRequest.API_KEY: _end_txn,
    TxnOffsetCommitRequest.API_KEY: _txn_offset_commit,
    DescribeProducersRequest.API_KEY: _per_topic(
        Operation.READ, "topics", _producers_topic, "topics", DescribeProducersResponse
    ),
    DescribeTransactionsRequest.API_KEY: _describe_transactions,
    ListTransactionsRequest.API_KEY: _list_transactions,
    ConsumerGroupHeartbeatRequest.API_KEY: _group_member,
    ConsumerGroupDescribeRequest.API_KEY: _consumer_group_describe,
}


def guarded(handle: Callable[..., Any], pre: Pre) -> Callable[..., Any]:
    """``handle`` behind ``pre``, keeping it a plain ``def`` or an ``async def`` as it was."""
    if inspect.iscoroutinefunction(handle):

        async def guarded_async(broker: Broker, ctx: RequestContext, request: Any) -> Any:
            refusal, run, finish = pre(broker, ctx, request)
            if run is None:
                return refusal
            return finish(await handle(broker, ctx, run))

        return guarded_async

    def guarded_sync(broker: Broker, ctx: RequestContext, request: Any) -> Any:
        refusal, run, finish = pre(broker, ctx, request)
        if run is None:
            return refusal
        return finish(handle(broker, ctx, run))

    return guarded_sync


def install(registry: HandlerRegistry) -> None:
    """Put every API of ``CHECKS`` that is registered behind its check."""
    for api_key, pre in CHECKS.items():
        registry.guard(api_key, functools.partial(_guard_with, pre))


def _guard_with(pre: Pre, handle: Callable[..., Any]) -> Callable[..., Any]:
    return guarded(handle, pre)
