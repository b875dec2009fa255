"""DeleteRecords (key 21): move a partition's log start offset forward.

Versions served and per-version notes:

- v0-2, all alike in what they ask and answer; v2+ flexible. On a single node timeout_ms is not
  waited on: the new log start is in place before the answer (one replica, nothing to wait for).
  In cluster mode only the leader deletes (NOT_LEADER_OR_FOLLOWER elsewhere) and its answer
  waits up to timeout_ms until every follower on an alive broker has moved its own log start
  offset there too (``replication.delete_records``; REQUEST_TIMED_OUT when it does not).

An offset of -1 means "up to the high watermark", as in Kafka; offsets past the high watermark
get OFFSET_OUT_OF_RANGE. The internal topics (``__consumer_offsets``, ``__transaction_state``) are
the coordinators' memory: a partition of one that exists gets INVALID_TOPIC_EXCEPTION and nothing
is deleted, as in Kafka's ``ReplicaManager.deleteRecordsOnLocalLog`` (checked after the partition's
existence, before its offsets). The storage layer deletes whole segments below the new start lazily;
readers see the new start at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from reference_broker.handlers.common import error_code_of, find_topic
from reference_broker.replication.delete_records import PendingDeletion, wait_for_low_watermarks
from reference_broker.replication.replica_manager import client_read_error
from reference_broker.storage import is_internal
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = DeleteRecordsRequest.API_KEY
HIGH_WATERMARK = -1
log = logging.getLogger("reference_broker.records_admin")

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


async def handle(broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    replicas = broker.replica_manager
    pending: list[PendingDeletion] = []
    topics = []
    for topic in request.topics:
        info, missing = find_topic(broker, topic.name, None)
        partitions = []
        for p in topic.partitions:
            result = PartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NONE
            )
            partitions.append(result)
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                result.error_code = missing or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if is_internal(info.name):
                log.info("refused DeleteRecords on internal topic %s-%d", info.name, p.partition_index)
                result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            if replicas is not None:
                result.error_code = client_read_error(replicas, info.name, p.partition_index, -1)
                if result.error_code:
                    continue
            _, hw, _ = broker.logs.offsets(info.name, p.partition_index)
            offset = hw if p.offset == HIGH_WATERMARK else p.offset
            if offset < 0 or offset > hw:
                result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            try:
                result.low_watermark = broker.logs.delete_records(info.name, p.partition_index, offset)
            except KafkaError as exc:
                result.error_code = error_code_of(exc)
            else:
                log.info("log start of %s-%d is now %d", info.name, p.partition_index, result.low_watermark)
                partition = replicas.partition(info.name, p.partition_index) if replicas else None
                if partition is not None:
                    pending.append(PendingDeletion(partition, offset, result))
        topics.append(TopicResult(name=topic.name, partitions=partitions))
    if pending:
        await wait_for_low_watermarks(pending, request.timeout_ms, _alive_broker(broker))
    return DeleteRecordsResponse(topics=topics)


def _alive_broker(broker: Broker) -> Callable[[int], bool]:
    """Whether a broker is registered and unfenced in the metadata image (Kafka's
    ``hasAliveBroker``): only replicas there hold a DeleteRecords answer back."""
    publisher = getattr(broker, "metadata_publisher", None)

    def alive(node_id: int) -> bool:
        registration = publisher.image.brokers.get(node_id) if publisher is not None else None
        return registration is not None and not registration.fenced

    return alive


def error_response(request: DeleteRecordsRequest, version: int, code: int) -> DeleteRecordsResponse:
    return DeleteRecordsResponse(
        topics=[
            TopicResult(
                name=t.name,
                partitions=[
                    PartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
