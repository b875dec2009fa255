"""The classic group state machine driven by a ManualClock: no sockets, no sleeping."""

from __future__ import annotations

import sys

import pytest

from reference_broker.clock import ManualClock
from reference_broker.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from reference_broker.coordinator.group.state import CommittedOffset, GroupState, JoinResult, SyncResult
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import KafkaStorageError, RecordListTooLargeError, UnknownTopicOrPartitionError

SESSION_MS = 3000
REBALANCE_MS = 5000


class ListStore:
    """A GroupStore keeping every written record per partition, in order (a log in a list)."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail: bool | Exception = False

    def write(self, partition: int, batch: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail:
            raise self.fail if isinstance(self.fail, Exception) else OSError("disk full")
        self.partitions.setdefault(partition, []).extend(batch)


def make(delay_ms: int = 0, **overrides: int) -> tuple[GroupCoordinator, ManualClock, ListStore]:
    clock = ManualClock()
    store = ListStore()
    config = GroupConfig(min_session_timeout_ms=1000, initial_rebalance_delay_ms=delay_ms, **overrides)
    return GroupCoordinator(clock, config, store), clock, store


class Joiner:
    """Collects the answers of one JoinGroup call."""

    def __init__(self) -> None:
        self.results: list[JoinResult] = []

    def __call__(self, result: JoinResult) -> None:
        self.results.append(result)

    @property
    def result(self) -> JoinResult:
        assert len(self.results) == 1, self.results
        return self.results[0]


def join(
    coord: GroupCoordinator,
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    v4: bool = True,
) -> Joiner:
    joiner = Joiner()
    coord.join_group(
        group,
        member_id,
        instance,
        v4,
        "client",
        "/127.0.0.1",
        REBALANCE_MS,
        SESSION_MS,
        protocol_type,
        [("range", b"meta-" + member_id.encode())] if protocols is None else protocols,
        joiner,
    )
    return joiner


def join_dynamic(coord: GroupCoordinator, **kwargs: object) -> Joiner:
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then the join with the id given."""
    first = join(coord, **kwargs)  # type: ignore[arg-type]
    assert first.result.error == E.MEMBER_ID_REQUIRED
    return join(coord, first.result.member_id, **kwargs)  # type: ignore[arg-type]


def sync(
    coord: GroupCoordinator,
    member_id: str,
    generation: int,
    assignments: dict[str, bytes] | None = None,
    instance: str | None = None,
) -> list[SyncResult]:
    got: list[SyncResult] = []
    coord.sync_group("g", generation, member_id, instance, None, None, assignments or {}, got.append)
    return got


def test_a_single_member_group_forms_and_syncs() -> None:
    coord, _, store = make()
    joined = join_dynamic(coord).result
    assert joined.error == 0 and joined.generation == 1 and joined.leader_id == joined.member_id
    assert joined.protocol_name == "range" and [m[0] for m in joined.members] == [joined.member_id]
    got = sync(coord, joined.member_id, 1, {joined.member_id: b"assignment"})
    assert got == [SyncResult(0, "consumer", "range", b"assignment")]
    assert coord.groups["g"].state is GroupState.STABLE
    assert store.partitions  # the group was written after the leader's sync


def test_second_member_triggers_a_rebalance_and_followers_wait_for_the_leader() -> None:
    coord, clock, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {a.member_id: b"all"})
    b = join_dynamic(coord)
    assert b.results == []  # waits: the group is preparing a rebalance
    assert coord.heartbeat("g", 1, a.member_id, None) == E.REBALANCE_IN_PROGRESS
    a2 = join(coord, a.member_id)
    assert a2.result.generation == 2 and b.result.generation == 2
    assert a2.result.leader_id == a.member_id and len(a2.result.members) == 2 and b.result.members == []
    follower = sync(coord, b.result.member_id, 2)
    assert follower == []  # waits for the leader
    leader = sync(coord, a.member_id, 2, {a.member_id: b"A", b.result.member_id: b"B"})
    assert leader[0].assignment == b"A" and follower[0].assignment == b"B"
    assert coord.heartbeat("g", 1, a.member_id, None) == E.ILLEGAL_GENERATION
    assert coord.heartbeat("g", 2, a.member_id, None) == 0
    assert coord.heartbeat("g", 2, "nobody", None) == E.UNKNOWN_MEMBER_ID
    del clock


