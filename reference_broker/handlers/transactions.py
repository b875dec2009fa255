"""Transaction APIs, answered by ``broker.transaction_coordinator``; AddOffsetsToTxn and
TxnOffsetCommit, which need the group coordinator too, by ``broker.txn_service``
(``TransactionCoordinatorService.add_offsets`` / ``commit_offsets``). These handlers only translate
between the protocol and those calls. InitProducerId is in ``producer_ids.py``.

Versions served and per-version notes:

- AddPartitionsToTxn (24) v0-5: v0-3 one transaction (the client's form); v4+ batched
  (``transactions``, Kafka's broker-to-coordinator form) with ``verify_only`` (answers whether
  each partition is in the ongoing transaction, adds nothing). PRODUCER_FENCED is sent as
  INVALID_PRODUCER_EPOCH before v2 (KIP-588). v5 only allows TRANSACTION_ABORTABLE, never sent.
  A partition of an unknown topic fails with UNKNOWN_TOPIC_OR_PARTITION and the others of the
  request with OPERATION_NOT_ATTEMPTED, as Kafka does.
- AddOffsetsToTxn (25) v0-4: adds the group's ``__consumer_offsets`` partition (PRODUCER_FENCED
  -> INVALID_PRODUCER_EPOCH before v2).
- TxnOffsetCommit (28) v0-5: v3+ carry the member id, generation and instance id, checked by the
  group coordinator as KIP-447 says (only when given). The offsets stay pending until the
  transaction commits. v5 (transactions v2, KIP-890) adds the group's ``__consumer_offsets``
  partition to the transaction itself (no AddOffsetsToTxn); a producer id or epoch that is not
  the current one gets INVALID_PRODUCER_ID_MAPPING / INVALID_PRODUCER_EPOCH.
- EndTxn (26) v0-5 (PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH before v2). v5 is transactions v2
  (KIP-890): the epoch is bumped (a new producer id at overflow) and the answer carries the
  producer id and epoch to continue with; a retry whose answer was lost gets it again.
- With the broker's ``transaction.version`` below 2 the versions stay advertised but what needs
  transactions v2 is answered UNSUPPORTED_VERSION, as Kafka 4 does: EndTxn v5, TxnOffsetCommit
  v5 and a transactional Produce v12+ (a client is to use v2 only when ApiVersions finalizes
  ``transaction.version`` 2).
- WriteTxnMarkers (27) v1 (Kafka 4.1's range): a transaction coordinator's request (on another
  node of a cluster, or an admin client's KIP-664 ``abortTransaction``) to end a producer's
  transaction on partitions this broker leads. Authorized as Kafka does: CLUSTER_ACTION on the
  cluster when an authorizer is configured (``super.users`` or an ACL), CLUSTER_AUTHORIZATION_FAILED
  for every partition otherwise; without an authorizer anyone may send it. Each partition answers
  on its own (UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for an epoch older than the
  producer's, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch); a marker for a
  producer with no transaction open on the partition is written all the same, as in Kafka. A
  partition answers once its ISR holds the marker (Kafka's acks=-1 append): NOT_LEADER_OR_FOLLOWER
  if the leadership moved meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT; the
  coordinator sends it again. In a cluster this node's own coordinator writes the markers of
  partitions it leads through the same ``TransactionCoordinatorService.write_replicated_marker``.
- ListTransactions (66) v0-2 (v1 duration filter, v2 transactional id regex),
  DescribeTransactions (65) v0, DescribeProducers (61) v0.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from reference_broker.coordinator.group.state import CommittedOffset
from reference_broker.coordinator.txn.service import TransactionalOffsetCommit
from reference_broker.coordinator.txn.state import TxnState
from reference_broker.handlers.auth import Operation, authorize_cluster
from reference_broker.handlers.common import error_code_of
from reference_broker.patterns import InvalidPatternError
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    Message,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.coordinator.txn.coordinator import TransactionCoordinator
    from reference_broker.coordinator.txn.service import TransactionCoordinatorService
    from reference_broker.handlers.registry import ErrorFunc, HandlerRegistry
    from reference_broker.network.server import RequestContext

E = ErrorCode
ADD_PARTITIONS = AddPartitionsToTxnRequest.API_KEY
ADD_OFFSETS = AddOffsetsToTxnRequest.API_KEY
END_TXN = EndTxnRequest.API_KEY
WRITE_MARKERS = WriteTxnMarkersRequest.API_KEY
TXN_OFFSET_COMMIT = TxnOffsetCommitRequest.API_KEY
DESCRIBE_PRODUCERS = DescribeProducersRequest.API_KEY
DESCRIBE_TRANSACTIONS = DescribeTransactionsRequest.API_KEY
LIST_TRANSACTIONS = ListTransactionsRequest.API_KEY

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def _coordinator(broker: Broker) -> TransactionCoordinator:
    assert broker.transaction_coordinator is not None, "broker not started"
    return broker.transaction_coordinator


def _service(broker: Broker) -> TransactionCoordinatorService:
    assert broker.txn_service is not None, "broker not started"
    return broker.txn_service


def fenced_for(code: int, version: int, first_version_with_fenced: int) -> int:
    """KIP-588: clients older than ``first_version_with_fenced`` know only INVALID_PRODUCER_EPOCH."""
    if code == E.PRODUCER_FENCED and version < first_version_with_fenced:
        return E.INVALID_PRODUCER_EPOCH
    return code


# -- AddPartitionsToTxn --------------------------------------------------------------------


def _topic_results(partitions: dict[tuple[str, int], int]) -> list[TopicResult]:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, index), code in partitions.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_index=index, partition_error_code=code)
        )
    return [TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


def _add_partitions(
    broker: Broker,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topics: list,
    verify_only: bool,
    version: int,
) -> dict[tuple[str, int], int]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    coordinator = _coordinator(broker)
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, epoch, wanted)
    if version >= 5 and broker.replica_manager is not None:
        # Cluster mode: a partition leader (or group coordinator) adding a transactions v2
        # client's partition, which it has checked exists (Kafka's AddPartitionsToTxnManager).
        return {tp: coordinator.add_partition_implicitly(transactional_id, producer_id, epoch, tp)
                for tp in wanted}
    unknown = set()
    for topic, partition in wanted:
        meta = broker.logs.topic(topic)
        if meta is None or not 0 <= partition < meta.num_partitions:
            unknown.add((topic, partition))
    if unknown:
        return {
            tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in wanted
        }
    code = coordinator.add_partitions(transactional_id, producer_id, epoch, wanted)
    return dict.fromkeys(wanted, fenced_for(code, version, 2))


def handle_add_partitions(
    broker: Broker, ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    version = ctx.api_version
    if version < 4:
        result = _add_partitions(
            broker,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
            version,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(result))
    results = []
    for txn in request.transactions:
        result = _add_partitions(
            broker,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
            version,
        )
        results.append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=_topic_results(result)
            )
        )
    return AddPartitionsToTxnResponse(error_code=ErrorCode.NONE, results_by_transaction=results)


def error_add_partitions(
    request: AddPartitionsToTxnRequest, version: int, code: int
) -> AddPartitionsToTxnResponse:
    if version < 4:
        wanted = {(t.name, p): code for t in request.v3_and_below_topics for p in t.partitions}
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(wanted))
    return AddPartitionsToTxnResponse(error_code=code)


# -- AddOffsetsToTxn -----------------------------------------------------------------------


def handle_add_offsets(
    broker: Broker, ctx: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    code = _service(broker).add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return AddOffsetsToTxnResponse(error_code=fenced_for(code, ctx.api_version, 2))


# -- TxnOffsetCommit -----------------------------------------------------------------------


def handle_txn_offset_commit(
    broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    # v5 is transactions v2 (KIP-890): the partition joins the transaction implicitly.
    commit = _transactional_offset_commit(broker, ctx.api_version, request)
    result = _service(broker).commit_offsets(commit, add_partition=ctx.api_version >= 5)
    return _offset_commit_response(result)


async def handle_txn_offset_commit_in_cluster(
    broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    """Cluster mode: the transaction's coordinator may be another node (asked over the network)."""
    commit = _transactional_offset_commit(broker, ctx.api_version, request)
    result = await _service(broker).commit_offsets_in_cluster(commit, add_partition=ctx.api_version >= 5)
    return _offset_commit_response(result)


