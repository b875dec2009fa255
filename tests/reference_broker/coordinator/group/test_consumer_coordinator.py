"""The KIP-848 consumer group coordinator driven by a ManualClock: joins, epochs, revoke before
assign between members, leaving, static members, fencing errors, timeouts, partitions added,
offset commits checked against the member epoch, and a coordinator rebuilt from its records."""

from __future__ import annotations

import uuid

from reference_broker.clock import ManualClock
from reference_broker.coordinator.group.consumer_coordinator import (
    ConsumerGroupConfig,
    HeartbeatAnswer,
    HeartbeatArgs,
)
from reference_broker.coordinator.group.consumer_group import Assignment, ConsumerGroupState, TopicInfo
from reference_broker.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from reference_broker.coordinator.group.state import CommittedOffset, JoinResult
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.test_group_coordinator import ListStore

TOPIC = "orders"


class Store(ListStore):
    """The classic tests' store, also taking transactional batches (as plain ones)."""

    def write_transactional(
        self, partition: int, batch: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        self.write(partition, batch)
SESSION_MS = 45_000


class Node:
    """A coordinator with a store and a mutable topic table."""

    def __init__(self, partitions: int = 4, **config: object) -> None:
        self.clock = ManualClock()
        self.store = Store()
        self.topics = {TOPIC: TopicInfo(uuid.UUID(int=1), TOPIC, partitions)}
        self.coordinator = self._new()
        self.consumer.configure(ConsumerGroupConfig(**config), self.topics.get)  # type: ignore[arg-type]

    def _new(self) -> GroupCoordinator:
        return GroupCoordinator(self.clock, GroupConfig(num_partitions=1), self.store)

    @property
    def consumer(self):  # type: ignore[no-untyped-def]
        return self.coordinator.consumer

    @property
    def topic_id(self) -> uuid.UUID:
        return self.topics[TOPIC].topic_id

    def restart(self) -> None:
        """A new coordinator loading the records the old one wrote."""
        config = self.consumer.config
        self.coordinator.shutdown()
        self.coordinator = self._new()
        self.consumer.configure(config, self.topics.get)
        self.coordinator.load_records(self.store.partitions.get(0, []))


class Member:
    """A client: heartbeats with what it owns, acknowledging revocations at once unless told not to."""

    def __init__(self, node: Node, member_id: str, instance_id: str | None = None, group: str = "g"):
        self.node, self.member_id, self.instance_id, self.group = node, member_id, instance_id, group
        self.epoch = 0
        self.owned: Assignment = {}

    def heartbeat(self, *, full: bool = False, keep: bool = False, **overrides: object) -> HeartbeatAnswer:
        joining = self.epoch == 0
        args = HeartbeatArgs(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=60_000 if joining or full else -1,
            subscribed_topic_names=[TOPIC] if joining or full else None,
            owned=dict(self.owned),
            api_version=1,
        )
        for name, value in overrides.items():
            setattr(args, name, value)
        answer = self.node.consumer.heartbeat(args)
        if answer.error == 0 and answer.member_epoch >= 0:
            self.epoch = answer.member_epoch
            if answer.assignment is not None and not keep:
                self.owned = {t: p for t, p in answer.assignment.items() if p}
        return answer

    def partitions(self) -> set[int]:
        return set(self.owned.get(self.node.topic_id, frozenset()))


def settle(*members: Member, rounds: int = 6) -> None:
    for _ in range(rounds):
        for m in members:
            assert m.heartbeat().error == 0


def test_first_member_gets_every_partition_at_group_epoch_one() -> None:
    node = Node()
    a = Member(node, "a")
    answer = a.heartbeat()
    assert (answer.error, answer.member_id, answer.member_epoch) == (0, "a", 1)
    assert answer.heartbeat_interval_ms == 5000
    assert a.partitions() == {0, 1, 2, 3}
    group = node.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)


def test_v0_join_without_member_id_gets_one_from_the_broker_and_v1_requires_it() -> None:
    node = Node()
    v0 = Member(node, "").heartbeat(api_version=0)
    assert v0.error == 0 and v0.member_id and len(v0.member_id) == 22
    v1 = Member(node, "").heartbeat()
    assert (v1.error, v1.message) == (E.INVALID_REQUEST, "MemberId can't be empty.")


