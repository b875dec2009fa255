"""Which operation on which resource each API needs, as Kafka's KafkaApis asks its authorizer.

Installed only when the broker has an authorizer (``authorizer.class.name``): ``install(registry)``
wraps the registered handlers of the APIs below, so a broker without one runs its handlers
unchanged. Produce, Fetch, ListOffsets and Metadata check inside their handlers (``handlers.auth``),
as their answers interleave authorization with topic lookups.

A wrapper either refuses the whole request with the API's error response (a group, transactional
id or cluster permission: :class:`Requires`), or runs the handler on the items the client may
touch and adds the refused items to the answer with their error (TOPIC_AUTHORIZATION_FAILED per
topic, GROUP_AUTHORIZATION_FAILED per group, ...: :class:`PerItem`), or filters what the answer
may show (ListGroups, ListTransactions, OffsetFetch of all topics). The refusal's error is always
the one of the refused resource's type (:data:`DENIED`). ``CHECKS`` is the table of every API's
check; the few that fit neither shape (version-dependent or cluster-or-topic rules) are functions.
Refused clients get the error, never a closed connection.
"""

from __future__ import annotations

import copy
import dataclasses
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
    AlterClientQuotasRequest,
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
    DescribeClientQuotasRequest,
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
#: An item of a request -> the resource it needs the operation on (None: no check).
Resource = Callable[["Broker", Any], "tuple[ResourceType, str] | None"]

GROUP, TOPIC, TXN = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
CLUSTER = ResourceType.CLUSTER
ALL_GROUP_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP])
#: The error of a refused resource, by its type.
DENIED = {
    TOPIC: E.TOPIC_AUTHORIZATION_FAILED,
    GROUP: E.GROUP_AUTHORIZATION_FAILED,
    TXN: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    CLUSTER: E.CLUSTER_AUTHORIZATION_FAILED,
}
#: DescribeConfigs/AlterConfigs resource types -> the ACL resource checked.
_CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER, 8: CLUSTER, 32: GROUP}


def _same(response: Any) -> Any:
    return response


def _run(request: Any, finish: Callable[[Any], Any] = _same) -> Plan:
    return None, request, finish


def _refuse(broker: Broker, ctx: RequestContext, request: Any, code: int) -> Plan:
    return broker.registry.error_response(ctx, request, code), None, _same


def _allowed(
    broker: Broker, ctx: RequestContext, op: Operation, kind: ResourceType, name: str | None
) -> bool:
    if kind == CLUSTER:
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


# -- the two shapes of check --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Requires:
    """Whole-request permissions, checked in order: ``operation`` on the ``kind`` resource named
    by the request's ``field``, for each (operation, kind, field) of ``needs``; the first refused
    one refuses the request with its type's error. ``then`` checks what is left (the topics)."""

    needs: tuple[tuple[Operation, ResourceType, str], ...]
    then: Pre | None = None

    def __call__(self, broker: Broker, ctx: RequestContext, request: Any) -> Plan:
        for op, kind, field in self.needs:
            if not _allowed(broker, ctx, op, kind, getattr(request, field)):
                return _refuse(broker, ctx, request, DENIED[kind])
        return self.then(broker, ctx, request) if self.then is not None else _run(request)


@dataclasses.dataclass(frozen=True)
class PerItem:
    """Per-item permissions: the handler runs on the items of the request's ``items`` list the
    client may ``operation`` (``resource(broker, item)`` names the resource; None: not checked);
    each refused item is answered by ``refused(item, error)`` in the response's ``answers`` list,
    after the handler's own answers. ``finish(broker, ctx, request, response)`` adjusts the
    handler's answers first (authorized operations, hidden topics); ``response`` builds the whole
    answer when every item is refused."""

    operation: Operation
    items: str
    resource: Resource
    refused: Callable[[Any, int], Any]
    answers: str
    response: Callable[[], Any]
    finish: Callable[[Broker, RequestContext, Any, Any], None] | None = None

    def __call__(self, broker: Broker, ctx: RequestContext, request: Any) -> Plan:
        def keep(item: Any) -> bool:
            resource = self.resource(broker, item)
            return resource is None or _allowed(broker, ctx, self.operation, *resource)

        allowed, refused = _split(getattr(request, self.items), keep)
        entries = [self.refused(item, DENIED[self._kind(broker, item)]) for item in refused]
        if refused and not allowed:
            response = self.response()
            setattr(response, self.answers, entries)
            return response, None, _same
        if not refused and self.finish is None:
            return _run(request)

        def finish(response: Any) -> Any:
            if response is not None:
                if self.finish is not None:
                    self.finish(broker, ctx, request, response)
                getattr(response, self.answers).extend(entries)
            return response

        return _run(_with(request, **{self.items: allowed}) if refused else request, finish)

    def _kind(self, broker: Broker, item: Any) -> ResourceType:
        resource = self.resource(broker, item)
        assert resource is not None  # only checked items are refused
        return resource[0]