def test_member_that_does_not_rejoin_is_dropped_when_the_rebalance_timeout_ends() -> None:
    coord, clock, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {})
    b = join_dynamic(coord)
    for _ in range(4):  # a keeps heartbeating (told to rejoin) but never rejoins
        clock.advance(1000)
        assert coord.heartbeat("g", 1, a.member_id, None) == E.REBALANCE_IN_PROGRESS
    clock.advance(999)
    assert b.results == []
    clock.advance(1)
    assert b.result.generation == 2 and b.result.leader_id == b.result.member_id
    assert list(coord.groups["g"].members) == [b.result.member_id]


def test_session_timeout_expires_a_silent_member() -> None:
    coord, clock, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {})
    b = join_dynamic(coord)
    a2 = join(coord, a.member_id).result
    sync(coord, b.result.member_id, 2)
    sync(coord, a.member_id, 2, {})
    clock.advance(SESSION_MS - 500)
    assert coord.heartbeat("g", 2, a.member_id, None) == 0
    assert b.result.member_id in coord.groups["g"].members
    clock.advance(600)  # b said nothing for a whole session timeout
    group = coord.groups["g"]
    assert b.result.member_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert a2.generation == 2


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    coord, clock, _ = make(delay_ms=1000)
    a = join_dynamic(coord)
    clock.advance(600)
    b = join_dynamic(coord)
    clock.advance(500)  # the first window ended, but a member arrived in it: another window
    assert a.results[-1:] == [] or a.results[-1].error == E.MEMBER_ID_REQUIRED
    clock.advance(1000)
    assert a.result.generation == 1 and b.result.generation == 1
    assert len(coord.groups["g"].members) == 2


def test_protocol_selection_and_inconsistent_protocols() -> None:
    coord, _, _ = make(delay_ms=100)
    a = join(coord, protocols=[("roundrobin", b"x"), ("range", b"y")], v4=False)
    b = join(coord, protocols=[("range", b"y"), ("roundrobin", b"x")], v4=False)
    c = join(coord, protocols=[("range", b"z")], v4=False)
    assert a.results == [] and b.results == []
    assert coord.groups["g"].candidate_protocols() == {"range"}
    assert join(coord, protocols=[("sticky", b"")], v4=False).result.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(coord, protocols=[("range", b"")], protocol_type="connect", v4=False).result.error == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    assert join(coord, protocols=[], group="other").result.error == E.INCONSISTENT_GROUP_PROTOCOL
    del c


def test_votes_pick_the_most_preferred_common_protocol() -> None:
    coord, clock, _ = make(delay_ms=100)
    joiners = [
        join(coord, protocols=[("roundrobin", b""), ("range", b"")], v4=False),
        join(coord, protocols=[("roundrobin", b""), ("range", b"")], v4=False),
        join(coord, protocols=[("range", b""), ("roundrobin", b"")], v4=False),
    ]
    clock.advance(100)  # members arrived in the first window: a second one
    assert joiners[0].results == []
    clock.advance(100)
    assert all(j.result.protocol_name == "roundrobin" for j in joiners)


def test_static_member_restart_keeps_assignment_without_rebalance_and_fences_the_old_id() -> None:
    coord, _, store = make()
    a = join(coord, instance="ia").result
    b_join = join(coord, instance="ib")
    a2 = join(coord, a.member_id, instance="ia").result
    b = b_join.result
    assert a2.generation == b.generation == 2
    sync(coord, b.member_id, 2, instance="ib")
    sync(coord, a.member_id, 2, {a.member_id: b"A", b.member_id: b"B"}, instance="ia")
    written = sum(len(v) for v in store.partitions.values())
    restarted = join(coord, instance="ib").result  # b restarts: unknown member id, same instance id
    assert restarted.error == 0 and restarted.member_id != b.member_id
    assert restarted.generation == 2 and restarted.members == []
    assert coord.groups["g"].state is GroupState.STABLE
    assert sync(coord, restarted.member_id, 2, instance="ib")[0].assignment == b"B"
    assert sum(len(v) for v in store.partitions.values()) == written + 1  # the new member id persisted
    # the old instance is fenced everywhere
    assert coord.heartbeat("g", 2, b.member_id, "ib") == E.FENCED_INSTANCE_ID
    assert sync(coord, b.member_id, 2, instance="ib")[0].error == E.FENCED_INSTANCE_ID
    offsets = {("t", 0): CommittedOffset(5, -1, "", 0)}
    assert coord.commit_offsets("g", 2, b.member_id, "ib", offsets) == {("t", 0): E.FENCED_INSTANCE_ID}
    assert coord.heartbeat("g", 2, a.member_id, "ia") == 0  # the others' generation is untouched


