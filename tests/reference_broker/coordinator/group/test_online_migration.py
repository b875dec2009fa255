"""Online upgrade and downgrade between a classic and a consumer group with members, driven by a
ManualClock: a consumer-protocol member joins a classic group (it becomes a consumer group and the
classic member keeps its partitions until it rejoins), the classic member lives on through
JoinGroup/SyncGroup/Heartbeat/OffsetCommit, and the group becomes classic again when the last
consumer-protocol member leaves."""

from __future__ import annotations

import pathlib
import uuid

import pytest

from reference_broker.clock import ManualClock
from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.coordinator.group.classic_members import MigrationPolicy
from reference_broker.coordinator.group.consumer_coordinator import ConsumerGroupConfig, HeartbeatArgs
from reference_broker.coordinator.group.consumer_group import Assignment, TopicInfo
from reference_broker.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from reference_broker.coordinator.group.state import CommittedOffset, GroupState, JoinResult, SyncResult
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import protocol as embedded
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.test_group_coordinator import ListStore

TOPIC = "orders"
TOPIC_ID = uuid.UUID(int=7)
GROUP = "g"


class Node:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store = ListStore()
        self.topics = {TOPIC: TopicInfo(TOPIC_ID, TOPIC, 4)}
        self.coordinator = GroupCoordinator(
            self.clock, GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), self.store
        )
        self.coordinator.consumer.configure(ConsumerGroupConfig(), self.topics.get, lambda: list(self.topics))

    def restart(self) -> None:
        self.coordinator.shutdown()
        self.coordinator = GroupCoordinator(
            self.clock, GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), self.store
        )
        self.coordinator.consumer.configure(ConsumerGroupConfig(), self.topics.get, lambda: list(self.topics))
        self.coordinator.load_records(self.store.partitions.get(0, []))


class ClassicClient:
    """An eager classic consumer: gives up everything before it rejoins."""

    def __init__(self, node: Node, instance_id: str | None = None) -> None:
        self.node = node
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.protocol = "range"
        self.partitions: list[int] = []

    def _join_once(self) -> JoinResult:
        answers: list[JoinResult] = []
        metadata = embedded.encode_subscription(embedded.Subscription([TOPIC]))
        self.node.coordinator.join_group(
            GROUP, self.member_id, self.instance_id, True, "classic", "/127.0.0.1", 60_000, 10_000,
            "consumer", [(self.protocol, metadata)], answers.append,
        )  # fmt: skip
        assert answers, "the JoinGroup was not answered at once"
        return answers[0]

    def join(self) -> JoinResult:
        self.partitions = []
        answer = self._join_once()
        if answer.error == E.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            answer = self._join_once()
        assert answer.error == 0, E(answer.error).name
        self.member_id, self.generation = answer.member_id, answer.generation
        return answer

    def sync(self, leader_assignment: dict[str, bytes] | None = None) -> SyncResult:
        answers: list[SyncResult] = []
        self.node.coordinator.sync_group(
            GROUP, self.generation, self.member_id, self.instance_id, "consumer", self.protocol,
            leader_assignment or {}, answers.append,
        )  # fmt: skip
        assert answers and answers[0].error == 0, answers and E(answers[0].error).name
        self.partitions = sorted(
            tp.partition for tp in embedded.decode_assignment(answers[0].assignment).partitions
        )
        return answers[0]

    def heartbeat(self) -> int:
        return self.node.coordinator.heartbeat(GROUP, self.generation, self.member_id, self.instance_id)

    def commit(self, partition: int, offset: int) -> int:
        result = self.node.coordinator.commit_offsets(
            GROUP, self.generation, self.member_id, self.instance_id,
            {(TOPIC, partition): CommittedOffset(offset, -1, "", self.node.clock.now_ms())}, api_version=8,
        )  # fmt: skip
        return result[(TOPIC, partition)]


