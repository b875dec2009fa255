"""Properties every assignor must keep, over random groups (hypothesis).

* validity: every partition of a subscribed topic is assigned exactly once, only to a member
  subscribed to its topic (cooperative: once nothing is left to revoke);
* balance: the sticky assignors meet Kafka's balance criterion (no member could take a partition
  from one holding two or more partitions more), members with identical subscriptions differ by
  at most one partition;
* stickiness: with nothing changed an assignment is kept; with identical subscriptions every
  member keeps as many of its previous partitions as its new share allows;
* cooperative: a partition never moves straight from one member to another in one round, and
  after the follow-up round everything is assigned and balanced.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
)
from sdk.consumer.assignors.sticky import encode_sticky_user_data
from sdk.consumer.assignors.validation import assignment_problems, cooperative_violations

TOPICS = ["t0", "t1", "t2", "t3"]
FAST = settings(max_examples=40, deadline=None)


@st.composite
def groups(draw, uniform: bool | None = None):
    """(partition counts, {member: topics}) with 1-6 members over 1-4 topics."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    counts = {t: draw(st.integers(1, 8)) for t in topics}
    members = draw(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=4), min_size=1, max_size=6,
                            unique=True))
    if uniform is None:
        uniform = draw(st.booleans())
    if uniform:
        subscribed = sorted(topics)
        return counts, {m: list(subscribed) for m in members}
    topic_lists = st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True)
    return counts, {m: draw(topic_lists) for m in members}


def subscriptions_for(kind, topics_by_member, owned=None, generation=-1):
    owned = owned or {}
    subs = {}
    for member, topics in topics_by_member.items():
        mine = sorted(owned.get(member, ()))
        if kind is StickyAssignor:
            user_data = encode_sticky_user_data(mine, generation) if member in owned else None
            subs[member] = Subscription(list(topics), user_data, [], generation)
        elif kind is CooperativeStickyAssignor:
            subs[member] = Subscription(list(topics), struct.pack(">i", generation), mine, generation)
        else:
            subs[member] = Subscription(list(topics))
    return subs


def run(kind, counts, subs) -> dict[str, set[TopicPartition]]:
    result = kind().assign(counts, subs)
    assert set(result) == set(subs)
    assert assignment_problems(counts, subs, result) == []
    return {m: set(a.partitions) for m, a in result.items()}


def assert_complete(counts, topics_by_member, assignment):
    subscribed = {t for topics in topics_by_member.values() for t in topics}
    everything = sorted(tp for partitions in assignment.values() for tp in partitions)
    assert everything == sorted(TopicPartition(t, p) for t in subscribed for p in range(counts[t]))


def assert_balanced(counts, topics_by_member, assignment):
    """Kafka's verifyValidityAndBalance: a member with two or more partitions fewer than another
    cannot take any of that member's partitions (it does not subscribe to their topics)."""
    for small, small_tps in assignment.items():
        for large, large_tps in assignment.items():
            if len(small_tps) + 1 < len(large_tps):
                assert not {tp.topic for tp in large_tps} & set(topics_by_member[small]), (small, large)
    by_subscription: dict[tuple[str, ...], list[int]] = {}
    for member, topics in topics_by_member.items():
        by_subscription.setdefault(tuple(sorted(topics)), []).append(len(assignment[member]))
    for sizes in by_subscription.values():
        assert max(sizes) - min(sizes) <= 1


ALL_KINDS = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("kind", ALL_KINDS)
@FAST
@given(group=groups())
def test_every_partition_assigned_once_to_a_subscriber(kind, group):
    counts, topics_by_member = group
    assignment = run(kind, counts, subscriptions_for(kind, topics_by_member))
    assert_complete(counts, topics_by_member, assignment)


@FAST
@given(group=groups(uniform=True))
def test_range_and_roundrobin_balance_identical_subscriptions(group):
    counts, topics_by_member = group
    rr = run(RoundRobinAssignor, counts, subscriptions_for(RoundRobinAssignor, topics_by_member))
    sizes = [len(p) for p in rr.values()]
    assert max(sizes) - min(sizes) <= 1
    ranged = run(RangeAssignor, counts, subscriptions_for(RangeAssignor, topics_by_member))
    for topic in counts:
        per_topic = [sum(1 for tp in p if tp.topic == topic) for p in ranged.values()]
        assert max(per_topic) - min(per_topic) <= 1


@pytest.mark.parametrize("kind", [StickyAssignor, CooperativeStickyAssignor])
@FAST
@given(group=groups())
def test_sticky_fresh_assignment_is_balanced(kind, group):
    counts, topics_by_member = group
    assignment = run(kind, counts, subscriptions_for(kind, topics_by_member))
    assert_balanced(counts, topics_by_member, assignment)


