"""Produce (key 0): validate each partition's batch, append it, wake waiting fetches.

Versions served and per-version notes:

- v3-13 (v0-2 are gone since Kafka 4.0). v3+ carries transactional_id and magic v2 batches only.
- v7+ may use ZStandard; before v7 a ZStandard batch gets UNSUPPORTED_COMPRESSION_TYPE.
- v8+ responses carry error_message and record_errors (KIP-467): a batch refused for some of its
  records (keyless records on a compacted topic, timestamps out of range) lists each of them with
  its index and reason, so a client can fail those records and retry the others; an error about
  the batch or the request as a whole lists none. Older versions get the error code alone.
- v9+ flexible. v10 (KIP-951 leader hints) and v11 (TRANSACTION_ABORTABLE) change nothing for a
  single node that never moves leadership.
- v12+ (transactions v2, KIP-890): a transactional batch adds its partition to the transaction
  of the request's transactional id itself, as Kafka's ReplicaManager asks the coordinator to;
  the producer id and epoch must be the coordinator's current ones. Coordinator errors become
  the ones producers expect: PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, and the retriable
  CONCURRENT_TRANSACTIONS / COORDINATOR_LOAD_IN_PROGRESS -> NOT_ENOUGH_REPLICAS (retried without
  a metadata refresh). Older versions only verify that the partition is in the ongoing
  transaction. With the broker's ``transaction.version`` below 2 a transactional v12+ batch gets
  UNSUPPORTED_VERSION, as Kafka 4 answers (clients use v12 for transactions only when ApiVersions
  finalizes ``transaction.version`` 2).
- v13+ topics by id (KIP-516): an unknown id answers UNKNOWN_TOPIC_ID.

The request-level rules of Kafka's ``ProduceRequest.validateRecords`` (one magic v2 batch per
partition, no ZStandard before v7) are checked here; everything about the batch itself (size,
CRC, record count, offsets, timestamps, keys) is the log's validator's job, as it is Kafka's
``LogValidator``'s. Everything up to the append runs without an ``await``, so requests pipelined
on one connection append in the order they were sent (idempotent producers with several in
flight depend on it).
Idempotence and transactional bookkeeping (sequence checks, duplicates, fencing) belong to the
log's producer state; its errors come back as ``KafkaError``s and become partition error codes.

acks=0 gets no response at all. If such a request failed for some partition, the connection is
closed after processing, as Kafka does, because that is the only signal the client can notice.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from reference_broker.handlers.auth import Operation, ResourceType, authorize, topic_denied
from reference_broker.handlers.common import error_code_of, find_topic
from reference_broker.log.results import RecordError, record_errors_of
from reference_broker.log.throttled_log import ThrottledLog
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import ProduceRequest, ProduceResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.log.log_manager import TopicMetadata
    from reference_broker.network.server import RequestContext
    from reference_broker.replication.produce import PendingAck

API_KEY = ProduceRequest.API_KEY
log = logging.getLogger("reference_broker.produce")
#: one line per partition and error a minute: a full disk refuses every produce the same way
_refusals = ThrottledLog(log)

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = ProduceResponse.PartitionProduceResponse
BatchIndexError = ProduceResponse.BatchIndexAndErrorMessage
_ATTRIBUTES = struct.Struct(">h")
_MAGIC_OFFSET, _ATTRIBUTES_OFFSET, _LOG_OVERHEAD, _ZSTD = 16, 21, 12, 4
_TRANSACTIONAL, _PRODUCER_ID_OFFSET = 0x10, 43
_PRODUCER = struct.Struct(">qh")


def request_level_problem(records: memoryview | bytes | None, version: int) -> str | None:
    """Kafka's ``ProduceRequest.validateRecords``: why the partition gets INVALID_RECORD, or None."""
    if records is None or len(records) < _ATTRIBUTES_OFFSET + 2:
        return f"Produce requests with version {version} must have at least one record batch per partition"
    if records[_MAGIC_OFFSET] != 2:
        return (
            f"Produce requests with version {version} are only allowed to contain record batches "
            "with magic version 2"
        )
    (batch_length,) = struct.unpack_from(">i", records, 8)
    if batch_length >= 0 and _LOG_OVERHEAD + batch_length < len(records):
        return (
            f"Produce requests with version {version} are only allowed to contain exactly one record "
            "batch per partition"
        )
    return None


