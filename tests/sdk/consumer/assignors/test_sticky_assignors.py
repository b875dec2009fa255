"""StickyAssignor and CooperativeStickyAssignor: cases of Kafka's AbstractStickyAssignorTest,
StickyAssignorTest and CooperativeStickyAssignorTest re-expressed (same member and topic names, so
Java's HashMap-dependent choices come out the same), and the user data formats against
kafka-python's StickyAssignorUserData."""

from __future__ import annotations

import struct

import pytest
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RebalanceProtocol,
    StickyAssignor,
    Subscription,
)
from sdk.consumer.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data
from sdk.consumer.assignors.validation import cooperative_violations

C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"
T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
GENERATION = 1


def tps(*pairs: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in pairs]


def fresh(topics: list[str]) -> Subscription:
    return Subscription(list(topics))


def owning(kind: type, topics: list[str], partitions: list[TopicPartition], generation: int) -> Subscription:
    """A member's subscription as a client running ``kind`` sends it (Java's buildSubscriptionV2Above)."""
    if kind is StickyAssignor:
        user_data = encode_sticky_user_data(partitions, generation)
    else:
        user_data = struct.pack(">i", generation)
    return Subscription(list(topics), user_data, list(partitions), generation)


def assign(kind: type, counts: dict[str, int], subscriptions: dict[str, Subscription]) -> dict[str, set]:
    result = kind().assign(counts, subscriptions)
    assert set(result) == set(subscriptions)
    for member, assignment in result.items():
        partitions = assignment.partitions
        assert len(partitions) == len(set(partitions))
        assert all(tp.topic in subscriptions[member].topics for tp in partitions)
    return {m: set(a.partitions) for m, a in result.items()}


def check_complete(assignment: dict[str, set], counts: dict[str, int]) -> None:
    everything = [tp for partitions in assignment.values() for tp in partitions]
    assert sorted(everything) == sorted(TopicPartition(t, p) for t, n in counts.items() for p in range(n))


both = pytest.mark.parametrize("kind", [StickyAssignor, CooperativeStickyAssignor])


@both
def test_one_consumer_no_topic_and_nonexistent_topic(kind):
    assert assign(kind, {}, {C1: fresh([])}) == {C1: set()}
    assert assign(kind, {}, {C1: fresh([T])}) == {C1: set()}


@both
def test_only_subscribed_topics_are_assigned(kind):
    assert assign(kind, {T: 3, "other": 3}, {C1: fresh([T])}) == {C1: set(tps((T, 0), (T, 1), (T, 2)))}


@both
def test_two_consumers_one_topic_two_partitions(kind):
    result = assign(kind, {T: 2}, {C1: fresh([T]), C2: fresh([T])})
    assert result == {C1: {TopicPartition(T, 0)}, C2: {TopicPartition(T, 1)}}


@both
def test_two_consumers_two_topics_six_partitions(kind):
    result = assign(kind, {T1: 3, T2: 3}, {C1: fresh([T1, T2]), C2: fresh([T1, T2])})
    assert result == {C1: set(tps((T1, 0), (T1, 2), (T2, 1))), C2: set(tps((T1, 1), (T2, 0), (T2, 2)))}


@both
def test_multiple_consumers_mixed_topic_subscriptions(kind):
    result = assign(kind, {T1: 3, T2: 2}, {C1: fresh([T1]), C2: fresh([T1, T2]), C3: fresh([T1])})
    assert result == {C1: set(tps((T1, 0), (T1, 2))), C2: set(tps((T2, 0), (T2, 1))), C3: set(tps((T1, 1)))}


@both
def test_consumer_owning_min_quota_gets_max_quota(kind):
    counts = {T1: 2, T2: 3}
    subs = {
        C1: owning(kind, [T1, T2], tps((T1, 0), (T2, 1)), GENERATION),
        C2: owning(kind, [T1, T2], tps((T1, 1), (T2, 2)), GENERATION),
    }
    result = assign(kind, counts, subs)
    assert result == {C1: set(tps((T1, 0), (T2, 1), (T2, 0))), C2: set(tps((T1, 1), (T2, 2)))}


@both
def test_more_max_quota_owners_than_members_over_min_quota(kind):
    counts = {T1: 2, T2: 2}
    subs = {
        C1: owning(kind, [T1, T2], tps((T1, 0), (T2, 0)), GENERATION),
        C2: owning(kind, [T1, T2], tps((T1, 1), (T2, 1)), GENERATION),
        C3: owning(kind, [T1, T2], [], GENERATION),
    }
    result = assign(kind, counts, subs)
    assert result[C1] == {TopicPartition(T1, 0)}
    assert result[C2] == set(tps((T1, 1), (T2, 1)))
    # topic2-0 changes owner: the eager assignor hands it over, the cooperative one first lets
    # consumer1 revoke it.
    assert result[C3] == ({TopicPartition(T2, 0)} if kind is StickyAssignor else set())