def test_static_leader_restart_gets_skip_assignment() -> None:
    coord, _, _ = make()
    a = join(coord, instance="ia").result
    sync(coord, a.member_id, 1, {a.member_id: b"A"}, instance="ia")
    again = join(coord, instance="ia").result
    assert again.skip_assignment and again.leader_id == a.member_id and len(again.members) == 1
    assert coord.groups["g"].leader_id == again.member_id


def test_leave_group_by_member_and_instance_id() -> None:
    coord, _, _ = make()
    a = join(coord, instance="ia").result
    sync(coord, a.member_id, 1, {})
    error, outcomes = coord.leave_group("g", [("", "ia"), ("ghost", None), ("", "nobody")])
    assert error == 0
    assert [o.error for o in outcomes] == [0, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    group = coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE or group.empty


def test_leave_with_wrong_member_id_for_instance_is_fenced() -> None:
    coord, _, _ = make()
    a = join(coord, instance="ia").result
    sync(coord, a.member_id, 1, {})
    _, outcomes = coord.leave_group("g", [("someone-else", "ia")])
    assert outcomes[0].error == E.FENCED_INSTANCE_ID


def test_commit_checks_member_and_generation() -> None:
    coord, _, _ = make()
    offsets = {("t", 0): CommittedOffset(10, -1, "meta", 0)}
    assert coord.commit_offsets("g", 3, "m", None, offsets) == {("t", 0): E.ILLEGAL_GENERATION}
    assert coord.commit_offsets("g", 3, "m", None, offsets, api_version=9) == {("t", 0): E.GROUP_ID_NOT_FOUND}
    assert coord.commit_offsets("g", -1, "", None, offsets) == {("t", 0): 0}  # assign mode
    a = join_dynamic(coord).result
    assert coord.commit_offsets("g", 1, a.member_id, None, offsets) == {("t", 0): E.REBALANCE_IN_PROGRESS}
    sync(coord, a.member_id, 1, {})
    assert coord.commit_offsets("g", -1, "", None, offsets) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert coord.commit_offsets("g", 0, a.member_id, None, offsets) == {("t", 0): E.ILLEGAL_GENERATION}
    assert coord.commit_offsets("g", 1, "stranger", None, offsets) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert coord.commit_offsets("g", 1, a.member_id, None, offsets) == {("t", 0): 0}
    error, found = coord.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert error == 0 and found[("t", 0)][0].metadata == "meta" and found[("t", 1)] == (None, 0)


def test_oversized_metadata_is_refused_per_partition() -> None:
    coord, _, _ = make(offset_metadata_max_bytes=8)
    offsets = {("t", 0): CommittedOffset(1, -1, "x" * 9, 0), ("t", 1): CommittedOffset(2, -1, "ok", 0)}
    assert coord.commit_offsets("g", -1, "", None, offsets) == {
        ("t", 0): E.OFFSET_METADATA_TOO_LARGE,
        ("t", 1): 0,
    }


@pytest.mark.parametrize(("failure", "answer"), [
    (OSError("disk full"), E.UNKNOWN_SERVER_ERROR),
    (KafkaStorageError("offline"), E.NOT_COORDINATOR),
    (RecordListTooLargeError("too large"), E.UNKNOWN_SERVER_ERROR),
    (UnknownTopicOrPartitionError("gone"), E.COORDINATOR_NOT_AVAILABLE),
])
def test_failed_write_commits_nothing(failure: Exception, answer: int) -> None:
    """Kafka's mapping of a failed coordinator write (CoordinatorOperationExceptionHelper)."""
    coord, _, store = make()
    store.fail = failure
    offsets = {("t", 0): CommittedOffset(1, -1, "", 0)}
    assert coord.commit_offsets("g", -1, "", None, offsets) == {("t", 0): answer}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)] == (None, 0)


