"""The server-side assignors' invariants over random groups: every partition of a subscribed topic
assigned exactly once, only to a subscriber; the uniform assignor balanced within one partition per
member (homogeneous subscriptions) and sticky; the range assignor's ranges."""

from __future__ import annotations

import random
import uuid

import pytest

from reference_broker.coordinator.group.server_assignors import (
    ASSIGNORS,
    MemberSpec,
    range_assign,
    uniform_assign,
)

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def _owners(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[tuple[uuid.UUID, int], list[str]]:
    owners: dict[tuple[uuid.UUID, int], list[str]] = {}
    for member, topics in result.items():
        for topic, partitions in topics.items():
            for p in partitions:
                owners.setdefault((topic, p), []).append(member)
    return owners


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@pytest.mark.parametrize("seed", range(40))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(name: str, seed: int) -> None:
    rng = random.Random(seed)
    topics = {t: rng.randint(1, 12) for t in (T1, T2, T3)}
    members = {
        f"m{i}": MemberSpec(frozenset(rng.sample(sorted(topics, key=str), rng.randint(1, 3))))
        for i in range(rng.randint(1, 7))
    }
    result = ASSIGNORS[name](members, topics)
    owners = _owners(result)
    subscribed = {t for spec in members.values() for t in spec.subscribed_topic_ids}
    assert set(owners) == {(t, p) for t in subscribed for p in range(topics[t])}
    for (topic, _), holders in owners.items():
        assert len(holders) == 1
        assert topic in members[holders[0]].subscribed_topic_ids
    assert ASSIGNORS[name](members, topics) == result  # deterministic


@pytest.mark.parametrize("seed", range(20))
def test_uniform_is_balanced_for_homogeneous_subscriptions_and_sticky(seed: int) -> None:
    rng = random.Random(seed)
    topics = {T1: rng.randint(1, 20), T2: rng.randint(1, 20)}
    ids = [f"m{i}" for i in range(rng.randint(2, 6))]
    first = uniform_assign({m: MemberSpec(frozenset(topics)) for m in ids}, topics)
    counts = [sum(len(p) for p in first[m].values()) for m in ids]
    assert max(counts) - min(counts) <= 1
    # One member leaves: the others keep everything they had.
    gone = ids.pop(rng.randrange(len(ids)))
    second = uniform_assign({m: MemberSpec(frozenset(topics), current=first[m]) for m in ids}, topics)
    for m in ids:
        for topic, partitions in first[m].items():
            assert partitions <= second[m].get(topic, frozenset()), (m, gone)
    counts = [sum(len(p) for p in second[m].values()) for m in ids]
    assert max(counts) - min(counts) <= 1


def test_range_gives_consecutive_ranges_extra_partitions_first() -> None:
    members = {m: MemberSpec(frozenset({T1, T2})) for m in ("a", "b", "c")}
    result = range_assign(members, {T1: 7, T2: 3})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({1})}
    assert result["c"] == {T1: frozenset({5, 6}), T2: frozenset({2})}


def test_members_with_instance_ids_come_first_in_range_order() -> None:
    members = {"a": MemberSpec(frozenset({T1})), "z": MemberSpec(frozenset({T1}), instance_id="i-1")}
    assert range_assign(members, {T1: 2}) == {"z": {T1: frozenset({0})}, "a": {T1: frozenset({1})}}
