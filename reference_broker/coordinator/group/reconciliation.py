"""Incremental reconciliation of one member towards its target assignment (Kafka's
``CurrentAssignmentBuilder``).

Revoke before assign: a member first keeps ``current ∩ target`` and is asked to give up
``current - target`` (state UNREVOKED_PARTITIONS, epoch unchanged). Only when its heartbeat's owned
partitions no longer list any of those does it move to the target epoch and receive new
partitions, and of those only the ones no other member still holds (``partition_epoch`` is -1);
the others wait (UNRELEASED_PARTITIONS) and are added by a later heartbeat once released. So two
members never own the same partition at the same time.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from reference_broker.coordinator.group.consumer_group import Assignment, ConsumerGroupMember, MemberState

#: Owned partitions from the heartbeat (None: not sent, so nothing is known to be released).
Owned = Assignment | None


class FencedMemberEpoch(Exception):
    """The member must drop all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Owned,
) -> ConsumerGroupMember:
    """The member's next state; ``member`` itself when nothing changes."""
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise FencedMemberEpoch("The consumer group member is in an unknown state; it must rejoin.")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _with_epoch(
    member: ConsumerGroupMember,
    epoch: int,
    state: MemberState,
    assigned: Assignment,
    pending_revocation: Assignment,
) -> ConsumerGroupMember:
    """Kafka's ``updateMemberEpoch``: the previous epoch is the one the member had."""
    return dataclasses.replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        state=state,
        assigned=assigned,
        pending_revocation=pending_revocation,
    )


def _next(
    member: ConsumerGroupMember,
    epoch_if_revoking: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Owned,
) -> ConsumerGroupMember:
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        free = frozenset(p for p in wanted - keep if partition_epoch(topic_id, p) == -1)
        unreleased = unreleased or len(free) < len(wanted - keep)
        if keep:
            kept[topic_id] = keep
        if current - keep:
            revoking[topic_id] = current - keep
        if free:
            adding[topic_id] = free
    if revoking and owns_any(owned, revoking):
        return _with_epoch(
            member,
            epoch_if_revoking,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=revoking,
        )
    assigned = {t: kept.get(t, frozenset()) | adding.get(t, frozenset()) for t in set(kept) | set(adding)}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state=state, assigned=assigned, pending_revocation={})