def test_records_reload_into_a_new_coordinator() -> None:
    coord, clock, store = make()
    a = join(coord, instance="ia").result
    sync(coord, a.member_id, 1, {a.member_id: b"A"}, instance="ia")
    coord.commit_offsets("g", 1, a.member_id, "ia", {("t", 0): CommittedOffset(7, 3, "m", clock.now_ms())})
    coord.commit_offsets("gone", -1, "", None, {("t", 0): CommittedOffset(1, -1, "", clock.now_ms())})
    assert coord.delete_group("gone") == 0
    fresh = GroupCoordinator(clock, coord.config, store)
    for records in store.partitions.values():
        fresh.load_records(records)
    assert set(fresh.groups) == {"g"}
    group = fresh.groups["g"]
    assert group.state is GroupState.STABLE and group.generation == 1
    assert group.static_members == {"ia": a.member_id}
    assert group.offsets[("t", 0)].offset == 7 and group.offsets[("t", 0)].leader_epoch == 3
    # the restarted static member rejoins and gets its assignment back without a rebalance
    again = join(fresh, instance="ia").result
    assert again.error == 0 and again.generation == 1
    assert sync(fresh, again.member_id, 1, instance="ia")[0].assignment == b"A"


def test_loading_partitions_answer_load_in_progress() -> None:
    coord, _, _ = make()
    coord.loading = {coord.partition_for("g")}
    assert join(coord).result.error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.heartbeat("g", 1, "m", None) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS


def test_offsets_of_an_empty_group_expire_after_retention_with_tombstones() -> None:
    coord, clock, store = make(offsets_retention_ms=60_000)
    coord.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(1, -1, "", clock.now_ms())})
    clock.advance(59_999)
    assert coord.expire_offsets() == 0
    clock.advance(1)
    assert coord.expire_offsets() == 1
    assert "g" not in coord.groups
    tombstones = [r for records in store.partitions.values() for r in records if r[1] is None]
    assert len(tombstones) == 2  # the offset and the group


def test_delete_group_refuses_a_group_with_members() -> None:
    coord, _, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {})
    assert coord.delete_group("g") == E.NON_EMPTY_GROUP
    assert coord.delete_group("nope") == E.GROUP_ID_NOT_FOUND
    coord.leave_group("g", [(a.member_id, None)])
    assert coord.groups["g"].state is GroupState.EMPTY
    assert coord.delete_group("g") == 0 and "g" not in coord.groups


@pytest.mark.parametrize("timeout", [999, 1_800_001])
def test_session_timeout_outside_the_broker_range_is_refused(timeout: int) -> None:
    coord, _, _ = make()
    joiner = Joiner()
    coord.join_group("g", "", None, True, "c", "h", 5000, timeout, "consumer", [("range", b"")], joiner)
    assert joiner.result.error == E.INVALID_SESSION_TIMEOUT


def test_pending_member_id_expires_after_session_timeout() -> None:
    coord, clock, _ = make()
    first = join(coord).result
    assert first.error == E.MEMBER_ID_REQUIRED
    clock.advance(SESSION_MS)
    assert join(coord, first.member_id).result.error == E.UNKNOWN_MEMBER_ID


def subscription(*topics: str) -> bytes:
    from sdk.protocol.codec import encode
    from sdk.protocol.messages import ConsumerProtocolSubscription

    return (0).to_bytes(2, "big") + encode(ConsumerProtocolSubscription(topics=list(topics)), 0)


