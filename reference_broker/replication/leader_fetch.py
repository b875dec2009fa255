"""The leader's side of a follower's Fetch (``replica_id >= 0``, cluster mode only).

Kafka's ``Partition.fetchRecords`` for a follower, per partition:

1. the partition must be led here (NOT_LEADER_OR_FOLLOWER; UNKNOWN_TOPIC_OR_PARTITION for one not
   known at all) in the follower's ``current_leader_epoch`` (FENCED_LEADER_EPOCH /
   UNKNOWN_LEADER_EPOCH);
2. ``last_fetched_epoch`` (v12+) is checked against the leader's epochs: if the leader's log has
   that epoch ending before ``fetch_offset``, or does not have the epoch at all, the answer is a
   ``diverging_epoch`` (the largest epoch at or below it and where it ends) with no records, and
   the follower truncates there before fetching again;
3. otherwise the follower's fetch state is updated (its log end offset is ``fetch_offset``: it has
   everything before; its broker epoch is ``replica_state.replica_epoch``, v15+, else -1), which
   may move the high watermark and expand the ISR (a fetch from an older incarnation of the
   broker than the registered one is NOT_LEADER_OR_FOLLOWER instead), and the records
   from ``fetch_offset`` up to the log end (not the high watermark) are returned with the high
   watermark, last stable offset and log start offset.

The fetch waits (long poll, ``max_wait_ms``) until ``min_bytes`` are readable, woken by appends to
the partitions asked for. Followers fetch without sessions (``session_epoch`` -1).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from reference_broker.handlers.offset_for_leader_epoch import epoch_error
from sdk.protocol.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from sdk.protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from reference_broker.replication.replica_manager import ReplicaManager
    from reference_broker.waiters import DataWaiters

PartitionData = FetchResponse.PartitionData
TopicResponse = FetchResponse.FetchableTopicResponse
TOPIC_IDS_FROM = 13
REPLICA_STATE_FROM = 15


def follower_id(request: FetchRequest, version: int) -> int:
    """The fetching replica's broker id (-1 for a consumer)."""
    if version >= REPLICA_STATE_FROM:
        return request.replica_state.replica_id
    return request.replica_id


def follower_broker_epoch(request: FetchRequest, version: int) -> int:
    """The fetching replica's broker epoch (v15+; -1 when the request cannot say it)."""
    if version >= REPLICA_STATE_FROM:
        return request.replica_state.replica_epoch
    return -1


def _now_ms() -> int:
    return int(time.time() * 1000)


async def serve_follower_fetch(
    manager: ReplicaManager,
    waiters: DataWaiters,
    request: FetchRequest,
    version: int,
    topic_name: Callable[[uuid.UUID], str | None],
    max_bytes: int,
) -> FetchResponse:
    """Answer a follower's Fetch (see the module docstring)."""
    replica_id = follower_id(request, version)
    replica_epoch = follower_broker_epoch(request, version)
    by_id = version >= TOPIC_IDS_FROM
    wanted: list[tuple[FetchRequest.FetchTopic, str | None, FetchRequest.FetchPartition]] = []
    for topic in request.topics:
        name = topic_name(topic.topic_id) if by_id else topic.topic
        for p in topic.partitions:
            wanted.append((topic, name, p))
    answers, total, stop = _read_all(manager, replica_id, replica_epoch, wanted, max_bytes)
    remaining = max(0, request.max_wait_ms) / 1000
    if total < request.min_bytes and not stop and remaining > 0 and wanted:
        keys: list[Hashable] = [(name, p.partition) for _, name, p in wanted if name is not None]
        deadline = time.monotonic() + remaining
        with waiters.watch(keys) as watch:
            while total < request.min_bytes and not stop:
                left = deadline - time.monotonic()
                if left <= 0 or not await watch.wait(left):
                    break
                answers, total, stop = _read_all(manager, replica_id, replica_epoch, wanted, max_bytes)
    topics: dict[tuple[str, uuid.UUID], TopicResponse] = {}
    for (topic, _, _), data in zip(wanted, answers, strict=True):
        key = (topic.topic, topic.topic_id)
        entry = topics.get(key)
        if entry is None:
            entry = topics[key] = TopicResponse(topic=topic.topic, topic_id=topic.topic_id, partitions=[])
        entry.partitions.append(data)
    return FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=list(topics.values()))


def _read_all(
    manager: ReplicaManager,
    replica_id: int,
    replica_epoch: int,
    wanted: list[tuple[FetchRequest.FetchTopic, str | None, FetchRequest.FetchPartition]],
    max_bytes: int,
) -> tuple[list[FetchResponse.PartitionData], int, bool]:
    """Every partition once: the answers, the bytes read, and whether to answer at once (an
    error or a diverging epoch)."""
    budget = max_bytes
    total = 0
    stop = False
    now = _now_ms()
    answers = []
    for _, name, p in wanted:
        data = _read_one(manager, replica_id, replica_epoch, name, p,
                         min(max(p.partition_max_bytes, 0), budget),
                         min_one=total == 0, now_ms=now)
        size = len(data.records or b"")
        total += size
        budget = max(0, budget - size)
        if data.error_code or data.diverging_epoch.epoch >= 0:
            stop = True
        answers.append(data)
    return answers, total, stop


def _read_one(manager: ReplicaManager, replica_id: int, replica_epoch: int, name: str | None,
              p: FetchRequest.FetchPartition, limit: int, *, min_one: bool,
              now_ms: int) -> FetchResponse.PartitionData:
    data = PartitionData(partition_index=p.partition, high_watermark=-1, last_stable_offset=-1,
                         log_start_offset=-1, records=b"")
    state = manager.partition(name, p.partition) if name is not None else None
    if state is None:
        known = name is not None and manager.knows_partition(name, p.partition)
        data.error_code = (ErrorCode.NOT_LEADER_OR_FOLLOWER if known
                           else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return data
    if not state.is_leader:
        data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return data
    code = epoch_error(p.current_leader_epoch, state.leader_epoch)
    if code:
        data.error_code = code
        return data
    plog = state.log
    try:
        if p.last_fetched_epoch >= 0:
            epoch, end = plog.end_offset_for_epoch(p.last_fetched_epoch)
            if epoch < p.last_fetched_epoch or end < p.fetch_offset:
                data.diverging_epoch.epoch, data.diverging_epoch.end_offset = epoch, end
                data.high_watermark, data.last_stable_offset = plog.high_watermark, plog.last_stable_offset
                data.log_start_offset = plog.log_start_offset
                return data
        if not plog.log_start_offset <= p.fetch_offset <= plog.log_end_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {p.fetch_offset} of replica {replica_id} is outside"
                f" [{plog.log_start_offset}, {plog.log_end_offset}]")
        state.update_follower_fetch_state(replica_id, p.fetch_offset, p.log_start_offset, now_ms,
                                          replica_epoch)
        read = plog.read(p.fetch_offset, limit, max_offset=plog.log_end_offset, min_one_batch=min_one)
    except KafkaError as exc:
        data.error_code = exc.code if exc.code > 0 else ErrorCode.UNKNOWN_SERVER_ERROR
        data.high_watermark, data.log_start_offset = plog.high_watermark, plog.log_start_offset
        return data
    data.high_watermark = read.high_watermark
    data.last_stable_offset = read.last_stable_offset
    data.log_start_offset = read.log_start_offset
    data.records = read.data
    return data
