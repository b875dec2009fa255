"""The committed view of consumer groups (``consumer_views``): changed only by committed records,
in log order, and always the group a coordinator would load from those records."""

from __future__ import annotations

from collections.abc import Callable

from reference_broker.coordinator.group import consumer_records as rec
from reference_broker.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupState
from reference_broker.coordinator.group.consumer_views import CommittedConsumerGroups
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.group.test_consumer_coordinator import Member, Node, settle


def shown(group: ConsumerGroup | None) -> object:
    """What the read APIs show of a group."""
    if group is None:
        return None
    members = sorted(
        (m.member_id, m.member_epoch, m.state, m.assigned, m.pending_revocation,
         group.target.get(m.member_id))
        for m in group.members.values()
    )
    return group.state, group.group_epoch, group.assignment_epoch, members


def deferred(node: Node) -> list[Callable[[], None]]:
    """Commits held back: the applies the coordinator registers, run when the test says."""
    held: list[Callable[[], None]] = []
    node.coordinator.apply_when_committed = lambda _partition, apply: held.append(apply)
    return held


def commit(held: list[Callable[[], None]]) -> None:
    while held:
        held.pop(0)()


def view(node: Node) -> CommittedConsumerGroups:
    return node.consumer.committed  # type: ignore[no-any-return]


def test_a_join_is_shown_only_once_its_records_are_committed() -> None:
    node = Node()
    held = deferred(node)
    a, b = Member(node, "a"), Member(node, "b")
    assert a.heartbeat().error == 0
    assert view(node).group("g") is None and view(node).groups() == []
    commit(held)
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    committed = shown(view(node).group("g"))
    assert b.heartbeat().error == 0
    assert node.consumer.groups["g"].state == ConsumerGroupState.RECONCILING
    assert shown(view(node).group("g")) == committed
    assert node.consumer.validate_offset_fetch("g", "b", 2) == E.UNKNOWN_MEMBER_ID
    assert node.consumer.validate_offset_fetch("g", "b", 2, require_stable=True) == 0
    commit(held)
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    assert node.consumer.validate_offset_fetch("g", "b", 2) == 0


def test_the_view_follows_every_change_and_forgets_what_is_gone() -> None:
    """Joins, revocations, a leave and the group's deletion: after each, the view (commits at
    once on a single node) is the live group, and nothing of a departed member or a deleted
    group stays in it."""
    node = Node()
    a, b, c = Member(node, "a"), Member(node, "b"), Member(node, "c")
    settle(a, b, c)
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    assert c.heartbeat(member_epoch=-1).error == 0
    settle(a, b)
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    assert set(view(node).group("g").members) == {"a", "b"}  # type: ignore[union-attr]
    for m in (a, b):
        assert m.heartbeat(member_epoch=-1).error == 0
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    assert node.coordinator.delete_group("g") == 0
    assert view(node).group("g") is None and view(node).groups() == []


def test_a_replay_keeps_only_live_records() -> None:
    """A tombstone removes its key and the group epoch's tombstone the whole group, so a replay
    fed for a long time does not grow with members and groups that are gone."""
    node = Node()
    replay = rec.ConsumerGroupReplay()
    a = Member(node, "a")
    a.heartbeat()
    assert a.heartbeat(member_epoch=-1).error == 0
    for key, value in node.store.partitions[0]:
        replay.add(key, value)
    group = replay.group("g", 0)
    assert group is not None and group.members == {}
    assert replay._groups["g"].subscriptions == replay._groups["g"].currents == {}
    for key, value in rec.group_tombstones("g"):
        replay.add(key, value)
    assert replay.group_ids() == [] and replay.groups(0) == ({}, {"g"})


def test_a_partition_unloaded_with_a_write_pending_shows_what_its_log_holds_once_loaded_again() -> None:
    """The leadership moves while b's join waits to be committed: the pending apply is dropped
    (``CommittedWrites.forget``) and the groups with it; loading the log again (a new leader, or
    this node in a newer epoch) shows what the log holds, b's join included."""
    node = Node()
    held = deferred(node)
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    commit(held)
    assert b.heartbeat().error == 0
    node.coordinator.unload_partition(0)
    held.clear()
    assert view(node).group("g") is None and "g" not in node.consumer.groups
    node.coordinator.load_records(node.store.partitions[0])
    assert set(view(node).group("g").members) == {"a", "b"}  # type: ignore[union-attr]
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