def test_a_live_consumer_group_keeps_subscribed_offsets_and_expires_the_others() -> None:
    coord, clock, _ = make(offsets_retention_ms=60_000)
    a = join_dynamic(coord, protocols=[("range", subscription("kept"))]).result
    sync(coord, a.member_id, 1, {})
    now = clock.now_ms()
    offsets = {("kept", 0): CommittedOffset(1, -1, "", now), ("dropped", 0): CommittedOffset(2, -1, "", now)}
    assert coord.commit_offsets("g", 1, a.member_id, None, offsets) == dict.fromkeys(offsets, 0)
    for _ in range(24):  # stay alive while time passes
        clock.advance(2_500)
        assert coord.heartbeat("g", 1, a.member_id, None) == 0
    assert coord.expire_offsets() == 1
    assert set(coord.groups["g"].offsets) == {("kept", 0)}


def test_shutdown_answers_waiting_requests_not_coordinator() -> None:
    coord, clock, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {})
    waiting = join_dynamic(coord)
    assert waiting.results == []
    coord.shutdown()
    assert waiting.result.error == E.NOT_COORDINATOR
    assert coord.groups == {}
    clock.advance(10 * SESSION_MS)  # no timer of the old groups fires into the empty coordinator
    assert coord.groups == {}


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    coord, clock, _ = make()
    a = join_dynamic(coord).result
    sync(coord, a.member_id, 1, {})
    b = join_dynamic(coord)
    a2 = join(coord, a.member_id).result
    assert a2.generation == b.result.generation == 2
    leader = sync(coord, a.member_id, 2, {})  # b joined but never syncs, while heartbeating
    for _ in range(4):
        clock.advance(1000)
        assert coord.heartbeat("g", 2, b.result.member_id, None) == 0
        assert coord.heartbeat("g", 2, a.member_id, None) == 0
    clock.advance(REBALANCE_MS - 4000)
    group = coord.groups["g"]
    assert b.result.member_id not in group.members and leader[0].error == 0
    assert group.state is GroupState.PREPARING_REBALANCE


def _calls_for_join_storm(members: int) -> int:
    """Python function calls the coordinator makes for ``members`` v3 joins of one group."""
    coord, _, _ = make(delay_ms=REBALANCE_MS)
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        for _ in range(members):
            join(coord, v4=False)
    finally:
        sys.setprofile(None)
    assert len(coord.groups["g"].members) == members
    return calls


def test_a_join_storm_costs_the_same_per_join_however_large_the_group() -> None:
    """Each JoinGroup of a new member checks its protocols against the group's tally and whether
    everyone joined from a shrinking set: twice the members, about twice the work (a scan of the
    members per join made it four times)."""
    small, large = _calls_for_join_storm(1000), _calls_for_join_storm(2000)
    assert large < 2.5 * small, (small, large)


def test_a_full_group_refuses_new_members_with_group_max_size_reached() -> None:
    coord, _, _ = make(delay_ms=REBALANCE_MS, max_group_size=2)
    first, second = join(coord, v4=False), join(coord, v4=False)
    third = join(coord, v4=False)
    assert third.result.error == E.GROUP_MAX_SIZE_REACHED
    assert len(coord.groups["g"].members) == 2
    assert first.results == [] and second.results == []  # still waiting for the join window


def test_a_full_group_rebalancing_counts_only_the_joins_waiting() -> None:
    """Kafka's acceptJoiningMember: while a rebalance prepares, a newcomer is taken as long as
    fewer than group.max.size joins wait; a member that does not rejoin leaves room for it."""
    coord, clock, _ = make(max_group_size=2)
    a = join(coord, v4=False).result
    sync(coord, a.member_id, 1, {a.member_id: b""})
    b_join = join(coord, v4=False)
    a_again = join(coord, a.member_id, v4=False).result
    b = b_join.result
    assert a_again.generation == b.generation == 2
    sync(coord, a.member_id, 2, {a.member_id: b"", b.member_id: b""})
    sync(coord, b.member_id, 2)
    assert join(coord, v4=False).result.error == E.GROUP_MAX_SIZE_REACHED  # Stable and full
    a_rejoin = join(coord, a.member_id, v4=False, protocols=[("range", b"new")])  # rebalance starts
    c = join(coord, v4=False)  # one join waits (a's): room for c
    clock.advance(REBALANCE_MS)  # b never rejoins and is dropped
    assert a_rejoin.result.error == 0 and c.result.error == 0
    assert set(coord.groups["g"].members) == {a.member_id, c.result.member_id}