def test_a_partition_moves_only_after_its_previous_owner_acknowledged_the_revocation() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    assert b.heartbeat().error == 0
    # b joined: the target gives it half, but a still owns everything, so b gets nothing yet.
    assert b.partitions() == set()
    group = node.consumer.groups["g"]
    assert group.state == ConsumerGroupState.RECONCILING
    # a is asked to revoke two partitions; it keeps consuming them until it says so.
    a.heartbeat(keep=True)
    assert len(group.members["a"].pending_revocation[node.topic_id]) == 2
    assert b.heartbeat().error == 0 and b.partitions() == set()
    a.owned = {node.topic_id: frozenset(group.members["a"].assigned[node.topic_id])}  # revoked now
    a.heartbeat()
    b.heartbeat()
    assert a.partitions() | b.partitions() == {0, 1, 2, 3}
    assert not a.partitions() & b.partitions()
    assert group.state == ConsumerGroupState.STABLE
    assert a.epoch == b.epoch == group.group_epoch == 2


def test_leaving_frees_the_partitions_for_the_others() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    left = a.heartbeat(member_epoch=-1)
    assert (left.error, left.member_epoch) == (0, -1)
    settle(b)
    assert b.partitions() == {0, 1, 2, 3}
    assert list(node.consumer.groups["g"].members) == ["b"]


def test_epoch_errors_fence_and_unknown_members_are_refused() -> None:
    node = Node()
    a = Member(node, "a")
    a.heartbeat()
    assert a.heartbeat(member_epoch=5).error == E.FENCED_MEMBER_EPOCH
    assert Member(node, "ghost").heartbeat(member_epoch=3).error == E.UNKNOWN_MEMBER_ID
    assert Member(node, "x", group="nope").heartbeat(member_epoch=3).error == E.GROUP_ID_NOT_FOUND
    assert a.heartbeat(server_assignor="sticky").error == E.UNSUPPORTED_ASSIGNOR
    assert a.heartbeat(subscribed_topic_regex="ord(").error == E.INVALID_REGULAR_EXPRESSION


def test_group_max_size() -> None:
    node = Node(max_size=1)
    Member(node, "a").heartbeat()
    assert Member(node, "b").heartbeat().error == E.GROUP_MAX_SIZE_REACHED


def test_session_timeout_removes_a_silent_member() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    for _ in range(10):
        node.clock.advance(SESSION_MS // 3)
        b.heartbeat()
    assert list(node.consumer.groups["g"].members) == ["b"]
    settle(b)
    assert b.partitions() == {0, 1, 2, 3}
    assert a.heartbeat().error == E.UNKNOWN_MEMBER_ID


def test_a_member_that_never_revokes_is_fenced_at_its_rebalance_timeout() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat(keep=True)  # asked to revoke, never does
    node.clock.advance(30_000)
    a.heartbeat(keep=True)
    b.heartbeat()
    node.clock.advance(31_000)
    assert "a" not in node.consumer.groups["g"].members
    settle(b)
    assert b.partitions() == {0, 1, 2, 3}


def test_static_member_leaves_temporarily_and_comes_back_with_its_partitions() -> None:
    node = Node()
    a, b = Member(node, "a", "inst-a"), Member(node, "b", "inst-b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    before = a.partitions()
    assert a.heartbeat(member_epoch=-2).member_epoch == -2
    # Another process with the same instance id while it is away takes its place and partitions.
    epoch = node.consumer.groups["g"].group_epoch
    a2 = Member(node, "a2", "inst-a")
    assert a2.heartbeat().error == 0
    assert a2.partitions() == before  # at once: no rebalance, the group epoch is unchanged
    assert node.consumer.groups["g"].group_epoch == epoch
    settle(a2, b)
    assert a2.partitions() == before
    # A third one while a2 is active is refused.
    assert Member(node, "a3", "inst-a").heartbeat().error == E.UNRELEASED_INSTANCE_ID
    assert a.heartbeat(member_epoch=2).error == E.FENCED_INSTANCE_ID


def test_partitions_added_bump_the_group_epoch() -> None:
    node = Node(partitions=2)
    a = Member(node, "a")
    a.heartbeat()
    node.topics[TOPIC] = TopicInfo(node.topic_id, TOPIC, 5)
    settle(a)
    assert a.partitions() == {0, 1, 2, 3, 4}
    assert node.consumer.groups["g"].group_epoch == 2


def test_offset_commits_are_checked_against_the_member_epoch() -> None:
    node = Node()
    a = Member(node, "a")
    a.heartbeat()
    offsets = {(TOPIC, 0): CommittedOffset(5, -1, "", 0)}
    commit = node.coordinator.commit_offsets
    assert commit("g", a.epoch, "a", None, offsets, api_version=9) == {(TOPIC, 0): 0}
    assert commit("g", a.epoch + 1, "a", None, offsets, api_version=9) == {(TOPIC, 0): E.STALE_MEMBER_EPOCH}
    assert commit("g", a.epoch, "zz", None, offsets, api_version=9) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
    assert commit("g", a.epoch, "a", None, offsets, api_version=8) == {(TOPIC, 0): E.UNSUPPORTED_VERSION}
    assert commit("g", -1, "", None, offsets, api_version=9) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
    assert node.coordinator.fetch_offsets("g", None, member=("a", a.epoch + 1))[0] == E.STALE_MEMBER_EPOCH
    error, found = node.coordinator.fetch_offsets("g", None, member=("a", a.epoch))
    assert error == 0 and found[(TOPIC, 0)][0].offset == 5  # type: ignore[union-attr]
    txn = node.coordinator.commit_transactional_offsets("g", 9, 0, a.epoch + 1, "a", None, offsets)
    assert txn == {(TOPIC, 0): E.ILLEGAL_GENERATION}


def test_a_classic_join_into_a_consumer_group_with_members_needs_the_consumer_protocol_type() -> None:
    node = Node()
    Member(node, "a").heartbeat()
    answers: list[JoinResult] = []
    for protocol_type in ("connect", "consumer"):
        node.coordinator.join_group(
            "g", "", None, True, "c", "h", 10_000, 10_000, protocol_type, [("range", b"")], answers.append
        )
    assert [a.error for a in answers] == [E.INCONSISTENT_GROUP_PROTOCOL, E.MEMBER_ID_REQUIRED]


def test_a_restarted_coordinator_keeps_the_group_from_its_records() -> None:
    node = Node()
    a, b = Member(node, "a"), Member(node, "b", "inst-b")
    a.heartbeat()
    b.heartbeat()
    settle(a, b)
    group = node.consumer.groups["g"]
    expected = (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members))
    node.restart()
    group = node.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members)) == expected
    assert group.state == ConsumerGroupState.STABLE
    settle(a, b)  # the members go on with their epochs
    assert a.partitions() | b.partitions() == {0, 1, 2, 3}
    a.heartbeat(member_epoch=-1)
    node.restart()
    assert list(node.consumer.groups["g"].members) == ["b"]


