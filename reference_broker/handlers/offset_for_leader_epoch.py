"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in this leader's log (KIP-101, KIP-279,
KIP-320).

A follower (or a consumer checking for truncation after a leader change, KIP-320) names the last
epoch it has and learns ``(epoch, end_offset)``: the largest epoch the leader knows at or below the
one asked, and the offset where it ended here (the log end offset for the leader's current epoch);
everything the asker has from that offset on diverged and is truncated. An epoch newer than any
known, or -1, answers ``(-1, -1)``. See ``log.leader_epoch.LeaderEpochCache.end_offset_for``.

Versions v2-4 (Kafka 4.1's range; v3 adds replica_id, which changes nothing: the answer is always
read from the leader, v4 is flexible). Per partition, as Kafka's ``ReplicaManager`` answers:
UNKNOWN_TOPIC_OR_PARTITION for a partition nobody has, NOT_LEADER_OR_FOLLOWER when this broker does
not lead it, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when ``current_leader_epoch`` (-1: not
checked) is older / newer than the leader's epoch, KAFKA_STORAGE_ERROR for an offline log.
Authorization: CLUSTER_ACTION on the cluster (brokers), or else DESCRIBE on each topic
(consumers), TOPIC_AUTHORIZATION_FAILED for the others.

On a single node this broker leads every partition in the log's epoch (0). As Kafka's leader
records its epoch's start when it becomes leader, an epoch not yet written to the log counts as
starting at the log end offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.handlers.auth import Operation, authorize_cluster, topic_denied
from reference_broker.handlers.common import error_code_of
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.log.partition_log import PartitionLog
    from reference_broker.network.server import RequestContext

API_KEY = OffsetForLeaderEpochRequest.API_KEY

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


def epoch_error(requested: int, current: int) -> int:
    """Kafka's check of a ``current_leader_epoch`` against the partition's epoch (-1: none)."""
    if requested < 0 or requested == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def _leader_log(broker: Broker, topic: str, partition: int) -> tuple[PartitionLog | None, int, int]:
    """(the partition's log here, its leader epoch, an error code) for a partition this broker
    should lead."""
    info = broker.logs.topic(topic)
    replicas = getattr(broker, "replica_manager", None)
    if replicas is not None:
        state = replicas.partition(topic, partition)
        if state is None:
            known = info is not None and 0 <= partition < info.num_partitions
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None, -1, code
        if not state.is_leader:
            return None, state.leader_epoch, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return state.log, state.leader_epoch, ErrorCode.NONE
    if info is None or not 0 <= partition < info.num_partitions:
        return None, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    plog = broker.logs.manager.get_log(topic, partition)
    return plog, plog.leader_epoch, ErrorCode.NONE


def _answer(broker: Broker, topic: str, p: OffsetForLeaderEpochRequest.OffsetForLeaderPartition
            ) -> EpochEndOffset:
    result = EpochEndOffset(partition=p.partition)
    try:
        plog, epoch, code = _leader_log(broker, topic, p.partition)
        if plog is None:
            result.error_code = code
            return result
        result.error_code = epoch_error(p.current_leader_epoch, epoch)
        if result.error_code:
            return result
        result.leader_epoch, result.end_offset = plog.end_offset_for_epoch(p.leader_epoch)
    except KafkaError as exc:
        result.error_code = error_code_of(exc)
    return result


def handle(broker: Broker, ctx: RequestContext,
           request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    as_broker = broker.authorizer is None or authorize_cluster(broker, ctx, Operation.CLUSTER_ACTION)
    topics = []
    for topic in request.topics:
        if not as_broker and topic_denied(broker, ctx, Operation.DESCRIBE, topic.topic):
            partitions = [EpochEndOffset(partition=p.partition,
                                         error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                          for p in topic.partitions]
        else:
            partitions = [_answer(broker, topic.topic, p) for p in topic.partitions]
        topics.append(TopicResult(topic=topic.topic, partitions=partitions))
    return OffsetForLeaderEpochResponse(topics=topics)


def error_response(request: OffsetForLeaderEpochRequest, version: int,
                   code: int) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(topics=[
        TopicResult(topic=t.topic, partitions=[
            EpochEndOffset(partition=p.partition, error_code=code) for p in t.partitions])
        for t in request.topics
    ])


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, versions=(2, 4), error_response=error_response)