def consumer_heartbeat(
    node: Node, member_id: str, epoch: int, owned: Assignment
) -> tuple[int, int, Assignment]:
    answer = node.coordinator.consumer.heartbeat(
        HeartbeatArgs(
            group_id=GROUP,
            member_id=member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=60_000,
            subscribed_topic_names=[TOPIC],
            owned=owned,
            api_version=1,
        )
    )
    return answer.error, answer.member_epoch, answer.assignment if answer.assignment is not None else owned


def classic_group_of_one(node: Node, instance_id: str | None = None) -> ClassicClient:
    classic = ClassicClient(node, instance_id)
    answer = classic.join()
    assert answer.leader_id == classic.member_id
    everything = embedded.encode_assignment(embedded.Assignment([TopicPartition(TOPIC, p) for p in range(4)]))
    classic.sync({classic.member_id: everything})
    assert classic.partitions == [0, 1, 2, 3]
    return classic


def test_a_consumer_member_upgrades_a_classic_group_and_its_classic_member_keeps_consuming() -> None:
    node = Node()
    classic = classic_group_of_one(node)
    error, epoch, assigned = consumer_heartbeat(node, "modern", 0, {})
    assert error == 0
    group = node.coordinator.consumer.groups[GROUP]
    assert set(group.members) == {classic.member_id, "modern"}
    assert assigned == {}, "the classic member still holds every partition"
    # The classic member still consumes and commits at its generation until it rejoins.
    assert classic.commit(0, 5) == 0
    assert classic.heartbeat() == E.REBALANCE_IN_PROGRESS
    rejoined = classic.join()
    assert rejoined.generation == group.group_epoch and rejoined.protocol_name == "range"
    classic.sync()
    error, epoch, assigned = consumer_heartbeat(node, "modern", epoch, {})
    assert error == 0
    modern = sorted(assigned.get(TOPIC_ID, frozenset()))
    assert sorted(classic.partitions + modern) == [0, 1, 2, 3] and classic.partitions and modern
    assert classic.heartbeat() == 0
    assert classic.commit(classic.partitions[0], 9) == 0
    found = node.coordinator.fetch_offsets(GROUP, None)[1][(TOPIC, 0)][0]
    assert found is not None and found.offset in (5, 9)


def test_the_group_becomes_classic_again_when_its_last_consumer_member_leaves() -> None:
    node = Node()
    classic = classic_group_of_one(node)
    _, epoch, _ = consumer_heartbeat(node, "modern", 0, {})
    assert classic.heartbeat() == E.REBALANCE_IN_PROGRESS
    classic.join()
    classic.sync()
    consumer_heartbeat(node, "modern", epoch, {})
    node.coordinator.consumer.heartbeat(HeartbeatArgs(group_id=GROUP, member_id="modern", member_epoch=-1))
    assert GROUP not in node.coordinator.consumer.groups
    group = node.coordinator.groups[GROUP]
    assert group.is_(GroupState.PREPARING_REBALANCE) and set(group.members) == {classic.member_id}
    assert classic.heartbeat() == E.REBALANCE_IN_PROGRESS
    answer = classic.join()
    assert answer.leader_id == classic.member_id
    everything = embedded.encode_assignment(embedded.Assignment([TopicPartition(TOPIC, p) for p in range(4)]))
    classic.sync({classic.member_id: everything})
    assert classic.partitions == [0, 1, 2, 3] and classic.heartbeat() == 0
    node.restart()
    restored = node.coordinator.groups[GROUP]
    assert GROUP not in node.coordinator.consumer.groups and classic.member_id in restored.members


def test_the_upgraded_group_is_rebuilt_from_its_records_with_its_classic_member() -> None:
    node = Node()
    classic = classic_group_of_one(node)
    consumer_heartbeat(node, "modern", 0, {})
    node.restart()
    group = node.coordinator.consumer.groups[GROUP]
    member = group.members[classic.member_id]
    assert member.uses_classic_protocol and member.classic_session_timeout_ms == 10_000
    assert member.assigned == {TOPIC_ID: frozenset(range(4))}
    assert not node.coordinator.groups[GROUP].members