def _transactional_offset_commit(
    broker: Broker, version: int, request: TxnOffsetCommitRequest
) -> TransactionalOffsetCommit:
    now = broker.clock.now_ms()
    return TransactionalOffsetCommit(
        transactional_id=request.transactional_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        group_id=request.group_id,
        generation=request.generation_id if version >= 3 else -1,
        member_id=request.member_id if version >= 3 else "",
        group_instance_id=request.group_instance_id if version >= 3 else None,
        offsets={
            (t.name, p.partition_index): CommittedOffset(
                p.committed_offset,
                p.committed_leader_epoch if version >= 2 else -1,
                p.committed_metadata or "",
                now,
            )
            for t in request.topics
            for p in t.partitions
        },
    )


def _offset_commit_response(result: dict[tuple[str, int], int]) -> TxnOffsetCommitResponse:
    by_topic: dict[str, list] = {}
    for (topic, index), code in result.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(partition_index=index, error_code=code)
        )
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    )


def error_txn_offset_commit(
    request: TxnOffsetCommitRequest, version: int, code: int
) -> TxnOffsetCommitResponse:
    return _offset_commit_response(
        {(t.name, p.partition_index): code for t in request.topics for p in t.partitions}
    )


# -- EndTxn --------------------------------------------------------------------------------


