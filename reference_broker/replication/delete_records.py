"""DeleteRecords on a replicated partition: the leader's answer waits for its followers (Kafka's
``DelayedDeleteRecords``).

The leader moves its own log start offset first; each follower learns the new one from the
``log_start_offset`` of its next Fetch response, raises its own log start offset and deletes the
segments wholly below it, and reports its log start offset in the following Fetch request. A
partition's answer is ready once the partition's low watermark (the smallest log start offset over
the leader and the followers on alive brokers, :meth:`Partition.low_watermark`) reaches the
requested offset: error NONE with that low watermark. Until then the partition's answer is
REQUEST_TIMED_OUT with the low watermark right after the leader's deletion (what the client gets
if ``timeout_ms`` runs out); if the leadership moves meanwhile, NOT_LEADER_OR_FOLLOWER with -1.

Hence a replica that can be elected after the answer has already dropped the records, and the new
leader's earliest offset is never below an acknowledged deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from reference_broker.replication.partition import Partition

#: How often a waiting deletion looks again without news from a follower (a follower's broker
#: being fenced changes who counts, and no fetch announces that).
RECHECK_S = 0.5


@dataclass
class PendingDeletion:
    """One partition of a DeleteRecords request whose local deletion is done."""

    partition: Partition
    required_offset: int
    #: the response entry (``error_code`` and ``low_watermark`` are set here)
    result: Any


def _settle(pending: PendingDeletion, alive: Callable[[int], bool]) -> bool:
    """Give ``pending`` its final answer if it has one now; True when it has."""
    part, result = pending.partition, pending.result
    if not part.is_leader:
        result.error_code, result.low_watermark = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        return True
    low = part.low_watermark(alive)
    if low >= pending.required_offset:
        result.error_code, result.low_watermark = ErrorCode.NONE, low
        return True
    return False


async def wait_for_low_watermarks(pending: list[PendingDeletion], timeout_ms: int,
                                  alive: Callable[[int], bool]) -> None:
    """Complete every entry of ``pending`` (see the module docstring) within ``timeout_ms``."""
    for entry in pending:
        entry.result.error_code = ErrorCode.REQUEST_TIMED_OUT
        entry.result.low_watermark = entry.partition.low_watermark(alive)
    deadline = time.monotonic() + max(0, timeout_ms) / 1000
    waiting = [entry for entry in pending if not _settle(entry, alive)]
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await _any_log_start_moved({id(e.partition): e.partition for e in waiting}.values(),
                                   min(left, RECHECK_S))
        waiting = [entry for entry in waiting if not _settle(entry, alive)]


async def _any_log_start_moved(partitions: Iterable[Partition], timeout_s: float) -> None:
    tasks = [asyncio.ensure_future(part.log_start_moved(timeout_s)) for part in partitions]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
