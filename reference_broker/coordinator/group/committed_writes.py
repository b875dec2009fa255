"""Cluster mode: the group coordinator's writes count once the ISR of their ``__consumer_offsets``
partition holds them, as Kafka's ``CoordinatorRuntime`` has it.

Kafka appends a coordinator's records to the partition leader, replays them into an uncommitted
snapshot of its state, and completes the write (answers the client) only when the high watermark
passes the records; reads (OffsetFetch) see the state as of the last committed offset; a write
that fails reverts the state; a write not committed within ``offsets.commit.timeout.ms`` is
answered REQUEST_TIMED_OUT (COORDINATOR_NOT_AVAILABLE to the client). A partition's high
watermark does not advance while its ISR is below ``min.insync.replicas``.

Here the same guarantees come from three parts:

- ``check_writable`` before an append: this node leads the partition in the leader epoch its
  groups were loaded in (else NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR to the client) and its ISR
  holds ``min.insync.replicas`` members (else NOT_ENOUGH_REPLICAS, COORDINATOR_NOT_AVAILABLE), so
  a write that cannot be committed is refused before anything is appended or applied.
- ``after_commit``: a change of the offsets (a commit, a transactional commit kept pending, an
  OffsetDelete or expiry, a transaction marker's outcome) is applied to memory only once
  everything the partition's log holds up to the change is committed, in log order; so
  OffsetFetch never shows an offset a new coordinator could lack.
- ``after_commit`` with ``failed``: a write whose outcome decides a state change (the leader's
  SyncGroup assignment, Kafka's append future) is applied once committed, or told
  NOT_COORDINATOR (leadership moved) / COORDINATOR_NOT_AVAILABLE (not committed within
  ``WRITE_TIMEOUT_S``) instead.
- ``wait``: a response waits until everything written to the partition so far is committed
  (Kafka completes even a write without records only after the pending ones), up to a timeout:
  the answer of every group write, and of OffsetFetch with require_stable (Kafka runs it as a
  write operation).

"Committed" is the high watermark covering the offset while the ISR holds
``min.insync.replicas`` members (this broker's high watermark also moves below that minimum,
Kafka's does not). The invariants: applies run in the order they were registered, each once,
only in the leader epoch they were registered in; a partition that is no longer led (or led in
a new epoch) drops its pending applies, as its groups are dropped and loaded again from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_broker.replication.produce import min_insync_replicas
from reference_broker.storage import CONSUMER_OFFSETS
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import KafkaError, NotLeaderOrFollowerError

if TYPE_CHECKING:
    from reference_broker.replication.partition import Partition
    from reference_broker.replication.replica_manager import ReplicaManager

log = logging.getLogger("reference_broker.group_coordinator")

#: how often a write waiting for the ISR to grow back to ``min.insync.replicas`` looks again
#: (the high watermark already covers it; nothing else signals an ISR change)
ISR_RECHECK_S = 0.05
#: how long a group write waits to be committed before it fails (Kafka's
#: ``offsets.commit.timeout.ms`` default)
WRITE_TIMEOUT_S = 5.0
#: the longest a pending apply waits in one step before it looks at the leadership again
WATCH_STEP_S = 1.0


@dataclass
class _PendingApply:
    end_offset: int
    leader_epoch: int
    apply: Callable[[], None]
    #: told the client error code when the write is not committed: NOT_COORDINATOR when the
    #: leadership moves, COORDINATOR_NOT_AVAILABLE at ``deadline`` (Kafka completes the write's
    #: append future exceptionally; the write may still be committed later, and is not applied)
    failed: Callable[[int], None] | None = None
    deadline: float | None = None

    def fail(self, code: int) -> None:
        if self.failed is None:
            return
        try:
            self.failed(code)
        except Exception:
            log.exception("handling a group write that was not committed failed")


class CommittedWrites:
    """The writes of the ``__consumer_offsets`` partitions this node leads, until committed."""

    def __init__(self, replica_manager: ReplicaManager):
        self.replica_manager = replica_manager
        #: the leader epoch each led partition's groups were loaded in
        self.epochs: dict[int, int] = {}
        self._pending: dict[int, deque[_PendingApply]] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}

    # -- leadership ----------------------------------------------------------------------------

    def leader_epoch(self, index: int) -> int:
        """This node's leader epoch of partition ``index`` now (-1 when it does not lead it)."""
        part = self.replica_manager.partition(CONSUMER_OFFSETS, index)
        return part.leader_epoch if part is not None and part.is_leader else -1

    def elected(self, index: int, leader_epoch: int) -> None:
        """This node loads partition ``index``'s groups as its leader in ``leader_epoch``."""
        self.forget(index)
        self.epochs[index] = leader_epoch

    def forget(self, index: int) -> None:
        """Partition ``index`` is no longer led here (or led in a new epoch): its pending applies
        are dropped, never run (the groups are dropped, or read again from the log)."""
        self.epochs.pop(index, None)
        self._fail_all(self._pending.pop(index, None))
        watcher = self._watchers.pop(index, None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()

    @staticmethod
    def _fail_all(queue: deque[_PendingApply] | None) -> None:
        """The leadership moved: every pending write fails NOT_COORDINATOR, in order."""
        while queue:
            queue.popleft().fail(E.NOT_COORDINATOR)

    async def close(self) -> None:
        watchers = list(self._watchers.values())
        self._watchers.clear()
        self._pending.clear()
        for watcher in watchers:
            watcher.cancel()
        for watcher in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    # -- writes --------------------------------------------------------------------------------

    def _led(self, index: int) -> Partition:
        """The partition when this node leads it in the epoch its groups were loaded in."""
        part = self.replica_manager.partition(CONSUMER_OFFSETS, index)
        epoch = self.epochs.get(index)
        if part is None or not part.is_leader or epoch is None or part.leader_epoch != epoch:
            raise NotLeaderOrFollowerError(
                f"{CONSUMER_OFFSETS}-{index} is not led here in the epoch its groups were loaded in")
        return part

    def _min_isr(self, part: Partition) -> int:
        return part.effective_min_isr(min_insync_replicas(self.replica_manager, part))

    def check_writable(self, index: int) -> None:
        """Before appending to partition ``index``: raises NOT_LEADER_OR_FOLLOWER when this node
        does not lead it in the loaded epoch, NOT_ENOUGH_REPLICAS when its ISR is below
        ``min.insync.replicas`` (the write could not be committed)."""
        part = self._led(index)
        part.check_enough_replicas(min_insync_replicas(self.replica_manager, part))

    def _committed(self, part: Partition, offset: int) -> bool:
        return part.log.high_watermark >= offset and len(part.isr) >= self._min_isr(part)

    def after_commit(
        self,
        index: int,
        apply: Callable[[], None],
        failed: Callable[[int], None] | None = None,
        timeout_s: float | None = None,
        *,
        up_to: int | None = None,
    ) -> None:
        """Run ``apply`` once everything partition ``index`` holds now is committed, after the
        applies registered before it; at once when nothing waits and it is committed already.
        Dropped when the partition is not led here in its loaded epoch (nothing to apply to).

        ``up_to``: once the partition is committed up to that offset instead of its log end (a
        change read by the partition's load past the high watermark, registered, in log order,
        before anything written since).

        With ``failed`` the write is Kafka's append future: instead of ``apply``, ``failed`` is
        told NOT_COORDINATOR when the partition is (or stops being) led here in its loaded
        epoch, COORDINATOR_NOT_AVAILABLE when it is not committed within ``timeout_s``."""
        try:
            part = self._led(index)
        except NotLeaderOrFollowerError:
            log.info("%s-%d is not led here: a change of its groups is dropped", CONSUMER_OFFSETS, index)
            if failed is not None:
                failed(E.NOT_COORDINATOR)
            return
        end = part.log.log_end_offset if up_to is None else up_to
        queue = self._pending.setdefault(index, deque())
        if not queue and self._committed(part, end):
            apply()
            return
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        queue.append(_PendingApply(end, part.leader_epoch, apply, failed, deadline))
        watcher = self._watchers.get(index)
        if watcher is None or watcher.done():
            self._watchers[index] = asyncio.get_running_loop().create_task(
                self._watch(index), name=f"commit {CONSUMER_OFFSETS}-{index}")

    def drain(self, index: int) -> None:
        """Run, in order, the pending applies of partition ``index`` that are committed now."""
        queue = self._pending.get(index)
        part = self.replica_manager.partition(CONSUMER_OFFSETS, index)
        while queue:
            head = queue[0]
            if part is None or not part.is_leader or part.leader_epoch != head.leader_epoch:
                self._fail_all(queue)  # an earlier leadership's: the groups are loaded again
                return
            if not self._committed(part, head.end_offset):
                return
            queue.popleft()
            try:
                head.apply()
            except Exception:
                log.exception("applying a committed change of %s-%d failed", CONSUMER_OFFSETS, index)

    async def _watch(self, index: int) -> None:
        """Run the partition's applies as the high watermark passes them, until none is left."""
        try:
            while queue := self._pending.get(index):
                head = queue[0]
                part = self.replica_manager.partition(CONSUMER_OFFSETS, index)
                if part is None or not part.is_leader or part.leader_epoch != head.leader_epoch:
                    self._fail_all(queue)
                    return
                step = self._expire(queue, part)
                if not queue:
                    return
                head = queue[0]
                if part.log.high_watermark < head.end_offset:
                    with contextlib.suppress(KafkaError):
                        await part.wait_for_high_watermark(head.end_offset, 1, step)
                elif not self._committed(part, head.end_offset):
                    await asyncio.sleep(min(ISR_RECHECK_S, step))
                self.drain(index)
        finally:
            if self._watchers.get(index) is asyncio.current_task():
                del self._watchers[index]

    def _expire(self, queue: deque[_PendingApply], part: Partition) -> float:
        """Fail the pending writes past their deadline and not committed; how long until the
        next deadline (at most ``WATCH_STEP_S``)."""
        now = time.monotonic()
        step = WATCH_STEP_S
        kept: list[_PendingApply] = []
        expired: list[_PendingApply] = []
        for pending in queue:
            if pending.deadline is None or self._committed(part, pending.end_offset):
                kept.append(pending)
            elif pending.deadline <= now:
                expired.append(pending)
            else:
                kept.append(pending)
                step = min(step, pending.deadline - now)
        if expired:
            queue.clear()
            queue.extend(kept)
            for pending in expired:
                pending.fail(E.COORDINATOR_NOT_AVAILABLE)
        return max(step, 0.001)

    async def wait(self, index: int, timeout_s: float) -> int:
        """Until everything partition ``index`` holds now is committed (its pending applies run
        first): 0; NOT_COORDINATOR when the leadership (or its epoch) moves meanwhile;
        COORDINATOR_NOT_AVAILABLE when it is not committed within ``timeout_s`` (Kafka's mapping
        of REQUEST_TIMED_OUT; the write may still be committed, and then applied, later)."""
        try:
            part = self._led(index)
        except NotLeaderOrFollowerError:
            return E.NOT_COORDINATOR
        epoch, target = part.leader_epoch, part.log.log_end_offset
        deadline = time.monotonic() + timeout_s
        while True:
            if not part.is_leader or part.leader_epoch != epoch:
                return E.NOT_COORDINATOR
            if self._committed(part, target):
                self.drain(index)
                return E.NONE
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return E.COORDINATOR_NOT_AVAILABLE
            if part.log.high_watermark < target:
                try:
                    await part.wait_for_high_watermark(target, 1, remaining)
                except KafkaError as exc:
                    if exc.code == E.NOT_LEADER_OR_FOLLOWER:
                        return E.NOT_COORDINATOR
            else:
                await asyncio.sleep(min(ISR_RECHECK_S, remaining))