def handle_end_txn(broker: Broker, ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    coordinator = _coordinator(broker)
    args = (request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if ctx.api_version >= 5:
        result = coordinator.end_transaction_v2(*args)
        return EndTxnResponse(
            error_code=result.error, producer_id=result.producer_id, producer_epoch=result.producer_epoch
        )
    return EndTxnResponse(error_code=fenced_for(coordinator.end_transaction(*args), ctx.api_version, 2))


# -- WriteTxnMarkers -----------------------------------------------------------------------


async def handle_write_markers(
    broker: Broker, ctx: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    if not authorize_cluster(broker, ctx, Operation.CLUSTER_ACTION):
        return error_write_markers(request, ctx.api_version, E.CLUSTER_AUTHORIZATION_FAILED)
    service = _service(broker)
    R = WriteTxnMarkersResponse

    async def one(marker: WriteTxnMarkersRequest.WritableTxnMarker, topic: str, index: int) -> int:
        try:
            await service.write_replicated_marker(
                (topic, index),
                marker.transaction_result,
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
            )
        except KafkaError as exc:
            return error_code_of(exc)
        return E.NONE

    # Every partition's marker is appended before any waits for its ISR (all at once, as Kafka's
    # one acks=-1 append of the request's markers).
    codes = iter(await asyncio.gather(*(
        one(marker, topic.name, index)
        for marker in request.markers for topic in marker.topics for index in topic.partition_indexes
    )))
    return R(markers=[
        R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=topic.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=index, error_code=next(codes))
                for index in topic.partition_indexes
            ])
            for topic in marker.topics
        ])
        for marker in request.markers
    ])


def error_write_markers(request: WriteTxnMarkersRequest, version: int, code: int) -> WriteTxnMarkersResponse:
    R = WriteTxnMarkersResponse
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(partition_index=i, error_code=code)
                            for i in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in request.markers
        ]
    )


# -- ListTransactions / DescribeTransactions / DescribeProducers ---------------------------


#: How many transactions a listing or description handles before it lets the event loop serve other
#: connections: a request naming (or matching) tens of thousands of transactional ids must not hold
#: every other client for its whole duration.
TRANSACTIONS_PER_STEP = 500


async def handle_list_transactions(
    broker: Broker, ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    coordinator = _coordinator(broker)
    if coordinator.loading:
        return ListTransactionsResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS)
    states = set()
    unknown = []
    for name in request.state_filters:
        state = TxnState.from_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    if request.state_filters and not states:
        return ListTransactionsResponse(unknown_state_filters=unknown)
    pattern = request.transactional_id_pattern if ctx.api_version >= 2 else None
    try:
        found = coordinator.list_transactions(
            states,
            set(request.producer_id_filters),
            request.duration_filter if ctx.api_version >= 1 else -1,
            pattern or None,
        )
    except InvalidPatternError:
        return ListTransactionsResponse(error_code=E.INVALID_REGULAR_EXPRESSION)
    listed = []
    for count, meta in enumerate(found, 1):
        listed.append(
            ListTransactionsResponse.TransactionState(
                transactional_id=meta.transactional_id,
                producer_id=meta.producer_id,
                transaction_state=meta.state.display,
            )
        )
        if count % TRANSACTIONS_PER_STEP == 0:
            await asyncio.sleep(0)
    return ListTransactionsResponse(unknown_state_filters=unknown, transaction_states=listed)