@both
def test_all_consumers_under_min_quota(kind):
    subs = {
        C1: owning(kind, [T1, T2], tps((T1, 0)), GENERATION),
        C2: owning(kind, [T1, T2], tps((T1, 1)), GENERATION),
        C3: owning(kind, [T1, T2], [], GENERATION),
    }
    result = assign(kind, {T1: 2, T2: 3}, subs)
    assert result == {C1: set(tps((T1, 0), (T2, 1))), C2: set(tps((T1, 1), (T2, 2))), C3: set(tps((T2, 0)))}


@both
def test_all_consumers_reach_expected_quota(kind):
    subs = {
        C1: owning(kind, [T], tps((T, 0), (T, 1)), GENERATION),
        C2: owning(kind, [T], tps((T, 2)), GENERATION),
        C3: owning(kind, [T], [], GENERATION),
    }
    assert assign(kind, {T: 4}, subs) == {C1: set(tps((T, 0), (T, 1))), C2: {TopicPartition(T, 2)},
                                          C3: {TopicPartition(T, 3)}}


@both
def test_add_remove_consumer_one_topic(kind):
    counts = {T: 3}
    first = assign(kind, counts, {C1: fresh([T])})
    assert first == {C1: set(tps((T, 0), (T, 1), (T, 2)))}
    subs = {C1: owning(kind, [T], sorted(first[C1]), GENERATION), C2: owning(kind, [T], [], GENERATION)}
    second = assign(kind, counts, subs)
    assert second[C1] == set(tps((T, 0), (T, 1)))
    if kind is StickyAssignor:
        assert second[C2] == {TopicPartition(T, 2)}
    else:
        # Cooperative: topic-2 is revoked from consumer1 first and handed over in the next round.
        assert second[C2] == set()
        subs = {C1: owning(kind, [T], sorted(second[C1]), GENERATION + 1),
                C2: owning(kind, [T], [], GENERATION + 1)}
        second = assign(kind, counts, subs)
        assert second == {C1: set(tps((T, 0), (T, 1))), C2: {TopicPartition(T, 2)}}
    third = assign(kind, counts, {C2: owning(kind, [T], sorted(second[C2]), GENERATION + 2)})
    assert third == {C2: set(tps((T, 0), (T, 1), (T, 2)))}


@both
@pytest.mark.parametrize("stale_generation", [9, -1])
def test_owned_partitions_of_a_stale_generation_are_invalidated(kind, stale_generation):
    counts = {T: 3, T2: 3}
    claimed = tps((T, 0), (T, 2), (T2, 1))
    subs = {
        C1: owning(kind, [T, T2], claimed, 10),
        C2: owning(kind, [T, T2], claimed, stale_generation),
    }
    result = assign(kind, counts, subs)
    assert result == {C1: set(claimed), C2: set(tps((T, 1), (T2, 0), (T2, 2)))}


@both
def test_partition_claimed_twice_in_one_generation_changes_owner(kind):
    subs = {
        C1: owning(kind, [T], tps((T, 0), (T, 1)), GENERATION),
        C2: owning(kind, [T], tps((T, 0), (T, 2)), GENERATION),
        C3: owning(kind, [T], [], GENERATION),
    }
    result = assign(kind, {T: 3}, subs)
    assert result[C1] == {TopicPartition(T, 1)} and result[C2] == {TopicPartition(T, 2)}
    # Neither claim is trusted, so topic-0 counts as moving: the cooperative assignor withholds it.
    assert result[C3] == ({TopicPartition(T, 0)} if kind is StickyAssignor else set())


@both
def test_claimed_twice_with_unequal_shares(kind):
    subs = {
        C1: owning(kind, [T], tps((T, 0), (T, 1)), GENERATION),
        C2: owning(kind, [T], tps((T, 0), (T, 2)), GENERATION),
        C3: owning(kind, [T], [], GENERATION),
    }
    result = assign(kind, {T: 4}, subs)
    assert result[C1] == set(tps((T, 1), (T, 3))) and result[C2] == {TopicPartition(T, 2)}
    assert result[C3] == ({TopicPartition(T, 0)} if kind is StickyAssignor else set())