def _change(draw, counts, topics_by_member):
    """The next round's members: some leave, some join (never empty)."""
    members = list(topics_by_member)
    leaving = draw(st.lists(st.sampled_from(members), unique=True, max_size=len(members) - 1))
    joining = draw(st.lists(st.text(alphabet="ijklmn", min_size=1, max_size=3), unique=True, max_size=3))
    uniform = len({tuple(sorted(t)) for t in topics_by_member.values()}) == 1
    after = {m: t for m, t in topics_by_member.items() if m not in leaving}
    for member in joining:
        if uniform:
            after[member] = list(next(iter(topics_by_member.values())))
        else:
            after[member] = draw(st.lists(st.sampled_from(sorted(counts)), min_size=1, unique=True))
    return after


@FAST
@given(group=groups(), data=st.data())
def test_sticky_keeps_partitions_across_rounds(group, data):
    counts, topics_by_member = group
    first = run(StickyAssignor, counts, subscriptions_for(StickyAssignor, topics_by_member))
    # Nothing changed: nothing moves.
    again = run(StickyAssignor, counts, subscriptions_for(StickyAssignor, topics_by_member, first, 1))
    assert again == first
    after = _change(data.draw, counts, topics_by_member)
    owned = {m: first[m] for m in after if m in first}
    second = run(StickyAssignor, counts, subscriptions_for(StickyAssignor, after, owned, 1))
    assert_complete(counts, after, second)
    assert_balanced(counts, after, second)
    if len({tuple(sorted(t)) for t in after.values()}) == 1:
        for member, previous in owned.items():
            assert len(second[member] & previous) == min(len(previous), len(second[member]))


@FAST
@given(group=groups(), data=st.data())
def test_cooperative_revokes_before_moving(group, data):
    kind = CooperativeStickyAssignor
    counts, topics_by_member = group
    first = run(kind, counts, subscriptions_for(kind, topics_by_member))
    assert_complete(counts, topics_by_member, first)
    after = _change(data.draw, counts, topics_by_member)
    owned = {m: first[m] for m in after if m in first}
    generation = 1
    subs = subscriptions_for(kind, after, owned, generation)
    current = run(kind, counts, subs)
    for _ in range(3):
        # No partition goes to a member while another member that owns it still has to revoke it.
        assigned = {m: Assignment(sorted(p)) for m, p in current.items()}
        assert cooperative_violations(subs, assigned) == set()
        for member, partitions in current.items():
            for tp in partitions - set(subs[member].owned_partitions):
                assert all(tp not in set(s.owned_partitions) for other, s in subs.items() if other != member)
        generation += 1
        subs = subscriptions_for(kind, after, current, generation)
        follow_up = run(kind, counts, subs)
        if follow_up == current:
            break
        current = follow_up
    # After the follow-up round(s), everything is assigned, balanced and stable.
    assert follow_up == current
    assert_complete(counts, after, current)
    assert_balanced(counts, after, current)


@FAST
@given(group=groups(uniform=True), data=st.data())
def test_cooperative_settles_in_one_follow_up_round_with_identical_subscriptions(group, data):
    kind = CooperativeStickyAssignor
    counts, topics_by_member = group
    first = run(kind, counts, subscriptions_for(kind, topics_by_member))
    after = _change(data.draw, counts, topics_by_member)
    owned = {m: first[m] for m in after if m in first}
    second = run(kind, counts, subscriptions_for(kind, after, owned, 1))
    third = run(kind, counts, subscriptions_for(kind, after, second, 2))
    assert_complete(counts, after, third)
    assert_balanced(counts, after, third)
    # Whatever a member kept in the second round it still has.
    for member, partitions in second.items():
        assert partitions <= third[member]


@pytest.mark.parametrize("kind", [StickyAssignor, CooperativeStickyAssignor])
@FAST
@given(group=groups(), data=st.data())
def test_conflicting_claims_still_give_a_valid_assignment(kind, group, data):
    """Members claim random (overlapping, partly nonexistent) partitions in random generations."""
    counts, topics_by_member = group
    candidates = [TopicPartition(t, p) for t in TOPICS for p in range(9)]
    subs = {}
    claims = {}
    for member, topics in topics_by_member.items():
        claimed = data.draw(st.lists(st.sampled_from(candidates), unique=True, max_size=6))
        generation = data.draw(st.integers(-1, 3))
        claims[member] = claimed
        if kind is StickyAssignor:
            subs[member] = Subscription(topics, encode_sticky_user_data(claimed, generation), [], generation)
        else:
            subs[member] = Subscription(topics, struct.pack(">i", generation), claimed, generation)
    result = kind().assign(counts, subs)
    assert assignment_problems(counts, subs, result) == []
    if kind is StickyAssignor:
        assert_complete(counts, topics_by_member, {m: set(a.partitions) for m, a in result.items()})
    else:
        assert cooperative_violations(subs, result) == set()
