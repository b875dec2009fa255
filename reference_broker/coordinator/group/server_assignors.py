"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range`` (Kafka's
``UniformAssignor`` and ``RangeAssignor``, chosen by ``group.consumer.assignors`` and the members'
``ServerAssignor``).

An assignor sees each member's subscribed topics and each subscribed topic's partition count and
returns every member's target assignment. Invariants of both: a partition goes to at most one
member, only to a member subscribed to its topic, and every partition of a topic with at least one
subscriber is assigned. They are deterministic (the same input gives the same output), so a
coordinator restarted from its records computes what it computed before.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping

from reference_broker.coordinator.group.consumer_group import Assignment


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows about one member."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    #: Sorting key: Kafka orders members by instance id when they have one, then member id.
    instance_id: str | None = None
    #: The member's previous target assignment (the uniform assignor keeps it where it can).
    current: Assignment = dataclasses.field(default_factory=dict)


#: member id -> spec; topic id -> partition count  ->  member id -> assignment.
AssignFunc = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]]


class PartitionAssignorError(Exception):
    """The assignor cannot assign this input (Kafka's PartitionAssignorException)."""


def _order(members: Mapping[str, MemberSpec]) -> list[str]:
    return sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))


def _freeze(raw: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in raw.items()}


def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    """Per topic, its subscribers in order get consecutive ranges: ``n // k`` partitions each and
    one more for the first ``n % k`` (the same member gets the same range of every topic with the
    same subscribers, so co-partitioned topics stay together)."""
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    ordered = _order(members)
    for topic_id in sorted(topics, key=str):
        count = topics[topic_id]
        subscribers = [m for m in ordered if topic_id in members[m].subscribed_topic_ids]
        if not subscribers or count <= 0:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            size = quota + (1 if i < extra else 0)
            if size:
                result[member_id][topic_id] = set(range(start, start + size))
            start += size
    return _freeze(result)


def uniform_assign(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    """Balanced and sticky: every member ends with as many partitions as any other eligible one
    within one, and keeps as much of its previous target as that balance allows.

    Capacity is computed over the members that may take a partition: first each member keeps its
    previous partitions (still existing, still subscribed) up to the even share of the partitions
    it is eligible for, then the rest go one by one to the eligible member holding the fewest
    (ties broken by member order)."""
    ordered = _order(members)
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    all_partitions = [
        (t, p)
        for t in sorted(topics, key=str)
        if any(t in members[m].subscribed_topic_ids for m in members)
        for p in range(topics[t])
    ]
    eligible = {
        t: [m for m in ordered if t in members[m].subscribed_topic_ids]
        for t in {t for t, _ in all_partitions}
    }
    # Each member's fair share: its eligible partitions spread over everyone eligible for them.
    share: dict[str, float] = dict.fromkeys(members, 0.0)
    for t, _ in all_partitions:
        for m in eligible[t]:
            share[m] += 1 / len(eligible[t])
    quota = {m: int(-(-share[m] // 1)) if share[m] else 0 for m in members}  # ceil
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in ordered:
        for t, partitions in sorted(members[m].current.items(), key=lambda item: str(item[0])):
            if t not in eligible or m not in eligible[t]:
                continue
            for p in sorted(partitions):
                if p < topics[t] and (t, p) not in taken and counts[m] < quota[m]:
                    result[m].setdefault(t, set()).add(p)
                    taken.add((t, p))
                    counts[m] += 1
    for t, p in all_partitions:
        if (t, p) in taken:
            continue
        winner = min(eligible[t], key=lambda m: (counts[m], ordered.index(m)))
        result[winner].setdefault(t, set()).add(p)
        counts[winner] += 1
    _rebalance(result, counts, eligible, ordered)
    return _freeze(result)


def _rebalance(
    result: dict[str, dict[uuid.UUID, set[int]]],
    counts: dict[str, int],
    eligible: dict[uuid.UUID, list[str]],
    ordered: list[str],
) -> None:
    """Move partitions from the fullest member to an eligible emptier one while that narrows a gap
    of two or more (kept partitions can leave a member above the share of a topic's subscribers)."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(ordered, key=lambda m: -counts[m]):
            for t in sorted(result[giver], key=str):
                takers = [m for m in eligible[t] if counts[m] + 1 < counts[giver]]
                if not takers or not result[giver][t]:
                    continue
                taker = min(takers, key=lambda m: (counts[m], ordered.index(m)))
                p = max(result[giver][t])
                result[giver][t].discard(p)
                result[taker].setdefault(t, set()).add(p)
                counts[giver] -= 1
                counts[taker] += 1
                moved = True
                break
            if moved:
                break


ASSIGNORS: dict[str, AssignFunc] = {"uniform": uniform_assign, "range": range_assign}