def _topic(broker: Broker, item: Any) -> tuple[ResourceType, str]:
    return TOPIC, item.name


def _group(broker: Broker, group_id: str) -> tuple[ResourceType, str]:
    return GROUP, group_id


def _txn(broker: Broker, transactional_id: str) -> tuple[ResourceType, str]:
    return TXN, transactional_id


def _topic_by_name_or_id(broker: Broker, state: Any) -> tuple[ResourceType, str]:
    if state.name is None:
        info = broker.logs.topic_by_id(state.topic_id)
        return TOPIC, info.name if info is not None else ""
    return TOPIC, str(state.name)


def _config_resource(broker: Broker, resource: Any) -> tuple[ResourceType, str] | None:
    kind = _CONFIG_RESOURCES.get(resource.resource_type)
    return None if kind is None else (kind, resource.resource_name)


def _per_topic(op: Operation, refused: Callable[[Any, int], Any], answers: str, response: Any) -> PerItem:
    return PerItem(op, "topics", _topic, refused, answers, response)


def _partitions_refused(topic_class: Any, partition_class: Any, **fields: Any) -> Callable[[Any, int], Any]:
    """A refused topic answered with the error on each of its partitions."""

    def entry(t: Any, code: int) -> Any:
        return topic_class(
            name=t.name,
            partitions=[
                partition_class(partition_index=p.partition_index, error_code=code, **fields)
                for p in t.partitions
            ],
        )

    return entry


# -- answers to refused items -------------------------------------------------------------------

_OffsetCommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_TxnCommitTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_OffsetDeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeleteRecordsTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
_commit_refused = _partitions_refused(_OffsetCommitTopic, _OffsetCommitTopic.OffsetCommitResponsePartition)
_txn_commit_refused = _partitions_refused(_TxnCommitTopic, _TxnCommitTopic.TxnOffsetCommitResponsePartition)
_offset_delete_refused = _partitions_refused(
    _OffsetDeleteTopic, _OffsetDeleteTopic.OffsetDeleteResponsePartition
)
_delete_records_refused = _partitions_refused(
    _DeleteRecordsTopic, _DeleteRecordsTopic.DeleteRecordsPartitionResult, low_watermark=-1
)


def _producers_refused(t: Any, code: int) -> Any:
    T = DescribeProducersResponse.TopicResponse
    return T(
        name=t.name,
        partitions=[T.PartitionResponse(partition_index=p, error_code=code) for p in t.partition_indexes],
    )


def _create_topic_refused(t: Any, code: int) -> Any:
    return CreateTopicsResponse.CreatableTopicResult(
        name=t.name,
        error_code=code,
        error_message="Authorization failed.",
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def _create_partitions_refused(t: Any, code: int) -> Any:
    return CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=t.name, error_code=code, error_message="Authorization failed."
    )


def _delete_topic_refused(state: Any, code: int) -> Any:
    return DeleteTopicsResponse.DeletableTopicResult(
        name=state.name, topic_id=state.topic_id, error_code=code, error_message="Authorization failed."
    )


def _delete_topic_name_refused(name: str, code: int) -> Any:
    return DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=code)


def _coordinator_refused(key: str, code: int) -> Any:
    return FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code)


def _described_group_refused(response_type: Any) -> Callable[[str, int], Any]:
    def entry(group_id: str, code: int) -> Any:
        return response_type.DescribedGroup(
            error_code=code, group_id=group_id, authorized_operations=-(2**31)
        )

    return entry


def _deleted_group_refused(group_id: str, code: int) -> Any:
    return DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code)


