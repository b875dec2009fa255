"""The sticky assignment algorithm shared by "sticky" and "cooperative-sticky".

This follows Kafka's ``AbstractStickyAssignor`` step for step, so a group led by one of our
members places partitions as a Java leader would:

* Previous ownership is resolved first: a partition claimed by two members keeps the claim of the
  higher generation; claimed twice in one generation it is nobody's (and counts as moving).
* When every member subscribes to the same topics, the constrained algorithm runs: each member
  keeps its previous partitions up to its quota (``floor`` or ``ceil`` of partitions/members), and
  the rest are dealt round-robin to the members under quota. It records the partitions that change
  owner, which the cooperative assignor withholds for one round.
* Otherwise the general algorithm runs: previous assignments are kept, new partitions go to the
  least-loaded eligible member, then partitions are moved from members with two or more than
  another eligible member until no move improves the balance, preferring to send a partition back
  to its previous owner and reverting the moves if the balance score did not improve.

Where Java's result depends on the iteration order of a ``HashMap`` or ``HashSet`` (which member
keeps its partitions up to the larger quota, which of several moved partitions goes back), this
code iterates in the order Java's collections would (``java_hash_map_order``), given the members in
JoinGroup order as Java's leader gets them; so a group gets the same assignment whichever client's
leader computes it. Rack awareness is not implemented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.base import (
    java_bucket,
    java_capacity,
    java_hash_map_order,
    java_order,
    java_string_hash,
)
from sdk.consumer.assignors.protocol import DEFAULT_GENERATION

__all__ = ["MemberData", "StickyResult", "sticky_assign"]


@dataclass
class MemberData:
    """What the sticky algorithm knows of one member.

    ``owned`` and ``generation`` come from the member's user data (eager "sticky") or its
    subscription's owned partitions and generation (cooperative); ``generation`` None when the
    member sent none. ``subscription_generation`` is the generation field of the subscription,
    which Java compares against when two claims collide.
    """

    topics: frozenset[str]
    owned: list[TopicPartition]
    generation: int | None = None
    subscription_generation: int = DEFAULT_GENERATION


class StickyResult(NamedTuple):
    """The assignment, and the partitions that change owner (None: compute from ownership)."""

    assignment: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str] | None


class _GenerationOwner(NamedTuple):
    member: str
    generation: int


def sticky_assign(counts: Mapping[str, int], members: Mapping[str, MemberData]) -> StickyResult:
    """Run the sticky algorithm over ``counts`` (partitions of each subscribed topic) and
    ``members``; every member gets an entry (possibly empty)."""
    order = java_hash_map_order(members)
    if not order:
        return StickyResult({}, {})
    owned, multiply_claimed, max_generation = _resolve_ownership(counts, members, order)
    topic_sets = {members[m].topics for m in order}
    if len(topic_sets) == 1:
        return _ConstrainedBuilder(counts, owned, multiply_claimed, order).build()
    builder = _GeneralBuilder(counts, members, owned, order, max_generation)
    return StickyResult(builder.build(), None)


def _resolve_ownership(
    counts: Mapping[str, int], members: Mapping[str, MemberData], order: list[str]
) -> tuple[dict[str, list[TopicPartition]], set[TopicPartition], int]:
    """Each member's still-valid previous partitions with conflicting claims settled (Java's
    ``allSubscriptionsEqual``), the partitions claimed twice in one generation, and the highest
    generation any member reported."""
    owner_of: dict[TopicPartition, str] = {}
    owned: dict[str, list[TopicPartition]] = {}
    multiply_claimed: set[TopicPartition] = set()
    max_generation = DEFAULT_GENERATION
    for member in order:
        data = members[member]
        generation = DEFAULT_GENERATION if data.generation is None else data.generation
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in dict.fromkeys(TopicPartition(*tp) for tp in data.owned):
            if not 0 <= tp.partition < counts.get(tp.topic, 0):
                continue
            other = owner_of.get(tp)
            if other is None:
                mine.append(tp)
                owner_of[tp] = member
                continue
            # As in Java, the earlier claimant's generation is taken from its subscription's
            # generation field, the new claimant's from its member data.
            other_generation = members[other].subscription_generation
            if generation == other_generation:
                # Two owners in one generation: neither claim is trusted.
                multiply_claimed.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = member
            elif generation > other_generation:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = member
    return owned, multiply_claimed, max_generation


class _ConstrainedBuilder:
    """All members subscribe to the same topics (Java's ``ConstrainedAssignmentBuilder``)."""

    def __init__(
        self,
        counts: Mapping[str, int],
        owned: dict[str, list[TopicPartition]],
        multiply_claimed: set[TopicPartition],
        order: list[str],
    ) -> None:
        self.counts = counts
        self.owned = owned
        self.multiply_claimed = multiply_claimed
        self.order = order
        total = sum(counts.values())
        self.min_quota, self.expected_over_min = divmod(total, len(order))
        self.max_quota = self.min_quota + (1 if self.expected_over_min else 0)
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []

    def build(self) -> StickyResult:
        assigned = self._assign_owned()
        unassigned = [
            TopicPartition(topic, p)
            for topic in sorted(self.counts, key=java_order)
            for p in range(self.counts[topic])
            if TopicPartition(topic, p) not in assigned
        ]
        self.under_min.sort(key=java_order)
        self.exactly_min.sort(key=java_order)
        self._assign_round_robin(unassigned)
        self._verify()
        return StickyResult(self.assignment, self.transferring)

    def _assign_owned(self) -> set[TopicPartition]:
        """Keep previous partitions up to each member's quota; the rest may be revoked."""
        assigned: set[TopicPartition] = set()
        for member in self.order:
            mine = sorted(
                (tp for tp in self.owned[member] if tp not in self.multiply_claimed),
                key=lambda tp: (tp.partition, java_order(tp.topic)),
            )
            if len(mine) < self.min_quota:
                keep = mine
                self.under_min.append(member)
            elif len(mine) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min.clear()
                keep = mine[: self.max_quota]
            else:
                keep = mine[: self.min_quota]
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min.append(member)
            for tp in mine[len(keep):]:
                self.maybe_revoked[tp] = member
            self.assignment[member].extend(keep)
            assigned.update(keep)
        return assigned

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        """Fill members under the minimum quota in turn, then those at it up to the maximum."""
        position = 0  # Java's iterator over under_min
        for tp in unassigned:
            if position < len(self.under_min):
                member = self.under_min[position]
                position += 1
            elif not self.under_min and not self.exactly_min:
                raise AssertionError(f"sticky assignor: no member left for {tp}")
            elif not self.under_min:
                member = self.exactly_min.pop(0)
            else:
                position = 0
                member = self.under_min[position]
                position += 1
            count = self._assign_new(tp, member)
            if count == self.min_quota and position and self.under_min[position - 1] == member:
                del self.under_min[position - 1]
                position -= 1
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new(self, tp: TopicPartition, member: str) -> int:
        self.assignment[member].append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.multiply_claimed:
            self.transferring[tp] = member
        return len(self.assignment[member])

    def _verify(self) -> None:
        for member in self.under_min:
            if len(self.assignment[member]) != self.min_quota:
                raise AssertionError(
                    f"sticky assignor: {member} has {len(self.assignment[member])} partitions, "
                    f"below the minimum quota {self.min_quota}"
                )


def _partition_hash(tp: TopicPartition) -> int:
    """Java's ``TopicPartition.hashCode``."""
    return (31 * (31 + tp.partition) + java_string_hash(tp.topic)) & 0xFFFFFFFF


class _JavaHashSet:
    """A set of partitions that remembers the order a Java ``HashSet`` would iterate it in."""

    def __init__(self) -> None:
        self.items: dict[TopicPartition, int] = {}
        self.capacity = 16
        self.sequence = 0

    def add(self, tp: TopicPartition) -> None:
        if tp not in self.items:
            self.sequence += 1
            self.items[tp] = self.sequence
            self.capacity = max(self.capacity, java_capacity(len(self.items)))

    def discard(self, tp: TopicPartition) -> None:
        self.items.pop(tp, None)

    def __bool__(self) -> bool:
        return bool(self.items)

    def first(self) -> TopicPartition:
        capacity = self.capacity
        return min(self.items, key=lambda tp: (java_bucket(_partition_hash(tp), capacity), self.items[tp]))


class _Movements:
    """Partition moves made while balancing (Java's ``PartitionMovements``), used to prefer
    undoing an earlier move over making a new one between the same two members."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], _JavaHashSet]] = {}
        self.moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        topic_moves = self.by_topic[tp.topic]
        topic_moves[pair].discard(tp)
        if not topic_moves[pair]:
            del topic_moves[pair]
        if not topic_moves:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            source, _ = self._remove(tp)
            if source != new:
                self._add(tp, (source, new))
        else:
            self._add(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """``tp``, or a partition of its topic that earlier moved from ``new`` to ``old`` (moving
        that one back keeps both members stickier)."""
        topic_moves = self.by_topic.get(tp.topic)
        if topic_moves is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = topic_moves.get((new, old))
        if not reverse:
            return tp
        return reverse.first()


class _GeneralBuilder:
    """Members subscribe to different topics (Java's ``GeneralAssignmentBuilder``)."""

    def __init__(
        self,
        counts: Mapping[str, int],
        members: Mapping[str, MemberData],
        owned: dict[str, list[TopicPartition]],
        order: list[str],
        max_generation: int,
    ) -> None:
        self.counts = counts
        self.members = members
        self.order = order
        self.max_generation = max_generation
        self.topic_members: dict[str, list[str]] = {topic: [] for topic in counts}
        self.member_topics: dict[str, list[str]] = {}
        for member in order:
            topics = [t for t in sorted(members[member].topics, key=java_order) if t in counts]
            self.member_topics[member] = topics
            for topic in topics:
                self.topic_members[topic].append(member)
        # Insertion-ordered sets of partitions per member, and the reverse map.
        self.current: dict[str, dict[TopicPartition, None]] = {
            m: dict.fromkeys(owned.get(m, ())) for m in order
        }
        self.owner: dict[TopicPartition, str] = {tp: m for m, tps in self.current.items() for tp in tps}
        self.max_size = {m: sum(counts[t] for t in self.member_topics[m]) for m in order}
        sorted_topics = sorted(counts, key=lambda t: (len(self.topic_members[t]), java_order(t)))
        self.sorted_partitions = [TopicPartition(t, p) for t in sorted_topics for p in range(counts[t])]
        self.movements = _Movements()
        self.revocation_required = False

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_owners()
        assigned = self._keep_owned()
        unassigned = [tp for tp in self.sorted_partitions if tp not in assigned]
        self._balance(previous, unassigned)
        return {m: list(tps) for m, tps in self.current.items()}

    def _previous_owners(self) -> dict[TopicPartition, _GenerationOwner]:
        """For each partition, the owner in the latest generation before the current one."""
        previous: dict[TopicPartition, _GenerationOwner] = {}
        for member in self.order:
            data = self.members[member]
            if data.generation is not None and data.generation < self.max_generation:
                generation = data.generation
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in data.owned:
                tp = TopicPartition(*tp)
                known = previous.get(tp)
                if known is None or generation > known.generation:
                    previous[tp] = _GenerationOwner(member, generation)
        return previous

    def _keep_owned(self) -> set[TopicPartition]:
        """Keep each member's previous partitions of topics it still subscribes to."""
        assigned: set[TopicPartition] = set()
        for member in self.order:
            topics = self.members[member].topics
            for tp in list(self.current[member]):
                if tp.topic not in topics:
                    del self.current[member][tp]
                    del self.owner[tp]
                    self.revocation_required = True
                else:
                    assigned.add(tp)
        return assigned

    def _size(self, member: str) -> int:
        return len(self.current[member])

    def _least_loaded(self, topic: str) -> str | None:
        """The member with the fewest partitions (then lowest id) that subscribes to ``topic``."""
        candidates = [m for m in self.topic_members.get(topic, ()) if m in self.current]
        if not candidates:
            return None
        return min(candidates, key=lambda m: (self._size(m), java_order(m)))

    def _give(self, tp: TopicPartition, member: str) -> None:
        self.current[member][tp] = None
        self.owner[tp] = member

    def _balance(
        self, previous: dict[TopicPartition, _GenerationOwner], unassigned: list[TopicPartition]
    ) -> None:
        initializing = all(not tps for tps in self.current.values())
        for tp in unassigned:
            member = self._least_loaded(tp.topic)
            if member is not None:
                self._give(tp, member)
        # Only partitions with two or more eligible members, and members that could change, take part.
        movable_topics = {t for t, ms in self.topic_members.items() if len(ms) >= 2}
        reassignable = [tp for tp in self.sorted_partitions if tp.topic in movable_topics]
        unassigned = [tp for tp in unassigned if tp.topic in movable_topics]
        fixed = {m: self.current.pop(m) for m in self.order if not self._can_participate(m, movable_topics)}
        before = {m: dict(tps) for m, tps in self.current.items()}
        owner_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(reassignable, previous)
        if not initializing and moved and _balance_score(self.current) >= _balance_score(before):
            self.current = before
            self.owner = owner_before
        self.current.update(fixed)

    def _can_participate(self, member: str, movable_topics: set[str]) -> bool:
        if self._size(member) < self.max_size[member]:
            return True
        return any(tp.topic in movable_topics for tp in self.current[member])

    def _is_balanced(self) -> bool:
        sizes = [len(tps) for tps in self.current.values()]
        if not sizes or min(sizes) >= max(sizes) - 1:
            return True
        for member, tps in self.current.items():
            size = len(tps)
            if size == self.max_size[member]:
                continue
            for topic in self.member_topics[member]:
                for p in range(self.counts[topic]):
                    tp = TopicPartition(topic, p)
                    if tp in tps:
                        continue
                    other = self.owner.get(tp)
                    if other is not None and other in self.current and size + 1 < self._size(other):
                        return False
        return True

    def _reassign(
        self, partitions: list[TopicPartition], previous: dict[TopicPartition, _GenerationOwner]
    ) -> bool:
        """Move partitions until balanced or no move helps; True if anything moved."""
        moved_any = False
        while True:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member = self.owner.get(tp)
                if member is None or member not in self.current:
                    continue
                prior = previous.get(tp)
                if (
                    prior is not None
                    and prior.member in self.current
                    and tp.topic in self.members[prior.member].topics
                    and self._size(member) > self._size(prior.member) + 1
                ):
                    self._move(tp, prior.member)
                    moved_any = modified = True
                    continue
                for other in self.topic_members[tp.topic]:
                    if other in self.current and self._size(member) > self._size(other) + 1:
                        target = self._least_loaded(tp.topic)
                        assert target is not None
                        self._move(tp, target)
                        moved_any = modified = True
                        break
            if not modified:
                return moved_any

    def _move(self, tp: TopicPartition, new: str) -> None:
        old = self.owner[tp]
        tp = self.movements.partition_to_move(tp, old, new)
        old = self.owner[tp]
        self.movements.move(tp, old, new)
        del self.current[old][tp]
        self._give(tp, new)


def _balance_score(assignment: Mapping[str, Iterable[TopicPartition] | dict[TopicPartition, None]]) -> int:
    """Sum of the partition-count differences over all pairs of members (0: perfectly even)."""
    sizes = sorted(len(tps) for tps in assignment.values())  # type: ignore[arg-type]  # lists or dicts: sized
    # For sorted sizes, sum_{i<j} (s_j - s_i) = sum_j s_j * (2j - n + 1).
    n = len(sizes)
    return sum(size * (2 * j - n + 1) for j, size in enumerate(sizes))
