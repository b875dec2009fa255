"""OffsetCommit and OffsetFetch for a group: building the requests per version, reading the
answers, and the two offset loops both memberships (classic and KIP-848) share: fetching committed
offsets until no transactional commit is pending, and the auto-commit timer. Which generation or
member epoch a commit carries, and what a rejection means for the membership, is the membership's
business (``ConsumerCoordinator``, ``ConsumerMembershipManager``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import COORDINATOR_ERRORS
from sdk.consumer.errors import CommitFailedError
from sdk.consumer.group_channel import LOAD_IN_PROGRESS, GroupChannel
from sdk.consumer.group_clock import Clock
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import ErrorCode, KafkaError, make_error
from sdk.protocol.messages import OffsetCommitRequest, OffsetFetchRequest

__all__ = [
    "auto_commit_loop",
    "commit_errors",
    "commit_request",
    "fetch_committed",
    "fetch_request",
    "offset_commit_coordinator_error",
    "offset_fetch_coordinator_error",
    "read_fetch_response",
]

log = logging.getLogger(__name__)

#: First OffsetFetch version that asks for several groups at once (KIP-709).
FETCH_BATCHED_VERSION = 8


def commit_request(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> OffsetCommitRequest:
    """One OffsetCommit for ``offsets`` (the same fields mean the same at every version)."""
    by_topic: dict[str, list[Any]] = {}
    for tp, entry in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=entry.offset,
                committed_leader_epoch=entry.leader_epoch,
                committed_metadata=entry.metadata,
            )
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()
        ],
    )


def commit_errors(response: Any) -> dict[TopicPartition, int]:
    """The partitions an OffsetCommit response refused, with their error codes."""
    return {
        TopicPartition(topic.name, part.partition_index): int(part.error_code)
        for topic in response.topics
        for part in topic.partitions
        if part.error_code
    }


def fetch_request(group_id: str, partitions: Sequence[TopicPartition], version: int) -> OffsetFetchRequest:
    """OffsetFetch for ``partitions``: the batched form from v8, the single-group form before.
    ``require_stable`` (v7+) makes the broker hold back offsets of pending transactions."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if version >= FETCH_BATCHED_VERSION:
        return OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in by_topic.items()
                    ],
                )
            ],
            require_stable=True,
        )
    return OffsetFetchRequest(
        group_id=group_id,
        topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
            for t, p in by_topic.items()
        ],
        require_stable=True,
    )


def read_fetch_response(
    response: Any, version: int, partitions: Sequence[TopicPartition], group_id: str
) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], bool]:
    """The committed offsets (None where nothing is committed) and whether some partition answered
    UNSTABLE_OFFSET_COMMIT (a transactional commit is pending: ask again). Raises other errors."""
    group = response.groups[0] if version >= FETCH_BATCHED_VERSION else response
    if group.error_code:
        raise make_error(group.error_code, f"OffsetFetch for group {group_id!r}")
    result: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(partitions)
    unstable = False
    for topic in group.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.partition_index)
            if part.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                unstable = True
            elif part.error_code:
                raise make_error(part.error_code, f"OffsetFetch {tp.topic}-{tp.partition}")
            elif tp in result and part.committed_offset >= 0:
                result[tp] = OffsetAndMetadata(
                    part.committed_offset, part.metadata or "", part.committed_leader_epoch
                )
    return result, unstable


def _retry_code(code: int) -> bool:
    return code in COORDINATOR_ERRORS or code == LOAD_IN_PROGRESS


def offset_commit_coordinator_error(response: Any) -> int:
    """The coordinator error of an OffsetCommit response (reported per partition), else 0."""
    return next((code for code in commit_errors(response).values() if _retry_code(code)), 0)


def offset_fetch_coordinator_error(response: Any) -> int:
    """The coordinator error of an OffsetFetch response (top level, per group in v8+), else 0."""
    group = response.groups[0] if response.groups else response
    code = int(getattr(group, "error_code", 0) or 0)
    if code:
        return code if _retry_code(code) else 0
    for topic in group.topics:
        for part in topic.partitions:
            if _retry_code(part.error_code):
                return int(part.error_code)
    return 0


async def fetch_committed(
    channel: GroupChannel,
    group_id: str,
    partitions: Iterable[TopicPartition],
    *,
    clock: Clock,
    backoff: ExponentialBackoff,
    timeout_ms: float,
) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """The group's committed offsets for ``partitions`` (None where nothing is committed), asked
    again while a transactional commit to them is pending (its outcome decides the offset), for at
    most ``timeout_ms``."""
    wanted = [TopicPartition(*tp) for tp in partitions]
    if not wanted:
        return {}
    deadline = clock.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        response, version = await channel.send_retrying(
            OffsetFetchRequest.API_KEY,
            lambda version: fetch_request(group_id, wanted, version),
            offset_fetch_coordinator_error,
        )
        result, unstable = read_fetch_response(response, version, wanted, group_id)
        if not unstable:
            return result
        if clock.monotonic() > deadline:
            raise make_error(ErrorCode.UNSTABLE_OFFSET_COMMIT, f"OffsetFetch for group {group_id!r}")
        await clock.sleep(backoff.backoff_ms(attempt) / 1000)
        attempt += 1


async def auto_commit_loop(
    group_id: str,
    interval_ms: float,
    clock: Clock,
    closed: Callable[[], bool],
    commit_consumed: Callable[[], Awaitable[None]],
) -> None:
    """Commit what was consumed every ``interval_ms`` until ``closed()``; a failed auto-commit is
    logged and the next one tries again (the consumed positions are still there)."""
    while not closed():
        await clock.sleep(interval_ms / 1000)
        try:
            await commit_consumed()
        except asyncio.CancelledError:
            raise
        except CommitFailedError as exc:
            log.info("group %s: auto-commit: %s", group_id, exc)
        except KafkaError as exc:
            log.warning("group %s: auto-commit failed: %r", group_id, exc)