def _config_refused(result_type: Any) -> Callable[[Any, int], Any]:
    def entry(r: Any, code: int) -> Any:
        return result_type(
            error_code=code,
            error_message="Authorization failed.",
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )

    return entry


def _transaction_refused(transactional_id: str, code: int) -> Any:
    return DescribeTransactionsResponse.TransactionState(
        error_code=code, transactional_id=transactional_id, producer_id=-1, producer_epoch=-1
    )


# -- what the handler's own answers may show ----------------------------------------------------


def _group_operations(broker: Broker, ctx: RequestContext, request: Any, response: Any) -> None:
    """The principal's operations on each group described without error (as Kafka, an error
    answer keeps the 'omitted' value)."""
    if request.include_authorized_operations:
        for group in response.groups:
            if group.error_code:
                continue
            group.authorized_operations = authorized_operations(
                broker, ctx, GROUP, group.group_id, ALL_GROUP_OPERATIONS
            )


def _visible_transaction_topics(broker: Broker, ctx: RequestContext, request: Any, response: Any) -> None:
    for state in response.transaction_states:
        state.topics = [t for t in state.topics if authorize(broker, ctx, Operation.DESCRIBE, TOPIC, t.topic)]


# -- checks that fit neither shape --------------------------------------------------------------


def _init_producer_id(broker: Broker, ctx: RequestContext, request: InitProducerIdRequest) -> Plan:
    if request.transactional_id:
        return Requires(((Operation.WRITE, TXN, "transactional_id"),))(broker, ctx, request)
    if not (
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


_create_per_topic = _per_topic(Operation.CREATE, _create_topic_refused, "topics", CreateTopicsResponse)


def _create_topics(broker: Broker, ctx: RequestContext, request: CreateTopicsRequest) -> Plan:
    if authorize_cluster(broker, ctx, Operation.CREATE):
        return _run(request)
    return _create_per_topic(broker, ctx, request)


_DELETE_TOPICS_BY_ID = PerItem(
    Operation.DELETE, "topics", _topic_by_name_or_id, _delete_topic_refused, "responses", DeleteTopicsResponse
)
_DELETE_TOPICS_BY_NAME = PerItem(
    Operation.DELETE,
    "topic_names",
    lambda broker, name: (TOPIC, name),
    _delete_topic_name_refused,
    "responses",
    DeleteTopicsResponse,
)


def _delete_topics(broker: Broker, ctx: RequestContext, request: DeleteTopicsRequest) -> Plan:
    check = _DELETE_TOPICS_BY_ID if ctx.api_version >= 6 else _DELETE_TOPICS_BY_NAME
    return check(broker, ctx, request)


def _coordinator_check(kind: ResourceType, version: int) -> Pre:
    if version < 4:
        return Requires(((Operation.DESCRIBE, kind, "key"),))
    return PerItem(
        Operation.DESCRIBE,
        "coordinator_keys",
        lambda broker, key: (kind, key),
        _coordinator_refused,
        "coordinators",
        FindCoordinatorResponse,
    )


def _find_coordinator(broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest) -> Plan:
    kind = TXN if request.key_type == 1 else GROUP
    return _coordinator_check(kind, ctx.api_version)(broker, ctx, request)


def _list_groups(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> Plan:
    if authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return _run(request)

    def finish(response: Any) -> Any:
        response.groups = [
            g for g in response.groups if authorize(broker, ctx, Operation.DESCRIBE, GROUP, g.group_id)
        ]
        return response

    return _run(request, finish)


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
    asked_all = {g.group_id: g.topics is None for g in request.groups}

    def finish(broker: Broker, ctx: RequestContext, request: Any, response: Any) -> None:
        for group in response.groups:
            group.topics = restrict(group.topics, asked_all.get(group.group_id, False))

    return PerItem(
        Operation.DESCRIBE,
        "groups",
        lambda broker, g: (GROUP, g.group_id),
        lambda g, code: OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code),
        "groups",
        OffsetFetchResponse,
        finish,
    )(broker, ctx, request)


def _list_transactions(broker: Broker, ctx: RequestContext, request: ListTransactionsRequest) -> Plan:
    def finish(response: Any) -> Any:
        response.transaction_states = [
            s
            for s in response.transaction_states
            if authorize(broker, ctx, Operation.DESCRIBE, TXN, s.transactional_id)
        ]
        return response

    return _run(request, finish)


def _configs(op: Operation, response_type: Any, result_type: Any, answers: str) -> PerItem:
    return PerItem(op, "resources", _config_resource, _config_refused(result_type), answers, response_type)


def _cluster_needs(op: Operation) -> Pre:
    """The whole request needs ``op`` on the cluster (client quotas are cluster configs)."""

    def check(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
        if not authorize_cluster(broker, ctx, op):
            return _refuse(broker, ctx, request, E.CLUSTER_AUTHORIZATION_FAILED)
        return _run(request)

    return check


_GROUP_MEMBER = Requires(((Operation.READ, GROUP, "group_id"),))
_TXN_WRITE = (Operation.WRITE, TXN, "transactional_id")
_GROUP_READ = (Operation.READ, GROUP, "group_id")

CHECKS: dict[int, Pre] = {
    JoinGroupRequest.API_KEY: _GROUP_MEMBER,
    SyncGroupRequest.API_KEY: _GROUP_MEMBER,
    HeartbeatRequest.API_KEY: _GROUP_MEMBER,
    LeaveGroupRequest.API_KEY: _GROUP_MEMBER,
    ConsumerGroupHeartbeatRequest.API_KEY: _GROUP_MEMBER,
    OffsetCommitRequest.API_KEY: Requires(
        (_GROUP_READ,), _per_topic(Operation.READ, _commit_refused, "topics", OffsetCommitResponse)
    ),
    OffsetFetchRequest.API_KEY: _offset_fetch,
    OffsetDeleteRequest.API_KEY: Requires(
        ((Operation.DELETE, GROUP, "group_id"),),
        _per_topic(Operation.READ, _offset_delete_refused, "topics", OffsetDeleteResponse),
    ),
    FindCoordinatorRequest.API_KEY: _find_coordinator,
    DescribeGroupsRequest.API_KEY: PerItem(
        Operation.DESCRIBE,
        "groups",
        _group,
        _described_group_refused(DescribeGroupsResponse),
        "groups",
        DescribeGroupsResponse,
        _group_operations,
    ),
    ConsumerGroupDescribeRequest.API_KEY: PerItem(
        Operation.DESCRIBE,
        "group_ids",
        _group,
        _described_group_refused(ConsumerGroupDescribeResponse),
        "groups",
        ConsumerGroupDescribeResponse,
        _group_operations,
    ),
    ListGroupsRequest.API_KEY: _list_groups,
    DeleteGroupsRequest.API_KEY: PerItem(
        Operation.DELETE, "groups_names", _group, _deleted_group_refused, "results", DeleteGroupsResponse
    ),
    CreateTopicsRequest.API_KEY: _create_topics,
    DeleteTopicsRequest.API_KEY: _delete_topics,
    DeleteRecordsRequest.API_KEY: _per_topic(
        Operation.DELETE, _delete_records_refused, "topics", DeleteRecordsResponse
    ),
    CreatePartitionsRequest.API_KEY: _per_topic(
        Operation.ALTER, _create_partitions_refused, "results", CreatePartitionsResponse
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
    AddOffsetsToTxnRequest.API_KEY: Requires((_TXN_WRITE, _GROUP_READ)),
    EndTxnRequest.API_KEY: Requires((_TXN_WRITE,)),
    TxnOffsetCommitRequest.API_KEY: Requires(
        (_TXN_WRITE, _GROUP_READ),
        _per_topic(Operation.READ, _txn_commit_refused, "topics", TxnOffsetCommitResponse),
    ),
    DescribeProducersRequest.API_KEY: _per_topic(
        Operation.READ, _producers_refused, "topics", DescribeProducersResponse
    ),
    DescribeTransactionsRequest.API_KEY: PerItem(
        Operation.DESCRIBE,
        "transactional_ids",
        _txn,
        _transaction_refused,
        "transaction_states",
        DescribeTransactionsResponse,
        _visible_transaction_topics,
    ),
    ListTransactionsRequest.API_KEY: _list_transactions,
    DescribeClientQuotasRequest.API_KEY: _cluster_needs(Operation.DESCRIBE_CONFIGS),
    AlterClientQuotasRequest.API_KEY: _cluster_needs(Operation.ALTER_CONFIGS),
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