@pytest.mark.parametrize("policy", [MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE])
def test_without_the_upgrade_policy_a_classic_group_with_members_refuses_consumer_members(
    policy: MigrationPolicy,
) -> None:
    node = Node()
    node.coordinator.consumer.migration_policy = policy
    classic_group_of_one(node)
    error, _, _ = consumer_heartbeat(node, "modern", 0, {})
    assert error == E.GROUP_ID_NOT_FOUND


def test_a_classic_member_told_to_rejoin_that_does_not_is_fenced_after_its_rebalance_timeout() -> None:
    node = Node()
    classic = classic_group_of_one(node)
    _, epoch, _ = consumer_heartbeat(node, "modern", 0, {})
    assert classic.heartbeat() == E.REBALANCE_IN_PROGRESS
    # Heartbeats keep its session alive, not its place in the group.
    for _ in range(11):
        node.clock.advance(5_000)
        assert classic.heartbeat() == E.REBALANCE_IN_PROGRESS
        _, epoch, _ = consumer_heartbeat(node, "modern", epoch, {})
    node.clock.advance(5_000)
    group = node.coordinator.consumer.groups[GROUP]
    assert set(group.members) == {"modern"}
    error, _, assigned = consumer_heartbeat(node, "modern", epoch, {})
    assert error == 0 and assigned == {TOPIC_ID: frozenset(range(4))}


def test_the_migration_policy_setting_takes_only_kafkas_values(tmp_path: pathlib.Path) -> None:
    for value in ("DISABLED", "upgrade", "Downgrade", "bidirectional"):
        config = BrokerConfig.build(tmp_path, properties={"group.consumer.migration.policy": value})
        assert MigrationPolicy(config.get("group.consumer.migration.policy").lower())
    with pytest.raises(ConfigError, match=r"group\.consumer\.migration\.policy"):
        BrokerConfig.build(tmp_path, properties={"group.consumer.migration.policy": "sideways"})


def test_a_static_classic_member_restarted_under_a_new_member_id_takes_its_place() -> None:
    node = Node()
    classic = classic_group_of_one(node, "inst")
    consumer_heartbeat(node, "modern", 0, {})
    group = node.coordinator.consumer.groups[GROUP]
    old_id = classic.member_id
    assert group.static_members["inst"] == old_id
    metadata = embedded.encode_subscription(embedded.Subscription([TOPIC]))
    answers: list[JoinResult] = []
    for member_id in ("", "someone-else"):
        node.coordinator.join_group(
            GROUP, member_id, "inst", True, "classic", "/127.0.0.1", 60_000, 10_000,
            "consumer", [("range", metadata)], answers.append,
        )  # fmt: skip
    assert [a.error for a in answers] == [0, E.FENCED_INSTANCE_ID]
    assert old_id not in group.members and group.static_members["inst"] == answers[0].member_id


def test_a_classic_member_switching_to_the_consumer_protocol_stops_being_classic() -> None:
    node = Node()
    classic = classic_group_of_one(node)
    consumer_heartbeat(node, "modern", 0, {})
    error, _, _ = consumer_heartbeat(node, classic.member_id, 0, {})
    assert error == 0
    assert not node.coordinator.consumer.groups[GROUP].members[classic.member_id].uses_classic_protocol
    assert classic.heartbeat() == E.UNKNOWN_MEMBER_ID


def test_a_classic_member_sharing_no_protocol_with_the_other_classic_members_is_refused() -> None:
    node = Node()
    classic_group_of_one(node)
    consumer_heartbeat(node, "modern", 0, {})
    answers: list[JoinResult] = []
    metadata = embedded.encode_subscription(embedded.Subscription([TOPIC]))
    node.coordinator.join_group(
        GROUP, "", None, False, "classic", "/127.0.0.1", 60_000, 10_000,
        "consumer", [("roundrobin", metadata)], answers.append,
    )  # fmt: skip
    assert [a.error for a in answers] == [E.INCONSISTENT_GROUP_PROTOCOL]
