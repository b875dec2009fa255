"""SubscriptionState: what the consumer reads and where it is in each partition.

One object shared by the Consumer, the Fetcher and the ConsumerCoordinator. It holds the
subscription (topics, a pattern, or partitions assigned by hand), the current assignment, and per
assigned partition its position, pause flag, pending offset reset and the broker's watermarks.
It does no I/O; the others act on what it says (the fetcher fetches ``fetchable_partitions()``,
the consumer resolves ``missing_positions()``, the coordinator replaces the assignment).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import IllegalStateError

__all__ = ["PartitionState", "SubscriptionState"]

_NONE, _AUTO_TOPICS, _AUTO_PATTERN, _USER = "none", "topics", "pattern", "user"


class PartitionState:
    """What the consumer knows about one assigned partition."""

    __slots__ = (
        "highwater",
        "last_stable_offset",
        "leader_epoch",
        "log_start_offset",
        "paused",
        "position",
        "reset_strategy",
        "revoking",
    )

    def __init__(self) -> None:
        #: Offset of the next record to hand to the application; None until known.
        self.position: int | None = None
        #: Epoch of the leader the position came from (-1 unknown), sent as last_fetched_epoch.
        self.leader_epoch = -1
        self.paused = False
        #: 'earliest'/'latest' while a reset to that end is pending.
        self.reset_strategy: str | None = None
        self.revoking = False
        self.highwater: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None

    def __repr__(self) -> str:
        return (
            f"PartitionState(position={self.position}, paused={self.paused}, "
            f"reset={self.reset_strategy}, highwater={self.highwater})"
        )


class SubscriptionState:
    """The subscription, the assignment and per-partition positions (see the module docstring).

    ``default_reset`` is the consumer's ``auto_offset_reset`` ('earliest', 'latest' or 'none').
    Callbacks added with ``add_assignment_listener`` run after every assignment change, so the
    fetcher can drop data buffered for partitions no longer assigned.
    """

    def __init__(self, default_reset: str = "latest") -> None:
        self.default_reset = default_reset
        self._mode = _NONE
        self.subscription: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: Any = None
        self._assignment: dict[TopicPartition, PartitionState] = {}
        self._listeners: list[Callable[[], None]] = []
        #: Bumped on every assignment change.
        self.assignment_version = 0
        #: Bumped whenever a partition may have lost its position (assignment change, reset
        #: request, failed reset), so pollers can skip looking for missing positions otherwise.
        self.positions_epoch = 0

    # -- subscription --------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        pattern: re.Pattern[str] | str | None = None,
        listener: Any = None,
    ) -> None:
        """Subscribe to topics or to a pattern (not both); replaces an earlier subscription.

        The assignment is left to the group coordinator (``assign_from_subscribed``).
        """
        if self._mode == _USER:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes either topics or a pattern")
        if pattern is not None:
            self._mode = _AUTO_PATTERN
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.subscription = frozenset()
        else:
            assert topics is not None
            names = [topics] if isinstance(topics, str) else list(topics)
            for name in names:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"topic names must be non-empty strings, not {name!r}")
            self._mode = _AUTO_TOPICS
            self.pattern = None
            self.subscription = frozenset(names)
            self._drop_unsubscribed()
        self.listener = listener

    def unsubscribe(self) -> None:
        """Drop the subscription (or the manual assignment) and every position."""
        self._mode = _NONE
        self.subscription = frozenset()
        self.pattern = None
        self.listener = None
        self._set_assignment({})

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (``Consumer.assign``); positions of partitions kept are kept."""
        if self._mode in (_AUTO_TOPICS, _AUTO_PATTERN):
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._mode = _USER if wanted else _NONE
        self.subscription = frozenset()
        self._set_assignment({tp: self._assignment.get(tp) or PartitionState() for tp in wanted})

    def partitions_auto_assigned(self) -> bool:
        """True in subscribe mode (the group assigns partitions)."""
        return self._mode in (_AUTO_TOPICS, _AUTO_PATTERN)

    @property
    def user_assigned(self) -> bool:
        return self._mode == _USER

    @property
    def has_subscription(self) -> bool:
        return self._mode != _NONE

    def set_subscribed_topics(self, topics: Iterable[str]) -> bool:
        """The topics a pattern matches now; True if that changed the subscription."""
        new = frozenset(topics)
        if new == self.subscription:
            return False
        self.subscription = new
        return True

    def match_pattern(self, topics: Iterable[str]) -> bool:
        """Apply the pattern to the cluster's topic names; True if the subscription changed."""
        if self.pattern is None:
            return False
        return self.set_subscribed_topics(t for t in topics if self.pattern.fullmatch(t))

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment, replacing the current one (kept partitions keep positions)."""
        if not self.partitions_auto_assigned():
            raise IllegalStateError("the group assigns partitions only in subscribe mode")
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._set_assignment({tp: self._assignment.get(tp) or PartitionState() for tp in wanted})

    def _drop_unsubscribed(self) -> None:
        kept = {tp: s for tp, s in self._assignment.items() if tp.topic in self.subscription}
        if len(kept) != len(self._assignment):
            self._set_assignment(kept)

    def _set_assignment(self, assignment: dict[TopicPartition, PartitionState]) -> None:
        for state in assignment.values():
            state.revoking = False
        self._assignment = assignment
        self.assignment_version += 1
        self.positions_epoch += 1
        for callback in list(self._listeners):
            callback()

    def add_assignment_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def remove_assignment_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    # -- assignment ------------------------------------------------------------------------------

    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def state(self, tp: TopicPartition) -> PartitionState:
        """The partition's state; ``IllegalStateError`` if it is not assigned."""
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        return state

    def get_state(self, tp: TopicPartition) -> PartitionState | None:
        return self._assignment.get(tp)

    def items(self) -> list[tuple[TopicPartition, PartitionState]]:
        return list(self._assignment.items())

    def missing_positions(self) -> list[TopicPartition]:
        """Assigned partitions with no position and no reset pending (they need their committed
        offset looked up, or a reset)."""
        return [tp for tp, s in self._assignment.items() if s.position is None and s.reset_strategy is None]

    def partitions_needing_reset(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if s.reset_strategy is not None]

    def has_all_positions(self) -> bool:
        return all(s.position is not None for s in self._assignment.values())

    def fetchable_partitions(self) -> list[TopicPartition]:
        """Assigned, positioned, not paused and not being revoked: what the fetcher may fetch."""
        return [
            tp
            for tp, s in self._assignment.items()
            if s.position is not None and not s.paused and not s.revoking
        ]

    def is_fetchable(self, tp: TopicPartition) -> bool:
        s = self._assignment.get(tp)
        return s is not None and s.position is not None and not s.paused and not s.revoking

    # -- positions -------------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Set the position (cancels a pending reset)."""
        state = self.state(tp)
        state.position = offset
        state.leader_epoch = leader_epoch
        state.reset_strategy = None

    def position(self, tp: TopicPartition) -> int | None:
        return self.state(tp).position

    def request_offset_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Forget the position; the consumer looks up the ``strategy`` end (default: the
        consumer's ``auto_offset_reset``) before fetching again."""
        state = self.state(tp)
        state.position = None
        state.reset_strategy = strategy or self.default_reset
        self.positions_epoch += 1

    def abandon_reset(self, tp: TopicPartition) -> None:
        """A reset failed for good: the partition is left without a position (the next poll
        looks for one again)."""
        state = self._assignment.get(tp)
        if state is not None:
            state.reset_strategy = None
            self.positions_epoch += 1

    def all_consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Positions of assigned partitions that have one (what auto-commit commits)."""
        return {
            tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
            for tp, s in self._assignment.items()
            if s.position is not None
        }

    # -- pause / revocation ----------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def is_paused(self, tp: TopicPartition) -> bool:
        s = self._assignment.get(tp)
        return s is not None and s.paused

    def mark_for_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these (a cooperative revocation is running); they stay assigned."""
        for tp in partitions:
            s = self._assignment.get(TopicPartition(*tp))
            if s is not None:
                s.revoking = True
