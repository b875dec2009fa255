"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete, answered by ``broker.groups``.

Versions served and per-version notes:

- OffsetCommit (8) v2-9: v2-4 retention_time_ms (-1: the broker's offsets.retention.minutes;
  otherwise an explicit expiry kept with the offset); v6+ committed leader epoch; v7+
  group.instance.id (a fenced static member gets FENCED_INSTANCE_ID). generation -1 with an empty
  member id commits for a group that has no members (assign mode). A group that does not exist
  answers ILLEGAL_GENERATION to a generation >= 0 (GROUP_ID_NOT_FOUND from v9, as Kafka). For a
  KIP-848 consumer group the field is the member epoch (STALE_MEMBER_EPOCH; before v9
  UNSUPPORTED_VERSION for its members). v10
  (topic ids, KIP-848) is not served.
- OffsetFetch (9) v1-9: v2+ a null topic list means every committed partition, and a top-level
  error; v5+ leader epoch; v7+ require_stable (UNSTABLE_OFFSET_COMMIT while a transaction holds a
  pending offset for the partition; in a cluster the answer waits until the group's partition's
  writes so far are committed, Kafka's write operation, NOT_COORDINATOR when they are not); v8+
  several groups at once; v9 member id and epoch, checked for a consumer group (KIP-848:
  STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). No committed offset: -1.
- OffsetDelete (47) v0: offsets of topics the group does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC
  otherwise); any offset of an empty group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from reference_broker.coordinator.group.state import CommittedOffset
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

E = ErrorCode
NO_OFFSET = -1


def handle_offset_commit(
    broker: Broker, ctx: RequestContext, request: OffsetCommitRequest
) -> OffsetCommitResponse:
    version = ctx.api_version
    now = broker.clock.now_ms()
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    expire = now + retention if retention >= 0 else None
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    for topic in request.topics:
        for p in topic.partitions:
            offsets[(topic.name, p.partition_index)] = CommittedOffset(
                p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1,
                p.committed_metadata or "",
                now,
                expire,
            )
    errors = broker.groups.commit_offsets(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        request.group_instance_id if version >= 7 else None,
        offsets,
        api_version=version,
    )
    return _commit_response(request, lambda tp: errors.get(tp, E.NONE))


def _commit_response(
    request: OffsetCommitRequest, code_of: Callable[[tuple[str, int]], int]
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=code_of((t.name, p.partition_index)),
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def offset_commit_error(request: OffsetCommitRequest, version: int, code: int) -> OffsetCommitResponse:
    return _commit_response(request, lambda tp: code)


async def _fetch_group(
    broker: Broker,
    group_id: str,
    topics: list[tuple[str, list[int]]] | None,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[int, list[tuple[str, list[tuple[int, int, int, str | None, int]]]]]:
    """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])]).
    ``require_stable`` waits for the group's partition's writes to commit (Kafka runs that fetch
    as a write operation); without it the committed state is read at once."""
    wanted = None if topics is None else [(t, p) for t, parts in topics for p in parts]
    if require_stable:
        error, found = await broker.groups.fetch_stable_offsets(group_id, wanted, member)
    else:
        error, found = broker.groups.fetch_offsets(group_id, wanted, member=member)
    if error:
        return error, []
    by_topic: dict[str, list[tuple[int, int, int, str | None, int]]] = {}
    order = [t for t, _ in topics] if topics is not None else []
    for (topic, partition), (committed, code) in found.items():
        if committed is None:
            entry = (partition, NO_OFFSET, -1, "", code)
        else:
            entry = (partition, committed.offset, committed.leader_epoch, committed.metadata, code)
        by_topic.setdefault(topic, []).append(entry)
    names = order if topics is not None else sorted(by_topic)
    return E.NONE, [(name, by_topic.get(name, [])) for name in dict.fromkeys(names)]


async def handle_offset_fetch(
    broker: Broker, ctx: RequestContext, request: OffsetFetchRequest
) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = request.require_stable if version >= 7 else False
    if version >= 8:
        # The groups are fetched side by side (Kafka schedules one operation per group), so
        # stable fetches waiting on different partitions wait at most one write timeout.
        fetches = []
        for g in request.groups:
            topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            member = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
            fetches.append(_fetch_group(broker, g.group_id, topics, require_stable, member))
        results = await asyncio.gather(*fetches) if require_stable else [await f for f in fetches]
        groups = []
        for g, (error, answer) in zip(request.groups, results, strict=True):
            groups.append(
                OffsetFetchResponse.OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=error,
                    topics=[
                        OffsetFetchResponse.OffsetFetchResponseTopics(
                            name=name,
                            partitions=[
                                OffsetFetchResponse.OffsetFetchResponsePartitions(
                                    partition_index=p,
                                    committed_offset=o,
                                    committed_leader_epoch=e,
                                    metadata=m,
                                    error_code=c,
                                )
                                for p, o, e, m, c in parts
                            ],
                        )
                        for name, parts in answer
                    ],
                )
            )
        return OffsetFetchResponse(groups=groups)
    topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    error, answer = await _fetch_group(broker, request.group_id, topics, require_stable)
    if error and version < 2:
        # v1 has no top-level error: every requested partition carries it.
        answer = [(name, [(p, NO_OFFSET, -1, "", error) for p in parts]) for name, parts in topics or []]
    return OffsetFetchResponse(
        error_code=error,
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=name,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=e,
                        metadata=m,
                        error_code=c,
                    )
                    for p, o, e, m, c in parts
                ],
            )
            for name, parts in answer
        ],
    )


def offset_fetch_error(request: OffsetFetchRequest, version: int, code: int) -> OffsetFetchResponse:
    if version >= 8:
        return OffsetFetchResponse(
            groups=[
                OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                for g in request.groups
            ]
        )
    return OffsetFetchResponse(error_code=code)


def handle_offset_delete(
    broker: Broker, ctx: RequestContext, request: OffsetDeleteRequest
) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, codes = broker.groups.delete_offsets(request.group_id, wanted)
    if error:
        return OffsetDeleteResponse(error_code=error)
    return OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponse.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=codes[(t.name, p.partition_index)]
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def offset_delete_error(request: OffsetDeleteRequest, version: int, code: int) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(error_code=code)


VERSIONS = {
    OffsetCommitRequest.API_KEY: (2, 9),
    OffsetFetchRequest.API_KEY: (1, 9),
    OffsetDeleteRequest.API_KEY: (0, 0),
}


def install(registry: HandlerRegistry) -> None:
    for request_cls, handle, error in (
        (OffsetCommitRequest, handle_offset_commit, offset_commit_error),
        (OffsetFetchRequest, handle_offset_fetch, offset_fetch_error),
        (OffsetDeleteRequest, handle_offset_delete, offset_delete_error),
    ):
        registry.register(
            request_cls.API_KEY, handle, versions=VERSIONS[request_cls.API_KEY], error_response=error
        )
