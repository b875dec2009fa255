"""The committed view of consumer groups (``consumer_views``): changed only by committed records,
in log order, and always the group a coordinator would load from those records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from reference_broker.coordinator.group import consumer_records as rec
from reference_broker.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupState
from reference_broker.coordinator.group.consumer_views import CommittedConsumerGroups
from reference_broker.coordinator.group.coordinator import OffsetsReplay
from reference_broker.coordinator.group.state import CommittedOffset
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.group.test_consumer_coordinator import TOPIC, Member, Node, settle


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
    node.coordinator.apply_when_committed = lambda _partition, apply, _up_to: held.append(apply)
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


class Commits:
    """The cluster's commit of a coordinator's writes, held until the test releases it: the
    applies wait in ``held`` and ``until_committed`` (``CommittedWrites.wait``) waits for
    ``release`` to name its outcome (0: the writes committed, their applies run first)."""

    def __init__(self, node: Node):
        self.held = deferred(node)
        self.waits = 0
        self._outcome: asyncio.Future[int] | None = None
        node.coordinator.until_committed = self.until_committed

    async def until_committed(self, _partition: int) -> int:
        self.waits += 1
        if self._outcome is None:
            self._outcome = asyncio.get_running_loop().create_future()
        code = await self._outcome
        if code == 0:
            commit(self.held)
        return code

    def release(self, code: int = 0) -> None:
        assert self._outcome is not None, "nothing waits"
        self._outcome.set_result(code)
        self._outcome = None


OFFSET = {(TOPIC, 0): CommittedOffset(7, -1, "", 0)}


def test_a_stable_fetch_waits_for_the_partition_writes_and_then_shows_them() -> None:
    """OffsetFetch with require_stable is Kafka's write operation: b's join (not committed) lets
    b's member check pass, but the answer, with a's offset committed meanwhile, comes only once
    the partition's writes commit; a fetch without it reads the committed state at once."""

    async def scenario() -> None:
        node = Node()
        commits = Commits(node)
        a, b = Member(node, "a"), Member(node, "b")
        a.heartbeat()
        commit(commits.held)
        assert node.coordinator.commit_offsets("g", a.epoch, "a", None, OFFSET, api_version=9) == {
            (TOPIC, 0): 0}
        assert b.heartbeat().error == 0
        assert node.coordinator.fetch_offsets("g", [(TOPIC, 0)], member=("b", 2))[0] == E.UNKNOWN_MEMBER_ID
        assert node.coordinator.fetch_offsets("g", [(TOPIC, 0)]) == (E.NONE, {(TOPIC, 0): (None, E.NONE)})
        fetch = asyncio.ensure_future(node.coordinator.fetch_stable_offsets("g", [(TOPIC, 0)], ("b", 2)))
        await asyncio.sleep(0)
        assert not fetch.done() and commits.waits == 1
        commits.release()
        assert await fetch == (E.NONE, {(TOPIC, 0): (OFFSET[(TOPIC, 0)], E.NONE)})
        assert node.coordinator.fetch_offsets("g", [(TOPIC, 0)], member=("b", 2))[0] == E.NONE

    asyncio.run(scenario())


def test_a_stable_fetch_whose_writes_do_not_commit_is_not_coordinator() -> None:
    """The leadership moves, or the writes are not committed in time, while the answer waits:
    NOT_COORDINATOR either way (Kafka's ``handleOffsetFetchException`` maps a timed-out write to
    it), never the offsets or the member written meanwhile."""

    async def scenario() -> None:
        node = Node()
        commits = Commits(node)
        a = Member(node, "a")
        a.heartbeat()
        for failure in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
            fetch = asyncio.ensure_future(node.coordinator.fetch_stable_offsets("g", None, ("a", 1)))
            await asyncio.sleep(0)
            commits.release(failure)
            assert await fetch == (E.NOT_COORDINATOR, {}), E(failure).name

    asyncio.run(scenario())


def test_a_stable_fetch_refused_by_the_member_check_does_not_wait() -> None:
    """Kafka's write operation fails before anything is appended when the member check throws:
    the error is answered at once, checked against the groups as written last."""

    async def scenario() -> None:
        node = Node()
        commits = Commits(node)
        a = Member(node, "a")
        a.heartbeat()
        assert await node.coordinator.fetch_stable_offsets("g", None, ("a", 5)) == (E.STALE_MEMBER_EPOCH, {})
        assert await node.coordinator.fetch_stable_offsets("g", None, ("x", 1)) == (E.UNKNOWN_MEMBER_ID, {})
        assert commits.waits == 0

    asyncio.run(scenario())


def test_a_load_shows_the_records_past_the_high_watermark_only_as_they_commit() -> None:
    """A new leader reads its log to the end, b's join and then c's past the high watermark:
    the live groups have both members (heartbeats build on them), the view starts at the high
    watermark and takes each batch in as the partition commits up to its end (Kafka's timeline
    read at the last committed offset), ending as the group a load of committed records gives."""
    writer = Node()
    a, b, c = Member(writer, "a"), Member(writer, "b"), Member(writer, "c")
    a.heartbeat()
    log = writer.store.partitions[0]
    high_watermark = len(log)
    assert b.heartbeat().error == 0
    b_end = len(log)
    assert c.heartbeat().error == 0

    node = Node()
    registered: list[tuple[int | None, Callable[[], None]]] = []
    node.coordinator.apply_when_committed = lambda _p, apply, up_to: registered.append((up_to, apply))
    replay = OffsetsReplay()
    for offset, (key, value) in enumerate(log):
        if offset < high_watermark:
            replay.add(key, value)
        else:
            replay.add(key, value, commits_at=b_end if offset < b_end else len(log))
    node.coordinator.finish_load(replay, 0)
    assert set(node.consumer.groups["g"].members) == {"a", "b", "c"}
    assert set(view(node).group("g").members) == {"a"}  # type: ignore[union-attr]
    assert node.consumer.validate_offset_fetch("g", "b", 2) == E.UNKNOWN_MEMBER_ID
    assert [up_to for up_to, _ in registered] == [b_end, len(log)]
    registered.pop(0)[1]()
    assert set(view(node).group("g").members) == {"a", "b"}  # type: ignore[union-attr]
    registered.pop(0)[1]()
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])


def test_a_load_of_committed_records_shows_them_all_at_once() -> None:
    """Everything read below the high watermark (a single node reads only that far): the view
    is the loaded groups at once, nothing waits to be committed."""
    writer = Node()
    a, b = Member(writer, "a"), Member(writer, "b")
    settle(a, b)
    node = Node()
    registered = deferred(node)
    node.coordinator.load_records(writer.store.partitions[0])
    assert registered == []
    assert shown(view(node).group("g")) == shown(node.consumer.groups["g"])
    assert set(view(node).group("g").members) == {"a", "b"}  # type: ignore[union-attr]
