"""RangeAssignor and RoundRobinAssignor: Kafka's known answers (cases of Java's RangeAssignorTest and
RoundRobinAssignorTest, re-expressed) and kafka-python's assignors of the same names as oracles."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import RangeAssignor, RoundRobinAssignor, Subscription


def tps(*pairs: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in pairs]


def run(assignor, counts, topics_by_member, instance_ids=None):
    subscriptions = {m: Subscription(list(topics)) for m, topics in topics_by_member.items()}
    result = assignor.assign(counts, subscriptions, instance_ids)
    assert set(result) == set(subscriptions)
    return {m: a.partitions for m, a in result.items()}


# -- range ---------------------------------------------------------------------------------------


def test_range_one_consumer_without_topics_gets_nothing():
    assert run(RangeAssignor(), {}, {"c1": []}) == {"c1": []}


def test_range_nonexistent_topic_is_skipped():
    assert run(RangeAssignor(), {}, {"c1": ["t"]}) == {"c1": []}


def test_range_only_subscribed_topics_are_assigned():
    result = run(RangeAssignor(), {"t": 3, "other": 3}, {"c1": ["t"]})
    assert result == {"c1": tps(("t", 0), ("t", 1), ("t", 2))}


def test_range_two_consumers_one_partition():
    assert run(RangeAssignor(), {"t": 1}, {"c1": ["t"], "c2": ["t"]}) == {"c1": tps(("t", 0)), "c2": []}


def test_range_multiple_consumers_mixed_topics():
    result = run(RangeAssignor(), {"t1": 3, "t2": 2}, {"c1": ["t1"], "c2": ["t1", "t2"], "c3": ["t1"]})
    assert result == {
        "c1": tps(("t1", 0)),
        "c2": tps(("t1", 1), ("t2", 0), ("t2", 1)),
        "c3": tps(("t1", 2)),
    }


def test_range_two_consumers_two_topics_six_partitions():
    result = run(RangeAssignor(), {"t1": 3, "t2": 3}, {"c1": ["t1", "t2"], "c2": ["t1", "t2"]})
    assert result == {"c1": tps(("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)), "c2": tps(("t1", 2), ("t2", 2))}


def test_range_static_members_are_ordered_by_instance_id():
    # consumer-a sorts first by member id, but the instance ids put consumer-b first (KIP-345).
    result = run(
        RangeAssignor(), {"t1": 3, "t2": 3}, {"consumer-b": ["t1", "t2"], "consumer-a": ["t1", "t2"]},
        {"consumer-b": "instance1", "consumer-a": "instance2"},
    )
    assert result["consumer-b"] == tps(("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1))
    assert result["consumer-a"] == tps(("t1", 2), ("t2", 2))


def test_range_static_member_sorts_before_dynamic_member():
    result = run(
        RangeAssignor(), {"t1": 3, "t2": 3}, {"consumer-b": ["t1", "t2"], "consumer-a": ["t1", "t2"]},
        {"consumer-b": "instance1", "consumer-a": None},
    )
    assert result["consumer-b"] == tps(("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1))


def test_range_static_assignment_survives_member_id_changes():
    counts = {"t1": 5, "t2": 4}
    members = {"m1": ["t1", "t2"], "m2": ["t1", "t2"], "m3": ["t1", "t2"], "consumer4": ["t1", "t2"]}
    instances = {"m1": "instance1", "m2": "instance2", "m3": "instance3", "consumer4": None}
    first = run(RangeAssignor(), counts, members, instances)
    assert first == {
        "m1": tps(("t1", 0), ("t1", 1), ("t2", 0)),
        "m2": tps(("t1", 2), ("t2", 1)),
        "m3": tps(("t1", 3), ("t2", 2)),
        "consumer4": tps(("t1", 4), ("t2", 3)),
    }
    # The static members rejoin under new member ids that sort the other way round, and the
    # dynamic member is replaced: the static members keep their partitions.
    renamed = {"z1": ["t1", "t2"], "y2": ["t1", "t2"], "x3": ["t1", "t2"], "consumer5": ["t1", "t2"]}
    again = run(RangeAssignor(), counts, renamed, {"z1": "instance1", "y2": "instance2", "x3": "instance3"})
    assert again["z1"] == first["m1"] and again["y2"] == first["m2"] and again["x3"] == first["m3"]
    assert again["consumer5"] == first["consumer4"]


def test_range_member_order_follows_java_string_order():
    # U+FF21 sorts after U+1F600 by code point but before it in UTF-16 (Java's String order).
    result = run(RangeAssignor(), {"t": 2}, {"\U0001f600": ["t"], "\uff21": ["t"]})
    assert result == {"\U0001f600": tps(("t", 0)), "\uff21": tps(("t", 1))}


# -- roundrobin ----------------------------------------------------------------------------------


def test_roundrobin_two_consumers_two_topics():
    result = run(RoundRobinAssignor(), {"t1": 3, "t2": 3}, {"c1": ["t1", "t2"], "c2": ["t1", "t2"]})
    assert result == {"c1": tps(("t1", 0), ("t1", 2), ("t2", 1)), "c2": tps(("t1", 1), ("t2", 0), ("t2", 2))}


def test_roundrobin_multiple_consumers_mixed_topics():
    result = run(RoundRobinAssignor(), {"t1": 3, "t2": 2}, {"c1": ["t1"], "c2": ["t1", "t2"], "c3": ["t1"]})
    assert result == {"c1": tps(("t1", 0)), "c2": tps(("t1", 1), ("t2", 0), ("t2", 1)), "c3": tps(("t1", 2))}


def test_roundrobin_skips_members_not_subscribed():
    # Kafka's docs example: C0 on t0, C1 on t0+t1, C2 on t0+t1+t2 with 1, 2 and 3 partitions.
    result = run(
        RoundRobinAssignor(), {"t0": 1, "t1": 2, "t2": 3},
        {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]},
    )
    assert result == {
        "C0": tps(("t0", 0)),
        "C1": tps(("t1", 0)),
        "C2": tps(("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)),
    }


def test_roundrobin_static_members_keep_their_place():
    counts = {"t1": 3, "t2": 3}
    first = run(RoundRobinAssignor(), counts, {"b": ["t1", "t2"], "a": ["t1", "t2"]}, {"b": "i1", "a": "i2"})
    again = run(RoundRobinAssignor(), counts, {"x": ["t1", "t2"], "w": ["t1", "t2"]}, {"x": "i1", "w": "i2"})
    assert first["b"] == again["x"] and first["a"] == again["w"]
    assert first["b"] == tps(("t1", 0), ("t1", 2), ("t2", 1))


# -- kafka-python's assignors of the same names as oracles ---------------------------------------


@dataclass
class _PeerMember:
    member_id: str
    group_instance_id: str | None
    metadata: KpSubscription


class _PeerCluster:
    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


group_st = st.fixed_dictionaries({}).flatmap(
    lambda _: st.tuples(
        st.dictionaries(st.sampled_from(["t1", "t2", "t3", "t4"]), st.integers(1, 9), min_size=1),
        st.lists(st.text(alphabet="abcdef0123", min_size=1, max_size=6), min_size=1, max_size=6, unique=True),
        st.data(),
    )
)


@pytest.mark.parametrize(("ours", "peer"), [(RangeAssignor, RangePartitionAssignor),
                                            (RoundRobinAssignor, RoundRobinPartitionAssignor)])
@settings(max_examples=40, deadline=None)
@given(group=group_st)
def test_same_result_as_kafka_python(ours, peer, group):
    counts, member_ids, data = group
    topics_by_member = {
        m: data.draw(st.lists(st.sampled_from(sorted(counts)), min_size=1, unique=True)) for m in member_ids
    }
    if peer is RoundRobinPartitionAssignor:
        # kafka-python's round robin fails (KeyError) when it must skip a member not subscribed to
        # a topic, so it is the oracle for identical subscriptions only (the known answers above
        # cover mixed ones).
        topics_by_member = dict.fromkeys(member_ids, sorted(counts))
    static = data.draw(st.lists(st.sampled_from(member_ids), unique=True))
    instance_ids = {m: f"inst-{m}" if m in static else None for m in member_ids}
    # kafka-python groups static members with itertools.groupby, so it needs them listed first.
    peer_members = [
        _PeerMember(m, instance_ids[m], KpSubscription(version=0, topics=topics_by_member[m], user_data=b""))
        for m in sorted(member_ids, key=lambda m: instance_ids[m] is None)
    ]
    expected = {
        member_id: sorted(TopicPartition(t, p) for t, ps in assignment.assigned_partitions for p in ps)
        for member_id, assignment in peer.assign(_PeerCluster(counts), peer_members).items()
    }
    assert run(ours(), counts, topics_by_member, instance_ids) == expected