def _classic_join(node: Node, member_id: str = "") -> JoinResult:
    answers: list[JoinResult] = []
    node.coordinator.join_group(
        "g", member_id, None, False, "c", "h", 10_000, 10_000, "consumer", [("range", b"")], answers.append
    )
    node.clock.advance(GroupConfig().initial_rebalance_delay_ms)  # the first join window
    return answers[-1]


def test_an_empty_classic_group_becomes_a_consumer_group_keeping_its_offsets() -> None:
    node = Node()
    joined = _classic_join(node)
    assert joined.error == 0
    synced: list[object] = []
    node.coordinator.sync_group(
        "g", joined.generation, joined.member_id, None, None, None, {joined.member_id: b""}, synced.append
    )
    assert len(synced) == 1
    offsets = {(TOPIC, 1): CommittedOffset(42, -1, "", 0)}
    assert node.coordinator.commit_offsets("g", joined.generation, joined.member_id, None, offsets) == {
        (TOPIC, 1): 0
    }
    # Still has its classic member: the consumer protocol cannot take it over (no online upgrade).
    assert Member(node, "a").heartbeat().error == E.GROUP_ID_NOT_FOUND
    node.coordinator.leave_group("g", [(joined.member_id, None)])
    assert Member(node, "a").heartbeat().error == 0
    assert node.coordinator.fetch_offsets("g", [(TOPIC, 1)])[1][(TOPIC, 1)][0].offset == 42  # type: ignore[union-attr]
    node.restart()
    assert "g" in node.consumer.groups
    assert node.coordinator.fetch_offsets("g", [(TOPIC, 1)])[1][(TOPIC, 1)][0].offset == 42  # type: ignore[union-attr]
    assert [g.group_id for g in node.coordinator.list_groups()] == []  # listed as a consumer group only


def test_an_empty_consumer_group_becomes_classic_on_a_classic_join_keeping_its_offsets() -> None:
    node = Node()
    a = Member(node, "a")
    a.heartbeat()
    offsets = {(TOPIC, 0): CommittedOffset(7, -1, "", 0)}
    assert node.coordinator.commit_offsets("g", a.epoch, "a", None, offsets, api_version=9) == {(TOPIC, 0): 0}
    a.heartbeat(member_epoch=-1)
    joined = _classic_join(node)
    assert joined.error == 0 and joined.generation == 1
    assert "g" not in node.consumer.groups
    node.restart()
    assert "g" not in node.consumer.groups
    assert node.coordinator.fetch_offsets("g", [(TOPIC, 0)])[1][(TOPIC, 0)][0].offset == 7  # type: ignore[union-attr]
