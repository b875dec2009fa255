"""Incremental reconciliation (Kafka's CurrentAssignmentBuilder): revoke before assign, and a
partition is given to a member only once no other member holds it."""

from __future__ import annotations

import uuid

import pytest

from reference_broker.coordinator.group.consumer_group import ConsumerGroupMember, MemberState
from reference_broker.coordinator.group.reconciliation import FencedMemberEpoch, reconcile

T = uuid.UUID(int=7)


def member(epoch: int, assigned: set[int], state: MemberState = MemberState.STABLE) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "m",
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        assigned={T: frozenset(assigned)} if assigned else {},
    )


def free(topic: uuid.UUID, partition: int) -> int:
    return -1


def test_a_reconciled_member_is_returned_unchanged() -> None:
    m = member(3, {0, 1})
    assert reconcile(m, 3, {T: frozenset({0, 1})}, free, {T: frozenset({0, 1})}) is m


def test_new_partitions_come_with_the_target_epoch_when_they_are_free() -> None:
    m = reconcile(member(3, {0}), 4, {T: frozenset({0, 1})}, free, {T: frozenset({0})})
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (4, 3, MemberState.STABLE)
    assert m.assigned == {T: frozenset({0, 1})}


def test_partitions_to_revoke_hold_the_member_at_its_epoch_until_it_stops_owning_them() -> None:
    m = reconcile(member(3, {0, 1}), 4, {T: frozenset({0, 2})}, free, {T: frozenset({0, 1})})
    assert (m.member_epoch, m.state) == (3, MemberState.UNREVOKED_PARTITIONS)
    assert m.assigned == {T: frozenset({0})}
    assert m.pending_revocation == {T: frozenset({1})}
    # Still owns partition 1 (or said nothing about what it owns): nothing moves.
    assert reconcile(m, 4, {T: frozenset({0, 2})}, free, {T: frozenset({0, 1})}) is m
    assert reconcile(m, 4, {T: frozenset({0, 2})}, free, None) is m
    # Revoked: the next epoch, and the new partition 2.
    done = reconcile(m, 4, {T: frozenset({0, 2})}, free, {T: frozenset({0})})
    assert (done.member_epoch, done.state, done.pending_revocation) == (4, MemberState.STABLE, {})
    assert done.assigned == {T: frozenset({0, 2})}


def test_a_partition_still_held_by_another_member_waits() -> None:
    def held(topic: uuid.UUID, partition: int) -> int:
        return 5 if partition == 2 else -1

    m = reconcile(member(3, {0}), 4, {T: frozenset({0, 1, 2})}, held, {T: frozenset({0})})
    assert (m.member_epoch, m.state) == (4, MemberState.UNRELEASED_PARTITIONS)
    assert m.assigned == {T: frozenset({0, 1})}
    # Released later: the next heartbeat adds it.
    m2 = reconcile(m, 4, {T: frozenset({0, 1, 2})}, free, {T: frozenset({0, 1})})
    assert (m2.state, m2.assigned) == (MemberState.STABLE, {T: frozenset({0, 1, 2})})


def test_unknown_state_fences_a_member_that_owns_partitions() -> None:
    m = member(3, {0}, MemberState.UNKNOWN)
    with pytest.raises(FencedMemberEpoch):
        reconcile(m, 4, {T: frozenset({0})}, free, {T: frozenset({0})})
