"""The committed view of KIP-848 consumer groups: what ConsumerGroupDescribe, ListGroups and
OffsetFetch's member check read (Kafka's ``scheduleReadOperation`` reads the timeline-backed
``ConsumerGroup`` at the partition's last committed offset).

The live groups (``ConsumerGroupCoordinator.groups``) change as soon as a write is appended, so a
heartbeat builds on the previous one's result; this view changes only when a write's records are
committed (``GroupCoordinator.write_records`` hands them here through ``on_committed``, in log
order, at once on a single node), by replaying them as a new coordinator would load them. A
member whose join is not committed is therefore not described, and a write that never commits
(its partition's leadership moves: the pending applies are dropped and the groups loaded again)
is never shown.

A load reads the partition to its log end (the live groups hold everything read), but the view
starts from the records below the high watermark as the load began; the records past it reach
the view through ``apply`` as the partition commits them (``GroupCoordinator.finish_load``), as
Kafka's timeline is read at the last committed offset, the high watermark, after a load too.

Invariants: the view holds the records of the groups of the partitions this node has loaded, in
log order, exactly up to an offset the partition has committed (never one past its high
watermark); it is written only by ``apply`` (committed records), ``loaded`` (the committed
records of a partition's load) and ``unload``/``clear`` (the partition's groups dropped).
"""

from __future__ import annotations

from collections.abc import Callable

from reference_broker.clock import Clock
from reference_broker.coordinator.group.consumer_group import ConsumerGroup
from reference_broker.coordinator.group.consumer_records import ConsumerGroupReplay, Record


class CommittedConsumerGroups:
    """The consumer groups as their committed records describe them."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self._replay = ConsumerGroupReplay()

    def apply(self, batch: list[Record]) -> None:
        """Committed records of consumer groups, in log order."""
        for key, value in batch:
            self._replay.add(key, value)

    def loaded(self, replay: ConsumerGroupReplay) -> None:
        """A partition's groups were loaded; ``replay`` holds their committed records, which
        replace the view's."""
        self._replay.take_over(replay)

    def unload(self, moved: Callable[[str], bool]) -> None:
        """The groups ``moved`` names are no longer coordinated here."""
        self._replay.drop(moved)

    def clear(self) -> None:
        self._replay.clear()

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The group as committed; None when no committed record makes it exist."""
        return self._replay.group(group_id, self.clock.now_ms())

    def groups(self) -> list[ConsumerGroup]:
        """Every committed group."""
        found = (self.group(group_id) for group_id in self._replay.group_ids())
        return [g for g in found if g is not None]