@both
def test_partitions_go_to_the_highest_generation(kind):
    counts = {T: 3, T2: 3, T3: 3}
    subs = {
        C1: owning(kind, [T, T2, T3], tps((T, 0), (T2, 0), (T3, 0)), 10),
        C2: owning(kind, [T, T2, T3], tps((T, 1), (T2, 1), (T3, 1)), 9),
        C3: owning(kind, [T, T2, T3], tps((T2, 1), (T3, 0), (T3, 2)), 8),
    }
    assert assign(kind, counts, subs) == {
        C1: set(tps((T, 0), (T2, 0), (T3, 0))),
        C2: set(tps((T, 1), (T2, 1), (T3, 1))),
        C3: set(tps((T, 2), (T2, 2), (T3, 2))),
    }


@both
def test_no_reassignment_on_current_members(kind):
    counts = {T: 3, T1: 3, T2: 3, T3: 3}
    topics = [T, T2, T3, T1]
    subs = {
        C1: owning(kind, topics, [], -1),
        C2: owning(kind, topics, tps((T, 0), (T2, 0), (T1, 0)), 9),
        C3: owning(kind, topics, tps((T3, 2), (T2, 2), (T1, 1)), 8),
        C4: owning(kind, topics, tps((T3, 1), (T, 1), (T, 2)), 7),
    }
    result = assign(kind, counts, subs)
    assert result[C1] == set(tps((T1, 2), (T2, 1), (T3, 0)))
    check_complete(result, counts)


@both
def test_owned_partitions_invalidated_across_generations(kind):
    subs = {
        C1: owning(kind, [T, T2], tps((T, 0), (T2, 1), (T, 1)), 10),
        C2: owning(kind, [T, T2], tps((T, 0), (T2, 1), (T2, 2)), 8),
    }
    result = assign(kind, {T: 3, T2: 3}, subs)
    assert result == {C1: set(tps((T, 0), (T2, 1), (T, 1))), C2: set(tps((T, 2), (T2, 2), (T2, 0)))}


@both
def test_poor_round_robin_scenario_is_balanced(kind):
    counts = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    every, odd = [f"topic{i}" for i in range(1, 6)], ["topic1", "topic3", "topic5"]
    subs = {C1: fresh(every), C2: fresh(odd), C3: fresh(odd), C4: fresh(every)}
    result = assign(kind, counts, subs)
    check_complete(result, counts)
    sizes = sorted(len(p) for p in result.values())
    assert sizes[-1] - sizes[0] <= 1


def test_sticky_multiple_generations_keep_the_newest_claims():
    """StickyAssignorTest.testAssignmentWithMultipleGenerations1, with equal subscriptions."""
    counts = {T: 6, T2: 6}
    both_topics = [T, T2]
    r1 = assign(StickyAssignor, counts, {c: fresh(both_topics) for c in (C1, C2, C3)})
    assert sorted(len(p) for p in r1.values()) == [4, 4, 4]
    subs = {C1: owning(StickyAssignor, both_topics, sorted(r1[C1]), GENERATION),
            C2: owning(StickyAssignor, both_topics, sorted(r1[C2]), GENERATION)}
    r2 = assign(StickyAssignor, counts, subs)
    assert len(r2[C1]) == len(r2[C2]) == 6
    assert r1[C1] <= r2[C1] and r1[C2] <= r2[C2]
    # consumer3 comes back with its generation-1 claims while consumer2 moved on to generation 2.
    subs = {C2: owning(StickyAssignor, both_topics, sorted(r2[C2]), 2),
            C3: owning(StickyAssignor, both_topics, sorted(r1[C3]), 1)}
    r3 = assign(StickyAssignor, counts, subs)
    assert len(r3[C2]) == len(r3[C3]) == 6 and not r3[C2] & r3[C3]
    check_complete(r3, counts)


# -- user data ---------------------------------------------------------------------------------


def test_sticky_user_data_matches_kafka_python():
    partitions = tps((T1, 0), (T1, 3), (T2, 1))
    ours = encode_sticky_user_data(partitions, 7)
    peer = StickyAssignorUserData(
        version=1,
        previous_assignment=[StickyAssignorUserData.TopicPartition(topic=T1, partitions=[0, 3]),
                             StickyAssignorUserData.TopicPartition(topic=T2, partitions=[1])],
        generation=7,
    )
    assert ours == bytes(peer.encode(version=1, header=False))
    v0 = StickyAssignorUserData(
        version=0, previous_assignment=[StickyAssignorUserData.TopicPartition(topic=T1, partitions=[2])]
    )
    v0_bytes = bytes(v0.encode(version=0, header=False))
    assert decode_sticky_user_data(v0_bytes) == ([TopicPartition(T1, 2)], None)
    decoded = StickyAssignorUserData.decode(ours, version=1, header=False)
    assert decoded.generation == 7