def _failed(
    index: int, code: int, message: str | None = None, refused: tuple[RecordError, ...] = ()
) -> ProduceResponse.PartitionProduceResponse:
    """A partition's error answer; ``refused`` lists the records at fault when the error names
    records (KIP-467), and is empty when it is about the batch or the request as a whole."""
    return PartitionResponse(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[
            BatchIndexError(batch_index=e.batch_index, batch_index_error_message=e.message) for e in refused
        ],
        error_message=message,
    )


def handle(broker: Broker, ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    return _handle(broker, ctx, request, None)


async def handle_replicated(broker: Broker, ctx: RequestContext,
                            request: ProduceRequest) -> ProduceResponse | None:
    """Cluster mode: appends go to partitions led here, acks=all waits for the ISR
    (``reference_broker.replication.produce``). Pipelined requests still append in order: every
    append happens before the first ``await``."""
    from reference_broker.replication.produce import wait_for_acks

    pending: list[PendingAck] = []
    checked = await _check_with_remote_coordinator(broker, request, ctx.api_version)
    response = _handle(broker, ctx, request, pending, checked)
    if pending:
        await wait_for_acks(pending, request.timeout_ms)
    return response


async def _check_with_remote_coordinator(
    broker: Broker, request: ProduceRequest, version: int
) -> dict[tuple[str, int], int] | None:
    """Cluster mode, a transactional produce whose transactional id another node coordinates:
    that coordinator is asked about the request's partitions first (transactions v2, Produce
    v12+: it adds them; before v12: it verifies they are in the ongoing transaction), Kafka's
    ``AddPartitionsToTxnManager``. None when the local coordinator answers (or nothing to ask)."""
    service = broker.txn_service
    transactional_id = request.transactional_id
    if (
        service is None
        or service.remote_verifier is None
        or not transactional_id
        or service.coordinator.owns(transactional_id)
    ):
        return None
    by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic in request.topic_data:
        info, _ = find_topic(broker, topic.name, topic.topic_id if version >= 13 else None)
        if info is None:
            continue  # answered UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID by ``_handle``
        for part in topic.partition_data:
            records = part.records
            if records is None or len(records) < _PRODUCER_ID_OFFSET + _PRODUCER.size:
                continue
            (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_OFFSET)
            if attributes & _TRANSACTIONAL:
                producer_id, epoch = _PRODUCER.unpack_from(records, _PRODUCER_ID_OFFSET)
                if producer_id >= 0:
                    by_producer.setdefault((producer_id, epoch), []).append((info.name, part.index))
    checked: dict[tuple[str, int], int] = {}
    for (producer_id, epoch), partitions in by_producer.items():
        answers = await service.check_transaction(
            transactional_id, producer_id, epoch, partitions, add=version >= 12
        )
        for tp, code in answers.items():
            if code == ErrorCode.PRODUCER_FENCED:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
            checked[tp] = ErrorCode.NOT_ENOUGH_REPLICAS if code in _RETRIED_AS_NOT_ENOUGH_REPLICAS else code
    return checked


def _handle(broker: Broker, ctx: RequestContext, request: ProduceRequest,
            pending: list[PendingAck] | None,
            checked: dict[tuple[str, int], int] | None = None) -> ProduceResponse | None:
    version = ctx.api_version
    acks = request.acks
    any_error = False
    topics = []
    if (
        broker.authorizer is not None
        and _has_transactional_records(request)
        and not (
            request.transactional_id
            and authorize(
                broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
            )
        )
    ):
        ctx.close_after = acks == 0
        return error_response(request, version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    for topic in request.topic_data:
        info, missing = find_topic(broker, topic.name, topic.topic_id if version >= 13 else None)
        denied = missing != ErrorCode.UNKNOWN_TOPIC_ID and topic_denied(
            broker, ctx, Operation.WRITE, info.name if info else topic.name
        )
        partitions = []
        for part in topic.partition_data:
            if acks not in (0, 1, -1):
                result = _failed(part.index, ErrorCode.INVALID_REQUIRED_ACKS)
            elif denied:
                result = _failed(part.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif info is None or not 0 <= part.index < info.num_partitions:
                result = _failed(part.index, missing or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                result = _append(broker, info, part.index, part.records, version,
                                 request.transactional_id, acks, pending, checked)
            any_error = any_error or result.error_code != ErrorCode.NONE
            partitions.append(result)
        topics.append(TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=partitions))
    if acks == 0:
        if any_error:
            ctx.close_after = True
            log.info("acks=0 produce from %s had errors; closing the connection", ctx.connection.peer)
        return None
    return ProduceResponse(responses=topics)


def _has_transactional_records(request: ProduceRequest) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: whether any batch is transactional (what
    makes Produce need WRITE on the transactional id)."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if records is not None and len(records) >= _ATTRIBUTES_OFFSET + 2:
                (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_OFFSET)
                if attributes & _TRANSACTIONAL:
                    return True
    return False


def _append(
    broker: Broker,
    info: TopicMetadata,
    index: int,
    records: memoryview | bytes | None,
    version: int,
    transactional_id: str | None,
    acks: int,
    pending: list[PendingAck] | None,
    checked: dict[tuple[str, int], int] | None = None,
) -> ProduceResponse.PartitionProduceResponse:
    name = info.name
    problem = request_level_problem(records, version)
    if problem:
        log.info("rejected produce to %s-%d: %s", name, index, problem)
        return _failed(index, ErrorCode.INVALID_RECORD, problem)
    assert records is not None
    (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_OFFSET)
    if attributes & 0x07 == _ZSTD and version < 7:
        return _failed(
            index,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} cannot use ZStandard compression",
        )
    if attributes & _TRANSACTIONAL and broker.transaction_coordinator is not None:
        # Only into a partition of the producer's ongoing transaction, with its current epoch.
        producer_id, epoch = _PRODUCER.unpack_from(records, _PRODUCER_ID_OFFSET)
        # As Kafka's ReplicaManager, only batches with a producer id are verified: one without is
        # malformed, and the log's validator answers it INVALID_RECORD.
        code = 0
        if checked is not None:  # cluster mode: asked of the coordinating node already
            code = checked.get((name, index), 0)
        elif producer_id >= 0:
            code = _transaction_check(broker, transactional_id, producer_id, epoch, (name, index), version)
        if code:
            log.info("transactional produce to %s-%d of %d refused: %d", name, index, producer_id, code)
            return _failed(index, code, "The partition is not part of the producer's ongoing transaction")
    leader = None
    if pending is not None:  # cluster mode
        from reference_broker.replication.produce import check_leader

        replicas = broker.replica_manager
        assert replicas is not None
        leader, code, message = check_leader(replicas, name, index, acks)
        if leader is None:
            return _failed(index, code, message)
    try:
        # The records are a view into this request's own buffer, used for nothing else after.
        appended = broker.logs.append(name, index, records, in_place=True)
    except KafkaError as exc:
        if exc.code != ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            _refusals.log((name, index, exc.code), logging.INFO,
                          "append to %s-%d refused: %s", name, index, exc)
        return _failed(index, error_code_of(exc), exc.message or exc.name, record_errors_of(exc))
    response = PartitionResponse(
        index=index,
        error_code=ErrorCode.NONE,
        base_offset=appended.base_offset,
        log_append_time_ms=appended.log_append_time_ms,
        log_start_offset=appended.log_start_offset,
    )
    if leader is not None:
        leader.maybe_increment_high_watermark()  # an ISR of the leader alone commits at once
    if leader is not None and acks == -1:
        from reference_broker.replication.produce import PendingAck, min_insync_replicas

        assert pending is not None and broker.replica_manager is not None
        pending.append(PendingAck(response, leader, appended.last_offset + 1,
                                  min_insync_replicas(broker.replica_manager, leader)))
    return response


#: Kafka's ReplicaManager: the implicit add's retriable coordinator errors become
#: NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
_RETRIED_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def _transaction_check(
    broker: Broker,
    transactional_id: str | None,
    producer_id: int,
    epoch: int,
    tp: tuple[str, int],
    version: int,
) -> int:
    """v12+ with a transactional id: add the partition (transactions v2); otherwise verify it is
    already in the producer's ongoing transaction."""
    coordinator = broker.transaction_coordinator
    assert coordinator is not None
    if version >= 12 and transactional_id:
        code = coordinator.add_partition_implicitly(transactional_id, producer_id, epoch, tp)
        return ErrorCode.NOT_ENOUGH_REPLICAS if code in _RETRIED_AS_NOT_ENOUGH_REPLICAS else code
    return coordinator.verify_produce(producer_id, epoch, tp)


def error_response(request: ProduceRequest, version: int, code: int) -> ProduceResponse | None:
    if request.acks == 0:
        return None  # the client reads no response: closing the connection is the signal
    return ProduceResponse(
        responses=[
            TopicResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[_failed(p.index, code) for p in t.partition_data],
            )
            for t in request.topic_data
        ]
    )


def install(registry: HandlerRegistry) -> None:
    """The synchronous handler on a single node; in cluster mode (a broker with a replica
    manager) the one that waits for acks=all."""
    replicated = getattr(registry.broker, "replica_manager", None) is not None
    registry.register(API_KEY, handle_replicated if replicated else handle,
                      error_response=error_response)
