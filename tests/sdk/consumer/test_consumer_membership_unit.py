"""ConsumerMembershipManager's state machine (KIP-848), driven by a scripted coordinator and a
manual clock.

``MockCoordinator`` answers each ConsumerGroupHeartbeat from the test's script and checks what it
carries; ``MockTime`` moves only when the test ticks it. Each test checks one transition against
what Java's ConsumerMembershipManager / ConsumerHeartbeatRequestManager do in the same case.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.consumer import Consumer
from sdk.consumer.consumer_membership import LEAVE_EPOCH, ConsumerMembershipManager, MembershipState
from sdk.consumer.errors import CommitFailedError
from sdk.consumer.records import OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import ConfigError, ErrorCode, KafkaError
from sdk.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from sdk.testing.mock_coordinator import MockCoordinator
from sdk.testing.mock_time import MockTime, settle

pytestmark = pytest.mark.timeout(30)

GROUP = "group"
TOPIC = "t"
TOPIC_ID = uuid.UUID(int=0x1234)
ME = "member-1"
INTERVAL_MS = 2000
T0, T1, T2 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 2)


class Names:
    """``TopicNames`` from a dict."""

    def __init__(self) -> None:
        self.by_id = {TOPIC_ID: TOPIC}
        self.tracked: set[str] = set()

    async def names(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        return {i: self.by_id[i] for i in topic_ids if i in self.by_id}

    def id_of(self, topic: str) -> uuid.UUID | None:
        return next((i for i, n in self.by_id.items() if n == topic), None)

    def track(self, topics: Iterable[str]) -> None:
        self.tracked |= set(topics)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []
        #: What the subscription owned when each call was made.
        self.owned_at_call: list[set[TopicPartition]] = []
        self.subscription: SubscriptionState | None = None

    def _record(self, name: str, partitions: Iterable[TopicPartition]) -> None:
        self.calls.append((name, set(partitions)))
        assert self.subscription is not None
        self.owned_at_call.append(self.subscription.assigned_partitions())

    def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self._record("revoked", revoked)

    def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._record("assigned", assigned)

    def on_partitions_lost(self, lost: Iterable[TopicPartition]) -> None:
        self._record("lost", lost)

    def take(self) -> list[tuple[str, set[TopicPartition]]]:
        calls, self.calls = self.calls, []
        self.owned_at_call = []
        return calls


class Member:
    def __init__(
        self, *, instance_id: str | None = None, auto_commit: bool = False, assignor: str | None = None
    ) -> None:
        self.time = MockTime()
        self.port = MockCoordinator(time=self.time)
        self.subscription = SubscriptionState("earliest")
        self.listener = Recorder()
        self.listener.subscription = self.subscription
        self.subscription.subscribe(topics=[TOPIC], listener=self.listener)
        self.manager = ConsumerMembershipManager(
            self.port,
            self.subscription,
            topic_names=Names(),
            clock=self.time,
            group_id=GROUP,
            group_instance_id=instance_id,
            server_assignor=assignor,
            rebalance_timeout_ms=300_000,
            max_poll_interval_ms=300_000,
            retry_backoff_ms=100,
            enable_auto_commit=auto_commit,
            auto_commit_interval_ms=5000,
            member_id=ME,
        )

    def answer(
        self,
        *,
        epoch: int = 0,
        assignment: Iterable[int] | None = None,
        error: int = 0,
        match: dict[str, Any] | None = None,
    ) -> None:
        assigned = None
        if assignment is not None:
            assigned = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    ConsumerGroupHeartbeatResponse.TopicPartitions(
                        topic_id=TOPIC_ID, partitions=sorted(assignment)
                    )
                ]
            )
        self.port.prepare_response(
            ConsumerGroupHeartbeatResponse(
                error_code=error,
                member_id=ME if not error else None,
                member_epoch=epoch,
                heartbeat_interval_ms=INTERVAL_MS,
                assignment=assigned,
            ),
            match=match,
        )

    def heartbeats(self) -> list[Any]:
        return [s.request for s in self.port.sent(ConsumerGroupHeartbeatRequest)]

    async def start(self) -> None:
        await self.manager.start(join_in_background=True)
        await settle()

    async def stable(self, partitions: Iterable[int] = (0, 1), epoch: int = 1) -> None:
        """Join and reconcile ``partitions`` at ``epoch``, acknowledged."""
        self.answer(epoch=epoch, assignment=partitions)
        self.answer(epoch=epoch)  # the acknowledgement
        await self.start()
        await self.manager.ensure_active_group()
        await settle()
        self.port.verify()
        assert self.manager.state == MembershipState.STABLE
        self.listener.take()


def owned(request: Any) -> set[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    return {TopicPartition(TOPIC, p) for t in request.topic_partitions for p in t.partitions}


@pytest.fixture
async def member() -> Any:
    m = Member()
    yield m
    m.manager._closed = True
    for task in m.manager._tasks:
        task.cancel()


async def test_join_sends_full_state_then_acknowledges_the_assignment_with_only_changes(
    member: Member,
) -> None:
    member.answer(
        epoch=1,
        assignment=[0, 1],
        match={
            "member_id": ME,
            "member_epoch": 0,
            "subscribed_topic_names": [TOPIC],
            "rebalance_timeout_ms": 300_000,
            "topic_partitions": [],
        },
    )
    member.answer(
        epoch=1, match={"member_epoch": 1, "subscribed_topic_names": None, "rebalance_timeout_ms": -1}
    )
    await member.start()
    await member.manager.ensure_active_group()
    await settle()
    member.port.verify()
    assert member.listener.take() == [("assigned", {T0, T1})]
    assert member.subscription.assigned_partitions() == {T0, T1}
    _, ack = member.heartbeats()
    assert owned(ack) == {T0, T1}
    assert member.manager.state == MembershipState.STABLE
    assert member.manager.group_metadata().generation_id == 1
    assert member.manager.group_metadata().member_id == ME
    # Next heartbeat at the broker's interval, with nothing that did not change.
    member.answer(epoch=1, match={"topic_partitions": None, "subscribed_topic_names": None})
    await member.time.tick(INTERVAL_MS)
    assert len(member.heartbeats()) == 3
    member.port.verify()


async def test_new_target_revokes_before_it_assigns_and_commits_with_the_member_epoch() -> None:
    m = Member(auto_commit=True)
    await m.stable([0, 1], epoch=1)
    m.subscription.seek(T0, 5)
    m.subscription.seek(T1, 7)
    m.answer(epoch=2, assignment=[1, 2])
    m.port.prepare_response(
        OffsetCommitResponse(
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=TOPIC,
                    partitions=[OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0)],
                )
            ]
        ),
        match={"generation_id_or_member_epoch": 2, "member_id": ME},
    )
    m.answer(epoch=2)
    await m.time.tick(INTERVAL_MS)
    await m.manager.ensure_active_group()
    await settle()
    m.port.verify()
    owned_at_call = m.listener.owned_at_call
    assert m.listener.take() == [("revoked", {T0}), ("assigned", {T2})]
    # Revoked partitions were gone before the new one arrived: never both owned at once.
    assert owned_at_call == [{T0, T1}, {T1, T2}]
    assert len(m.port.sent(OffsetCommitRequest)) == 1
    assert owned(m.heartbeats()[-1]) == {T1, T2}
    m.manager._closed = True


@pytest.mark.parametrize("error", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
async def test_fenced_member_loses_its_partitions_and_rejoins_with_epoch_zero(
    member: Member, error: int
) -> None:
    await member.stable([0, 1], epoch=3)
    member.answer(error=error)
    member.answer(
        epoch=5,
        assignment=[2],
        match={
            "member_id": ME,
            "member_epoch": 0,
            "subscribed_topic_names": [TOPIC],
            "topic_partitions": [],
        },
    )
    member.answer(epoch=5)
    await member.time.tick(INTERVAL_MS)
    await member.manager.ensure_active_group()
    await settle()
    await member.manager.ensure_active_group()
    await settle()
    member.port.verify()
    assert member.listener.take() == [("lost", {T0, T1}), ("assigned", {T2})]
    assert member.manager.member_epoch == 5


@pytest.mark.parametrize(
    "error",
    [ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.FENCED_INSTANCE_ID],
)
async def test_fatal_heartbeat_errors_are_raised_by_the_next_poll(error: int) -> None:
    m = Member(instance_id="instance-a")
    m.answer(error=error, match={"instance_id": "instance-a", "member_epoch": 0})
    await m.start()
    assert m.manager.state == MembershipState.FATAL
    with pytest.raises(KafkaError) as raised:
        await m.manager.ensure_active_group()
    assert raised.value.code == error
    m.manager._closed = True


@pytest.mark.parametrize(("instance_id", "leave_epoch"), [(None, -1), ("instance-a", -2)])
async def test_close_revokes_and_leaves_with_the_leave_epoch(
    instance_id: str | None, leave_epoch: int
) -> None:
    m = Member(instance_id=instance_id)
    await m.stable([0], epoch=4)
    m.answer(
        epoch=leave_epoch, match={"member_epoch": leave_epoch, "member_id": ME, "instance_id": instance_id}
    )
    await m.manager.close()
    m.port.verify()
    assert m.listener.take() == [("revoked", {T0})]


async def test_coordinator_moved_is_found_again_and_gets_the_full_state(member: Member) -> None:
    await member.stable([0], epoch=2)
    lookups = member.port.lookups
    member.answer(error=ErrorCode.NOT_COORDINATOR)
    member.port.move_coordinator(1)
    member.answer(
        epoch=2,
        match={
            "member_epoch": 2,
            "subscribed_topic_names": [TOPIC],
            "rebalance_timeout_ms": 300_000,
            "topic_partitions": lambda t: t is not None,
        },
    )
    await member.time.tick(INTERVAL_MS)
    await member.time.tick(100)
    await settle()
    member.port.verify()
    assert member.port.lookups > lookups
    assert len(member.heartbeats()) == 4


async def test_commit_refused_for_a_stale_epoch_is_commit_failed(member: Member) -> None:
    await member.stable([0], epoch=2)
    member.port.prepare_response(
        OffsetCommitResponse(
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=TOPIC,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=0, error_code=ErrorCode.STALE_MEMBER_EPOCH
                        )
                    ],
                )
            ]
        ),
        match={"generation_id_or_member_epoch": 2},
    )
    with pytest.raises(CommitFailedError):
        await member.manager.commit_offsets({T0: OffsetAndMetadata(3)})


async def test_server_assignor_and_pattern_are_sent_on_the_first_heartbeat() -> None:
    m = Member(assignor="range")
    m.subscription.subscribe(pattern="t.*", listener=m.listener)
    m.answer(
        epoch=1,
        match={"server_assignor": "range", "subscribed_topic_regex": "t.*", "subscribed_topic_names": None},
    )
    await m.start()
    m.port.verify()
    m.manager._closed = True


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("session_timeout_ms", 45000),
        ("heartbeat_interval_ms", 1000),
        ("partition_assignment_strategy", "sticky"),
    ],
)
def test_classic_only_settings_are_refused_with_the_consumer_protocol(option: str, value: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        Consumer("t", group_id="g", group_protocol="consumer", **{option: value})
    assert option in str(raised.value)


def test_group_protocol_is_checked_and_remote_assignor_needs_the_consumer_protocol() -> None:
    with pytest.raises(ConfigError, match="group_protocol"):
        Consumer("t", group_id="g", group_protocol="eager")
    with pytest.raises(ConfigError, match="group_remote_assignor"):
        Consumer("t", group_id="g", group_remote_assignor="uniform")
    assert Consumer("t", group_id="g").config.group_protocol == "classic"
    assert Consumer("t", group_id="g", group_protocol="CONSUMER").config.group_protocol == "consumer"


def test_the_blocking_consumer_takes_the_group_protocol_too() -> None:
    from sdk.sync import Consumer as BlockingConsumer

    consumer = BlockingConsumer("t", group_id="g", group_protocol="consumer", group_remote_assignor="uniform")
    assert (consumer.config.group_protocol, consumer.config.group_remote_assignor) == ("consumer", "uniform")
    with pytest.raises(ConfigError, match="session_timeout_ms"):
        BlockingConsumer("t", group_id="g", group_protocol="consumer", session_timeout_ms=30000)


def commit_answer(error: int = 0) -> OffsetCommitResponse:
    partition = OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0, error_code=error)
    return OffsetCommitResponse(
        topics=[OffsetCommitResponse.OffsetCommitResponseTopic(name=TOPIC, partitions=[partition])]
    )


async def test_commit_refused_as_stale_is_sent_again_with_the_epoch_the_member_has_now(
    member: Member,
) -> None:
    await member.stable([0], epoch=2)

    def stale_while_the_epoch_moved_on(sent: Any) -> OffsetCommitResponse:
        member.manager.member_epoch = 3  # a heartbeat answered meanwhile
        return commit_answer(ErrorCode.STALE_MEMBER_EPOCH)

    member.port.prepare_response(
        stale_while_the_epoch_moved_on, api=OffsetCommitRequest, match={"generation_id_or_member_epoch": 2}
    )
    member.port.prepare_response(commit_answer(), match={"generation_id_or_member_epoch": 3})
    await member.manager.commit_offsets({T0: OffsetAndMetadata(3)})
    member.port.verify()
    assert len(member.port.sent(OffsetCommitRequest)) == 2


async def test_no_poll_for_max_poll_interval_leaves_and_the_next_poll_rejoins(member: Member) -> None:
    await member.stable([0, 1], epoch=3)
    for _ in range(300_000 // INTERVAL_MS):  # heartbeats while the application does not poll
        member.answer(epoch=3, match={"member_epoch": 3})
        await member.time.tick(INTERVAL_MS)
    member.answer(epoch=LEAVE_EPOCH, match={"member_epoch": LEAVE_EPOCH, "member_id": ME})
    await member.time.tick(INTERVAL_MS)  # this one finds the poll overdue
    await settle()
    member.port.verify()
    assert member.manager.member_epoch == 0
    member.answer(epoch=4, assignment=[0], match={"member_epoch": 0, "member_id": ME, "topic_partitions": []})
    member.answer(epoch=4)
    member.manager.record_poll()
    await member.manager.ensure_active_group()
    await settle()
    await member.manager.ensure_active_group()
    member.port.verify()
    assert member.listener.take() == [("lost", {T0, T1}), ("assigned", {T0})]
    assert member.manager.member_epoch == 4
