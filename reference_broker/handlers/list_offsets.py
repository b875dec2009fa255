"""ListOffsets (key 2): offsets by special timestamp or by time.

Versions served and per-version notes:

- v1-10, Kafka 4.1's range (v0, with max_num_offsets, is gone since Kafka 4.0; v11 is not yet
  stable there): one offset per partition.
- v2+ isolation_level: read_committed answers up to the last stable offset. v4+
  current_leader_epoch is checked, and the answer carries the leader epoch (0: one leader, never
  replaced). v6+ flexible.
- Cluster mode: only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), in its
  epoch; LATEST gets OFFSET_NOT_AVAILABLE while the high watermark is below the start of the
  leader's epoch (a new leader whose followers have not caught up yet).
- The special timestamps each need a version (an older request asking for one gets
  UNSUPPORTED_VERSION for that partition): -1 latest (the high watermark, or the last stable
  offset for read_committed) and -2 earliest always; -3 the record with the largest timestamp
  v7+ (KIP-734); -4 earliest local v8+ (KIP-405; everything is local here, so the log start);
  -5 latest tiered v9+ (KIP-1005): nothing is tiered, so "not found" (-1). v10 (KIP-1075,
  remote lookups answered asynchronously) changes nothing: every lookup is local and immediate.

Other values find the first offset whose timestamp is at least the target, within what a consumer
may read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.handlers.auth import Operation, topic_denied
from reference_broker.handlers.common import LEADER_EPOCH, error_code_of, find_topic, leader_epoch_error
from reference_broker.replication.replica_manager import client_read_error
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = ListOffsetsRequest.API_KEY
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
READ_COMMITTED = 1
# The oldest request version that may ask for each special timestamp.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse


def _lookup(broker: Broker, name: str, partition: int, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) answered for one partition; (-1, -1) when nothing matches."""
    start, hw, lso = broker.logs.offsets(name, partition)
    readable_end = lso if committed else hw
    if timestamp == LATEST:
        return -1, readable_end
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, start
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = broker.logs.max_timestamp(name, partition)
    else:
        found = broker.logs.offset_for_timestamp(name, partition, timestamp)
    if found is None or found[1] >= readable_end:
        return -1, -1
    return found


def _epoch_error(broker: Broker, topic: str, partition: int, current_leader_epoch: int,
                 timestamp: int) -> int:
    """Single node: the fixed epoch's check; cluster mode: only the leader answers, in its
    epoch, and a LATEST lookup gets OFFSET_NOT_AVAILABLE while the high watermark is below the
    start of the leader's epoch (a new leader whose followers have not caught up yet), as
    Kafka's ``fetchOffsetForTimestamp`` answers."""
    replicas = broker.replica_manager
    if replicas is None:
        return leader_epoch_error(current_leader_epoch)
    code = client_read_error(replicas, topic, partition, current_leader_epoch)
    if code or timestamp != LATEST:
        return code
    state = replicas.partition(topic, partition)
    if state is not None and state.leader_epoch_start_offset > state.log.high_watermark:
        return ErrorCode.OFFSET_NOT_AVAILABLE
    return ErrorCode.NONE


def _leader_epoch(broker: Broker, topic: str, partition: int) -> int:
    replicas = broker.replica_manager
    state = None if replicas is None else replicas.partition(topic, partition)
    return LEADER_EPOCH if state is None else state.leader_epoch


def handle(broker: Broker, ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    committed = request.isolation_level == READ_COMMITTED
    topics = []
    for topic in request.topics:
        info, missing = find_topic(broker, topic.name, None)
        if topic_denied(broker, ctx, Operation.DESCRIBE, topic.name):
            info, missing = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        partitions = []
        for p in topic.partitions:
            result = PartitionResponse(partition_index=p.partition_index, timestamp=-1, offset=-1)
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                result.error_code = missing or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.timestamp < 0 and ctx.api_version < _MIN_VERSION.get(p.timestamp, 0):
                result.error_code = ErrorCode.UNSUPPORTED_VERSION
            elif code := _epoch_error(broker, info.name, p.partition_index, p.current_leader_epoch,
                                      p.timestamp):
                result.error_code = code
            else:
                try:
                    result.timestamp, result.offset = _lookup(
                        broker, info.name, p.partition_index, p.timestamp, committed
                    )
                    result.leader_epoch = _leader_epoch(broker, info.name, p.partition_index) \
                        if result.offset >= 0 else -1
                except KafkaError as exc:
                    result.error_code = error_code_of(exc)
            partitions.append(result)
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(topics=topics)


def error_response(request: ListOffsetsRequest, version: int, code: int) -> ListOffsetsResponse:
    return ListOffsetsResponse(
        topics=[
            TopicResponse(
                name=t.name,
                partitions=[
                    PartitionResponse(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, versions=(1, 10), error_response=error_response)
