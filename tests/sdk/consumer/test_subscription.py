"""SubscriptionState: modes, assignment changes, positions, resets, pause and revocation."""

from __future__ import annotations

import re

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import IllegalStateError

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_topic_subscription_and_group_assignment_keep_positions_of_kept_partitions():
    state = SubscriptionState("earliest")
    changes = []
    state.add_assignment_listener(lambda: changes.append(state.assigned_partitions()))
    state.subscribe(topics=["a", "b"])
    assert state.partitions_auto_assigned() and state.subscription == {"a", "b"}
    state.assign_from_subscribed([A0, A1])
    state.seek(A0, 5)
    state.seek(A1, 7)
    state.assign_from_subscribed([A1, B0])
    assert state.assigned_partitions() == {A1, B0}
    assert state.position(A1) == 7 and state.position(B0) is None
    assert state.missing_positions() == [B0]
    assert state.all_consumed_offsets() == {A1: OffsetAndMetadata(7, "", -1)}
    assert changes == [{A0, A1}, {A1, B0}]
    assert state.is_assigned(A1) and not state.is_assigned(A0)


def test_resubscribing_drops_partitions_of_topics_no_longer_subscribed():
    state = SubscriptionState()
    state.subscribe(topics=["a", "b"])
    state.assign_from_subscribed([A0, B0])
    state.subscribe(topics=["b"])
    assert state.assigned_partitions() == {B0}


def test_modes_exclude_each_other():
    state = SubscriptionState()
    state.assign_from_user([A0])
    assert state.user_assigned and not state.partitions_auto_assigned()
    with pytest.raises(IllegalStateError):
        state.subscribe(topics=["a"])
    with pytest.raises(IllegalStateError):
        state.assign_from_subscribed([A0])
    state.unsubscribe()
    assert state.assigned_partitions() == set()
    state.subscribe(pattern="a.*")
    with pytest.raises(IllegalStateError):
        state.assign_from_user([A0])
    with pytest.raises(ValueError):
        state.subscribe(topics=["a"], pattern="a")


def test_pattern_matching_reports_changes():
    state = SubscriptionState()
    state.subscribe(pattern=re.compile(r"orders-.*"))
    assert state.subscription == frozenset()
    assert state.match_pattern(["orders-eu", "payments", "orders-us"])
    assert state.subscription == {"orders-eu", "orders-us"}
    assert not state.match_pattern(["orders-us", "orders-eu"])
    assert state.set_subscribed_topics(["orders-eu"])


def test_resets_pauses_and_revocation_decide_what_is_fetchable():
    state = SubscriptionState("latest")
    state.assign_from_user([A0, A1, B0])
    for tp in (A0, A1, B0):
        state.seek(tp, 1)
    assert set(state.fetchable_partitions()) == {A0, A1, B0}
    state.request_offset_reset(A0)
    assert state.position(A0) is None and state.state(A0).reset_strategy == "latest"
    assert state.partitions_needing_reset() == [A0] and state.missing_positions() == []
    state.request_offset_reset(A1, "earliest")
    assert state.state(A1).reset_strategy == "earliest"
    state.seek(A1, 3)  # a seek cancels the pending reset
    assert state.state(A1).reset_strategy is None
    state.pause(B0)
    assert state.paused() == {B0} and set(state.fetchable_partitions()) == {A1}
    state.resume(B0)
    state.mark_for_revocation([B0])
    assert set(state.fetchable_partitions()) == {A1}
    state.assign_from_user([A1, B0])  # a new assignment clears the revocation mark
    assert set(state.fetchable_partitions()) == {A1, B0}
    with pytest.raises(IllegalStateError):
        state.seek(A0, 1)