def test_sticky_user_data_that_does_not_parse_counts_as_nothing():
    assert decode_sticky_user_data(b"\x00\x00\x00\x05") == ([], -1)
    assert decode_sticky_user_data(b"\xff\xff\xff\xff") == ([], -1)


def test_sticky_assignor_reports_its_previous_assignment():
    assignor = StickyAssignor()
    assert assignor.subscription_user_data({T}) is None
    assignor.on_assignment(Assignment(tps((T, 1), (T, 0))), 5)
    assert decode_sticky_user_data(assignor.subscription_user_data({T})) == (tps((T, 0), (T, 1)), 5)
    assert assignor.supported_protocols == (RebalanceProtocol.EAGER,)


def test_sticky_reads_partitions_from_user_data_only():
    # The eager sticky assignor trusts its user data (the owned_partitions field is empty for eager
    # members); a member without user data owns nothing.
    with_data = Subscription([T], encode_sticky_user_data(tps((T, 2)), 3), [], 3)
    without = Subscription([T], None, tps((T, 0)), 3)
    result = assign(StickyAssignor, {T: 4}, {C1: with_data, C2: without})
    assert TopicPartition(T, 2) in result[C1]


def test_cooperative_user_data_is_the_generation():
    assignor = CooperativeStickyAssignor()
    assert assignor.subscription_user_data({T}) == struct.pack(">i", -1)
    assignor.on_assignment(Assignment([]), 10)
    assert assignor.subscription_user_data({T}) == struct.pack(">i", 10)
    assert assignor.supported_protocols == (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    member = CooperativeStickyAssignor.member_data
    assert member(Subscription([T], struct.pack(">i", 10))).generation == 10
    assert member(Subscription([T])).generation is None
    assert member(Subscription([T], b"\x01")).generation == -1
    # From subscription v2 the generation field wins over the user data.
    assert member(Subscription([T], struct.pack(">i", 10), tps((T, 0)), 12)).generation == 12


def test_cooperative_v1_member_data_honours_user_data_generation():
    """CooperativeStickyAssignorTest.testMemberDataWithInconsistentData: no generation field, so the
    owned partitions come from the subscription and the generation from the user data."""
    data = CooperativeStickyAssignor.member_data(Subscription([T], struct.pack(">i", 4), tps((T, 0))))
    assert data.owned == tps((T, 0)) and data.generation == 4


@both
def test_move_existing_assignments_with_unequal_subscriptions(kind):
    counts = {f"topic{i}": 1 for i in range(1, 7)}
    t4, t5, t6 = "topic4", "topic5", "topic6"
    topics_by_member = {C1: [T1, T2], C2: [T1, T2, T3, t4], C3: [T2, T3, t4, t5, t6]}
    owned = {C1: tps((T1, 0)), C2: tps((T2, 0), (T3, 0)), C3: tps((t4, 0), (t5, 0), (t6, 0))}
    subs = {c: owning(kind, topics_by_member[c], owned[c], GENERATION) for c in topics_by_member}
    result = assign(kind, counts, subs)
    if kind is CooperativeStickyAssignor:
        found = {m: Assignment(sorted(p)) for m, p in result.items()}
        assert cooperative_violations(subs, found) == set()
        generation = GENERATION + 1
        subs = {c: owning(kind, topics_by_member[c], sorted(result[c]), generation) for c in topics_by_member}
        result = assign(kind, counts, subs)
    check_complete(result, counts)
    # Kafka's balance criterion: no member could take a partition from one with two more.
    for small, small_tps in result.items():
        for large_tps in result.values():
            if len(small_tps) + 1 < len(large_tps):
                assert not {tp.topic for tp in large_tps} & set(topics_by_member[small])


@both
def test_stickiness_when_the_leader_leaves(kind):
    counts = {T1: 3}
    first = assign(kind, counts, {c: fresh([T1]) for c in (C1, C2, C3, C4)})
    assert all(len(p) <= 1 for p in first.values())
    subs = {c: owning(kind, [T1], sorted(first[c]), GENERATION) for c in (C2, C3, C4)}
    second = assign(kind, counts, subs)
    for member, partitions in second.items():
        assert first[member] <= partitions
    if kind is StickyAssignor:
        assert all(len(p) == 1 for p in second.values())


@both
def test_deleted_topics_are_dropped(kind):
    result = assign(kind, {T1: 1, T3: 100}, {"consumer": fresh([T1, T2, T3])})
    assert len(result["consumer"]) == 101
    first = assign(kind, {T: 3}, {"consumer": fresh([T])})
    # Its only topic is gone: the member keeps its claim on nothing.
    gone = assign(kind, {}, {"consumer": owning(kind, [T], sorted(first["consumer"]), GENERATION)})
    assert gone == {"consumer": set()}
