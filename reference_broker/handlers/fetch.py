"""Fetch (key 1): read whole batches from the log, long-polling until ``min_bytes`` or ``max_wait``.

Versions served and per-version notes:

- v4-18 (v0-3 are gone since Kafka 4.0; the codec knows no older ones). v4+ isolation_level:
  read_committed reads up to the last stable offset and gets the aborted transactions. v5+ log
  start offset in each partition.
- v7+ fetch sessions (KIP-227, ``reference_broker.fetch_sessions``): which partitions a request
  covers, and which of them its response lists, is decided by the session: everything requested
  for sessionless and full requests, the whole session with only the changed partitions reported
  for incremental ones. Before v7 the whole request is the fetch.
- v9+ current_leader_epoch is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; the one leader
  here stays in epoch 0). v11 rack_id is accepted and preferred_read_replica is always -1 (no
  followers to read from).
- v12+ flexible. last_fetched_epoch is accepted and never diverges: there is one epoch.
- Cluster mode (a broker with a replica manager): a follower's fetch (``replica_id`` /
  ``replica_state.replica_id`` >= 0) is answered by ``replication.leader_fetch`` (up to the log
  end, diverging epochs, the follower's state updated); consumers are served by the leader only
  (NOT_LEADER_OR_FOLLOWER elsewhere), in its epoch, up to the high watermark; from v11 (which
  carries the client's rack) a follower serves them too, up to its own high watermark, and with
  ``replica.selector.class`` set a leader answers a consumer in another rack with the
  ``preferred_read_replica`` in the consumer's rack and no records (KIP-392).
- v13+ topics by id (KIP-516): an unknown id answers UNKNOWN_TOPIC_ID, where names answer
  UNKNOWN_TOPIC_OR_PARTITION. v14-18 change nothing here: no tiered storage (v14), replica state
  is for followers (v15), no leader moves to report in node_endpoints (v16), directory ids (v17)
  and v18's high watermark are for replicas.

The records in the response are the log's bytes as read, never decoded. Byte limits follow
Kafka's ``ReplicaManager.readFromLog``: the response's budget is the request's ``max_bytes`` within
the broker's ``fetch.max.bytes`` (KIP-74), each partition reads at most ``min(partition_max_bytes,
what is left of the budget)``, except that the first partition with data returns at least one
whole batch however large, so a consumer can always make progress. The wait ends early on an
error, as Kafka's DelayedFetch does, and is woken by appends to any partition being fetched and by
the deletion of a topic being fetched; the topics are looked up again after each wait, so a topic
deleted meanwhile answers as unknown for its partitions while the others are served.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_broker.fetch_sessions import TOPIC_IDS_FROM, FetchPlan, SessionPartition
from reference_broker.handlers.auth import Operation, topic_denied
from reference_broker.handlers.common import ZERO_UUID, error_code_of, find_topic, leader_epoch_error
from reference_broker.quotas import quota_identity
from reference_broker.replication.leader_fetch import follower_id, serve_follower_fetch
from reference_broker.replication.replica_manager import client_read_error, preferred_read_replica
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.log.log_manager import TopicMetadata
    from reference_broker.network.server import RequestContext

API_KEY = FetchRequest.API_KEY
READ_COMMITTED = 1
RACK_FROM = 11  # the first version with rack_id (KIP-392)

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = FetchResponse.PartitionData
Aborted = FetchResponse.AbortedTransaction


@dataclass
class _Wanted:
    """One partition to read, resolved against the topic table at the start and after each wait."""

    target: SessionPartition
    info: TopicMetadata | None
    missing_code: int


async def handle(broker: Broker, ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    version = ctx.api_version
    replicas = broker.replica_manager
    if replicas is not None and follower_id(request, version) >= 0:  # cluster mode: a follower
        def name_of(topic_id: uuid.UUID) -> str | None:
            info = broker.logs.topic_by_id(topic_id)
            return None if info is None else info.name

        return await serve_follower_fetch(replicas, broker.waiters, request, version, name_of,
                                          response_max_bytes(broker, ctx, request))
    plan = broker.fetch_sessions.plan(request, version)
    if plan.error_code:
        return FetchResponse(error_code=plan.error_code, session_id=0)
    by_id = version >= TOPIC_IDS_FROM
    wanted = []
    for target in plan.partitions:
        info, missing = find_topic(broker, target.topic, target.topic_id if by_id else None)
        if missing != ErrorCode.UNKNOWN_TOPIC_ID and topic_denied(
            broker, ctx, Operation.READ, info.name if info else target.topic
        ):
            info, missing = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        wanted.append(_Wanted(target, info, missing))
    committed = request.isolation_level == READ_COMMITTED
    max_bytes = response_max_bytes(broker, ctx, request)
    rack = (request.rack_id or "") if version >= RACK_FROM else None
    partitions, total, errors = _read_all(broker, wanted, committed, max_bytes, rack)
    remaining = max(0, request.max_wait_ms) / 1000
    if not (total >= request.min_bytes or errors or remaining <= 0 or not wanted):
        await _wait_for_data(broker, request, wanted, partitions, committed, time.monotonic() + remaining)
        _resolve_again(broker, wanted, by_id)
        partitions, total, errors = _read_all(broker, wanted, committed, max_bytes, rack)
    throttle_ms = ctx.connection.fetch_throttle_ms(ctx, _response_size(version, partitions))
    if throttle_ms:
        return _throttled(broker, plan, throttle_ms)
    return FetchResponse(
        error_code=ErrorCode.NONE,
        session_id=plan.response_session_id,
        responses=_group(plan, wanted, partitions),
    )


def _response_size(version: int, partitions: list[FetchResponse.PartitionData]) -> int:
    """What the consumer quota counts for a response: its records plus a partition entry's
    fields (Kafka counts the encoded response; the records are nearly all of it)."""
    per_partition = 50 if version >= 12 else 46
    return sum(len(p.records or ()) + per_partition for p in partitions)


def _throttled(broker: Broker, plan: FetchPlan, throttle_ms: int) -> FetchResponse:
    """Kafka's answer to a fetch over the consumer quota: no records, the throttle time, and the
    session left as it was before this request's data (a session this request would have opened
    is not opened: the client starts over with a full request)."""
    session_id = plan.response_session_id
    if plan.session is not None and not plan.incremental:
        broker.fetch_sessions.forget(plan.session.session_id)
        session_id = 0
    return FetchResponse(
        error_code=ErrorCode.NONE, throttle_time_ms=throttle_ms, session_id=session_id, responses=[]
    )


def response_max_bytes(broker: Broker, ctx: RequestContext, request: FetchRequest) -> int:
    """The response's byte budget: the request's ``max_bytes`` within the broker's
    ``fetch.max.bytes`` (and the client's fetch quota window, as Kafka's ReplicaManager does)."""
    budget = min(max(request.max_bytes, 0), broker.config.get("fetch.max.bytes"))
    quotas = getattr(broker, "quotas", None)
    if quotas is not None and quotas.enabled:
        user, client_id = quota_identity(ctx.connection.session.principal, ctx.client_id)
        budget = min(budget, quotas.fetch_window_bytes(user, client_id))
    return budget


async def _wait_for_data(
    broker: Broker,
    request: FetchRequest,
    wanted: list[_Wanted],
    first: list[FetchResponse.PartitionData],
    committed: bool,
    deadline: float,
) -> None:
    """Wait until ``min_bytes`` are available, an error shows, or the deadline passes.

    Only the partitions an append (or deletion) touched are looked at again after a wake-up, and
    only for the bytes still missing, as Kafka's DelayedFetch counts what accumulated instead of
    re-reading: many waiting fetches over many partitions cost one partition read each per
    append, not a read of every partition they asked for."""
    sizes = [len(data.records or ()) for data in first]
    index: dict[tuple[str, int], list[int]] = {}
    for i, w in enumerate(wanted):
        if w.info is not None:
            index.setdefault((w.info.name, w.target.partition), []).append(i)
    with broker.waiters.watch(index) as watch:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            notified = await watch.wait(remaining)
            if not notified:
                return
            for key in notified:
                for i in index.get(key, ()):  # type: ignore[call-overload]
                    needed = max(1, request.min_bytes - (sum(sizes) - sizes[i]))
                    size = _available(broker, wanted[i], needed, committed)
                    if size is None:
                        return  # an error to report: the final read answers it
                    sizes[i] = size
            if sum(sizes) >= request.min_bytes:
                return


def _available(broker: Broker, w: _Wanted, needed: int, committed: bool) -> int | None:
    """Bytes readable now from the partition's fetch position (looking no further than
    ``needed``); None when the partition cannot be read (deleted, out of range)."""
    info, p = w.info, w.target
    current = broker.logs.topic(info.name) if info is not None else None
    if info is None or current is None or current.topic_id != info.topic_id:
        return None
    limit = min(max(p.partition_max_bytes, 0), needed)
    try:
        read = broker.logs.read(
            info.name, p.partition, p.fetch_offset, limit, min_one=True, committed=committed
        )
    except KafkaError:
        return None
    return len(read.records)


def _resolve_again(broker: Broker, wanted: list[_Wanted], by_id: bool) -> None:
    """Look the topics up again after a wait: one may have been deleted (or grown partitions)
    meanwhile, and its partitions must then answer as unknown, as Kafka's DelayedFetch does when a
    partition disappears, while the others are served. The topic id pins the topic, so one
    deleted and created again under its name is not mistaken for the one that was asked for."""
    for w in wanted:
        if w.info is None:
            continue
        current = broker.logs.topic(w.info.name)
        if current is None or current.topic_id != w.info.topic_id:
            w.info = None
            by_topic_id = by_id and w.target.topic_id != ZERO_UUID
            w.missing_code = (
                ErrorCode.UNKNOWN_TOPIC_ID if by_topic_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        else:
            w.info = current


def _group(
    plan: FetchPlan, wanted: list[_Wanted], partitions: list[FetchResponse.PartitionData]
) -> list[FetchResponse.FetchableTopicResponse]:
    """Partitions grouped by topic in request/session order; incremental responses keep only
    the partitions with news."""
    topics: dict[object, FetchResponse.FetchableTopicResponse] = {}
    for w, data in zip(wanted, partitions, strict=True):
        target = w.target
        news = target.must_report(
            data.error_code,
            len(data.records or ()),
            data.high_watermark,
            data.last_stable_offset,
            data.log_start_offset,
        )
        if plan.incremental and not news:
            continue
        key = (target.topic, target.topic_id)
        entry = topics.get(key)
        if entry is None:
            entry = topics[key] = TopicResponse(topic=target.topic, topic_id=target.topic_id, partitions=[])
        entry.partitions.append(data)
    return list(topics.values())


def _read_all(
    broker: Broker, wanted: list[_Wanted], committed: bool, max_bytes: int, rack: str | None = None
) -> tuple[list[FetchResponse.PartitionData], int, bool]:
    """One pass over every partition; returns the data, the bytes read and whether any failed.
    ``rack``: the client's rack (v11+, else None), for fetch from the closest replica."""
    budget = max_bytes
    min_one = True
    total = 0
    errors = False
    result = []
    for w in wanted:
        p = w.target
        info = w.info
        if info is None or not 0 <= p.partition < info.num_partitions:
            result.append(_error(p.partition, w.missing_code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            errors = True
            continue
        replicas = broker.replica_manager
        if replicas is None:
            code = leader_epoch_error(p.current_leader_epoch)
        else:
            code = client_read_error(replicas, info.name, p.partition, p.current_leader_epoch,
                                     follower_may_serve=rack is not None)
        if code:
            result.append(_error(p.partition, code))
            errors = True
            continue
        if replicas is not None and rack:
            preferred = preferred_read_replica(replicas, info.name, p.partition, rack, p.fetch_offset)
            if preferred >= 0:  # KIP-392: no records, the consumer goes to that replica
                start, hw, lso = broker.logs.offsets(info.name, p.partition)
                data = _error(p.partition, ErrorCode.NONE, hw, lso, start)
                data.preferred_read_replica = preferred
                result.append(data)
                continue
        limit = min(max(p.partition_max_bytes, 0), budget)
        try:
            read = broker.logs.read(
                info.name, p.partition, p.fetch_offset, limit, min_one=min_one, committed=committed
            )
        except KafkaError as exc:
            # An offset out of range, say: the answer carries the partition's offsets. A
            # partition gone since the lookup has none (asking for them would raise again).
            try:
                start, hw, lso = broker.logs.offsets(info.name, p.partition)
            except KafkaError:
                start = hw = lso = -1
            result.append(_error(p.partition, error_code_of(exc), hw, lso, start))
            errors = True
            continue
        size = len(read.records)
        if size:
            min_one = False
            budget = max(0, budget - size)
            total += size
        result.append(
            PartitionData(
                partition_index=p.partition,
                error_code=ErrorCode.NONE,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=(
                    [Aborted(producer_id=pid, first_offset=first) for pid, first in read.aborted]
                    if committed
                    else None
                ),
                preferred_read_replica=-1,
                records=read.records,
            )
        )
    return result, total, errors


def _error(
    partition: int, code: int, hw: int = -1, lso: int = -1, log_start: int = -1
) -> FetchResponse.PartitionData:
    return PartitionData(
        partition_index=partition,
        error_code=code,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=log_start,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


def error_response(request: FetchRequest, version: int, code: int) -> FetchResponse:
    if version >= 7:
        return FetchResponse(error_code=code, session_id=0)
    return FetchResponse(
        responses=[
            TopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[_error(p.partition, code) for p in t.partitions],
            )
            for t in request.topics
        ]
    )


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