async def handle_describe_transactions(
    broker: Broker, ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    """Each id is described as it stands when its turn comes; the loop yields to other connections
    every ``TRANSACTIONS_PER_STEP`` ids."""
    coordinator = _coordinator(broker)
    R = DescribeTransactionsResponse
    answers = []
    for count, transactional_id in enumerate(request.transactional_ids, 1):
        if count % TRANSACTIONS_PER_STEP == 0:
            await asyncio.sleep(0)
        meta = coordinator.txns.get(transactional_id)
        if coordinator.loading or meta is None:
            code = E.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading else E.TRANSACTIONAL_ID_NOT_FOUND
            answers.append(R.TransactionState(error_code=code, transactional_id=transactional_id))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        answers.append(
            R.TransactionState(
                transactional_id=transactional_id,
                transaction_state=meta.state.display,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return R(transaction_states=answers)


def handle_describe_producers(
    broker: Broker, ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    R = DescribeProducersResponse
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                producers = broker.logs.active_producers(topic.name, index)
            except KafkaError as exc:
                partitions.append(R.PartitionResponse(partition_index=index, error_code=error_code_of(exc)))
                continue
            active = [
                R.ProducerState(
                    producer_id=entry.producer_id,
                    producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=(
                        -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
                    ),
                )
                for entry in producers
            ]
            partitions.append(R.PartitionResponse(partition_index=index, active_producers=active))
        topics.append(R.TopicResponse(name=topic.name, partitions=partitions))
    return R(topics=topics)


def error_describe_transactions(
    request: DescribeTransactionsRequest, version: int, code: int
) -> DescribeTransactionsResponse:
    """Every requested id carries the error (Kafka's ``DescribeTransactionsRequest.getErrorResponse``)."""
    R = DescribeTransactionsResponse
    return R(
        transaction_states=[
            R.TransactionState(error_code=code, transactional_id=t) for t in request.transactional_ids
        ]
    )


def error_describe_producers(
    request: DescribeProducersRequest, version: int, code: int
) -> DescribeProducersResponse:
    """Every requested partition carries the error (Kafka's ``DescribeProducersRequest.getErrorResponse``)."""
    R = DescribeProducersResponse
    return R(
        topics=[
            R.TopicResponse(
                name=t.name,
                partitions=[
                    R.PartitionResponse(partition_index=i, error_code=code) for i in t.partition_indexes
                ],
            )
            for t in request.topics
        ]
    )


def _simple_error(response_cls: type[Message]) -> ErrorFunc:
    def error_response(request: object, version: int, code: int) -> Message:
        return response_cls(error_code=code)

    return error_response


def install(registry: HandlerRegistry) -> None:
    registry.register(
        ADD_PARTITIONS, handle_add_partitions, versions=(0, 5), error_response=error_add_partitions
    )
    registry.register(
        ADD_OFFSETS,
        handle_add_offsets,
        versions=(0, 4),
        error_response=_simple_error(AddOffsetsToTxnResponse),
    )
    registry.register(END_TXN, handle_end_txn, versions=(0, 5), error_response=_simple_error(EndTxnResponse))
    registry.register(
        WRITE_MARKERS, handle_write_markers, versions=(1, 1), error_response=error_write_markers
    )
    in_cluster = getattr(registry.broker, "replica_manager", None) is not None
    registry.register(
        TXN_OFFSET_COMMIT,
        handle_txn_offset_commit_in_cluster if in_cluster else handle_txn_offset_commit,
        versions=(0, 5),
        error_response=error_txn_offset_commit,
    )
    registry.register(
        LIST_TRANSACTIONS,
        handle_list_transactions,
        versions=(0, 2),
        error_response=_simple_error(ListTransactionsResponse),
    )
    registry.register(
        DESCRIBE_TRANSACTIONS,
        handle_describe_transactions,
        versions=(0, 0),
        error_response=error_describe_transactions,
    )
    registry.register(
        DESCRIBE_PRODUCERS,
        handle_describe_producers,
        versions=(0, 0),
        error_response=error_describe_producers,
    )
