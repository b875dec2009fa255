"""ConsumerCoordinator's state machine, driven by a scripted coordinator and a manual clock.

No broker and no socket: ``MockCoordinator`` answers each request from the test's script (and
checks what the request carries), ``MockTime`` moves only when the test ticks it. Each test drives
one transition of the classic group protocol and checks it against what Java's
ConsumerCoordinator/AbstractCoordinator do in the same case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    resolve_assignors,
)
from sdk.consumer.consumer_coordinator import ConsumerCoordinator, MemberState
from sdk.consumer.errors import CommitFailedError
from sdk.consumer.group_channel import FALLBACK_TTL_S
from sdk.consumer.records import OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import ErrorCode, FencedInstanceIdError, KafkaConnectionError
from sdk.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sdk.testing.mock_coordinator import MockCoordinator, MockTopics, SentRequest
from sdk.testing.mock_time import MockTime, settle

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")
GROUP = "group"
TOPIC = "t"
ME, OTHER = "m1", "m2"
HEARTBEAT_MS = 3000
BACKOFF_MS = 100
MAX_POLL_MS = 300_000
T0, T1, T2 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 2)


class Recorder:
    """A rebalance listener that records its calls in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.calls.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.calls.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost: Iterable[TopicPartition]) -> None:
        self.calls.append(("lost", set(lost)))

    def take(self) -> list[tuple[str, set[TopicPartition]]]:
        calls, self.calls = self.calls, []
        return calls


class Member:
    """One ConsumerCoordinator on a MockCoordinator and a MockTime."""

    def __init__(
        self,
        *,
        assignors: str = "range",
        instance_id: str | None = None,
        auto_commit: bool = False,
        partitions: int = 3,
    ) -> None:
        self.time = MockTime()
        self.port = MockCoordinator(time=self.time)
        self.topics = MockTopics({TOPIC: partitions})
        self.subscription = SubscriptionState("earliest")
        self.listener = Recorder()
        self.subscription.subscribe(topics=[TOPIC], listener=self.listener)
        self.protocol = assignors
        self.coordinator = ConsumerCoordinator(
            self.port,
            self.subscription,
            topics=self.topics,
            clock=self.time,
            group_id=GROUP,
            group_instance_id=instance_id,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=HEARTBEAT_MS,
            rebalance_timeout_ms=30_000,
            max_poll_interval_ms=MAX_POLL_MS,
            retry_backoff_ms=BACKOFF_MS,
            enable_auto_commit=auto_commit,
            auto_commit_interval_ms=5000,
            assignors=resolve_assignors(assignors),
        )

    # -- scripted answers -----------------------------------------------------------------------

    def join(
        self, *, generation: int = 1, member_id: str = ME, leader: str = OTHER, error: int = 0,
        members: Sequence[tuple[str, list[str]]] = (), match: dict[str, Any] | None = None,
    ) -> None:
        self.port.prepare_response(
            JoinGroupResponse(
                error_code=error, generation_id=generation, protocol_type="consumer",
                protocol_name=self.protocol, leader=leader, member_id=member_id,
                members=[
                    JoinGroupResponse.JoinGroupResponseMember(
                        member_id=m, metadata=encode_subscription(Subscription(topics=topics))
                    )
                    for m, topics in members
                ],
            ),
            match=match,
        )

    def sync(
        self,
        partitions: Iterable[TopicPartition] = (),
        *,
        error: int = 0,
        match: dict[str, Any] | None = None,
    ) -> None:
        self.port.prepare_response(
            SyncGroupResponse(
                error_code=error, protocol_type="consumer", protocol_name=self.protocol,
                assignment=encode_assignment(Assignment(partitions=sorted(partitions))),
            ),
            match=match,
        )

    def heartbeat(self, error: int = 0, match: dict[str, Any] | None = None) -> None:
        self.port.prepare_response(HeartbeatResponse(error_code=error), match=match)

    def commit(self, offsets: Iterable[TopicPartition], error: int = 0) -> None:
        by_topic: dict[str, list[Any]] = {}
        answer = OffsetCommitResponse
        for tp in offsets:
            by_topic.setdefault(tp.topic, []).append(
                answer.OffsetCommitResponsePartition(partition_index=tp.partition, error_code=error)
            )
        topics = [answer.OffsetCommitResponseTopic(name=t, partitions=p) for t, p in by_topic.items()]
        self.port.prepare_response(answer(topics=topics))

    def leave(self, match: dict[str, Any] | None = None) -> None:
        self.port.prepare_response(LeaveGroupResponse(error_code=0), match=match)

    # -- driving --------------------------------------------------------------------------------

    async def run(self, awaitable: Awaitable[T], *, within_ms: float = 120_000) -> T:
        """``awaitable``'s result, moving the clock from one timer to the next while it waits
        (backoffs); fails if it needs more than ``within_ms`` of mock time or waits on an answer
        the script does not have."""
        task = asyncio.ensure_future(awaitable)
        deadline = self.time.monotonic() + within_ms / 1000
        await settle()
        while not task.done():
            wake = self.time.next_wakeup()
            if wake is None or self.time.monotonic() + wake > deadline:
                task.cancel()
                self.port.verify()
                raise AssertionError(f"stuck: in flight {self.port.in_flight} at {self.time.monotonic()} s")
            await self.time.tick(wake * 1000)
        try:
            return task.result()
        finally:
            self.port.verify()

    async def stable(self, partitions: Iterable[TopicPartition] = (T0, T1), *, generation: int = 1) -> None:
        """Join and sync as a follower of ``generation`` assigned ``partitions``."""
        self.join(generation=generation)
        self.sync(partitions)
        assert await self.run(self.coordinator.ensure_active_group())
        assert self.coordinator.state == MemberState.STABLE
        self.listener.take()

    async def heartbeat_answered(self, error: int) -> None:
        """The heartbeat task's next heartbeat, answered with ``error``."""
        sent = len(self.port.sent(HeartbeatRequest))
        c = self.coordinator
        self.heartbeat(error, match={"generation_id": c.generation, "member_id": c.member_id})
        await self.time.tick(HEARTBEAT_MS)
        assert len(self.port.sent(HeartbeatRequest)) == sent + 1
        self.port.verify()


def owned_in(request: Any) -> list[TopicPartition]:
    """The owned partitions the first protocol of a JoinGroup request names."""
    subscription = decode_subscription(bytes(request.protocols[0].metadata))
    return sorted(TopicPartition(*tp) for tp in subscription.owned_partitions)


@pytest.fixture
async def member() -> Member:
    return Member()


# -- join, sync, stable ---------------------------------------------------------------------------


async def test_follower_joins_syncs_and_is_stable(member: Member) -> None:
    member.join(match={"member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                       "protocols": lambda ps: [p.name for p in ps] == ["range"]})
    member.sync([T0, T1], match={"generation_id": 1, "member_id": ME, "assignments": []})
    assert await member.run(member.coordinator.ensure_active_group())
    c = member.coordinator
    assert (c.state, c.generation, c.member_id, c.rebalances) == (MemberState.STABLE, 1, ME, 1)
    assert member.subscription.assigned_partitions() == {T0, T1}
    assert member.listener.take() == [("assigned", {T0, T1})]
    assert c.group_metadata().generation_id == 1 and c.group_metadata().member_id == ME
    assert not c.need_rejoin()
    assert member.time.monotonic() == 0  # nothing waited
    assert member.port.pending() == 0


async def test_leader_assigns_every_member_from_the_metadata_it_asks_for(member: Member) -> None:
    member.join(leader=ME, members=[(ME, [TOPIC]), (OTHER, [TOPIC])])
    partitions = [MetadataResponse.MetadataResponsePartition(partition_index=i) for i in range(3)]
    topic = MetadataResponse.MetadataResponseTopic(name=TOPIC, partitions=partitions)
    metadata = MetadataResponse(topics=[topic])
    member.port.prepare_response(metadata, match={"allow_auto_topic_creation": False})

    def assignments(sync: Any) -> bool:
        given = {a.member_id: sorted(decode_assignment(bytes(a.assignment)).partitions)
                 for a in sync.assignments}
        return given == {ME: [T0, T1], OTHER: [T2]}

    member.port.prepare_response(
        SyncGroupResponse(protocol_type="consumer", protocol_name="range",
                          assignment=encode_assignment(Assignment(partitions=[T0, T1]))),
        match=assignments,
    )
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.subscription.assigned_partitions() == {T0, T1}
    assert member.topics.tracked == {TOPIC}
    # A partition added to a subscribed topic makes the leader rebalance the group.
    assert not member.coordinator.need_rejoin()
    member.topics.counts[TOPIC] = 4
    assert member.coordinator.need_rejoin()


async def test_member_id_required_joins_again_at_once_with_the_given_id(member: Member) -> None:
    # KIP-394: the first JoinGroup of a new member gets an id and MEMBER_ID_REQUIRED.
    member.join(error=ErrorCode.MEMBER_ID_REQUIRED, member_id=ME, generation=-1, match={"member_id": ""})
    member.join(match={"member_id": ME})
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.coordinator.member_id == ME
    assert member.time.monotonic() == 0  # no backoff before the second join
    assert [s.request.member_id for s in member.port.sent(JoinGroupRequest)] == ["", ME]


async def test_rebalance_in_progress_on_join_and_sync_retries_at_once(member: Member) -> None:
    member.join(error=ErrorCode.REBALANCE_IN_PROGRESS, member_id="")
    member.join()
    member.sync(error=ErrorCode.REBALANCE_IN_PROGRESS)
    member.join(generation=2)
    member.sync([T0], match={"generation_id": 2})
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.coordinator.generation == 2
    assert member.time.monotonic() == 0


@pytest.mark.parametrize(
    ("error", "member_id_after"), [(ErrorCode.UNKNOWN_MEMBER_ID, ""), (ErrorCode.ILLEGAL_GENERATION, ME)]
)
async def test_sync_losing_the_generation_rejoins_at_once(
    member: Member, error: int, member_id_after: str
) -> None:
    # Java's joinGroupIfNeeded goes on without a backoff after these, and keeps the member id
    # after ILLEGAL_GENERATION.
    member.join()
    member.sync(error=error)
    member.join(generation=2, match={"member_id": member_id_after})
    member.sync([T0], match={"generation_id": 2})
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.coordinator.generation == 2
    assert member.time.monotonic() == 0


async def test_join_answered_unknown_member_id_rejoins_at_once_without_the_id(member: Member) -> None:
    await member.stable()
    member.coordinator.request_rejoin("test")
    member.join(error=ErrorCode.UNKNOWN_MEMBER_ID, member_id="", match={"member_id": ME})
    member.join(generation=2, match={"member_id": ""})
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.coordinator.member_id == ME
    assert member.time.monotonic() == 0


# -- heartbeats -----------------------------------------------------------------------------------


async def test_heartbeats_carry_the_generation_every_interval(member: Member) -> None:
    await member.stable()
    await member.coordinator.start()
    for _ in range(3):
        await member.heartbeat_answered(0)
    assert member.time.monotonic() == pytest.approx(3 * HEARTBEAT_MS / 1000)
    assert not member.coordinator.need_rejoin()
    await member.coordinator.close(leave=False)


async def test_rebalance_in_progress_on_heartbeat_rejoins_with_the_same_member_id(member: Member) -> None:
    await member.stable()
    await member.coordinator.start()
    await member.heartbeat_answered(ErrorCode.REBALANCE_IN_PROGRESS)
    c = member.coordinator
    assert c.need_rejoin() and c.generation == 1 and c.member_id == ME
    # Eager: everything is revoked before the JoinGroup, then the new assignment is announced.
    member.join(generation=2, match={"member_id": ME})
    member.sync([T2], match={"generation_id": 2})
    assert await member.run(c.ensure_active_group(), within_ms=HEARTBEAT_MS - 1)
    assert member.listener.take() == [("revoked", {T0, T1}), ("assigned", {T2})]
    assert c.generation == 2
    await c.close(leave=False)


@pytest.mark.parametrize(
    ("error", "member_id_after"), [(ErrorCode.UNKNOWN_MEMBER_ID, ""), (ErrorCode.ILLEGAL_GENERATION, ME)]
)
async def test_heartbeat_losing_the_generation_loses_the_partitions_and_rejoins(
    member: Member, error: int, member_id_after: str
) -> None:
    # Java resets the member id on UNKNOWN_MEMBER_ID only: after ILLEGAL_GENERATION it is still valid.
    await member.stable()
    await member.coordinator.start()
    await member.heartbeat_answered(error)
    c = member.coordinator
    assert (c.generation, c.member_id, c.state) == (-1, member_id_after, MemberState.UNJOINED)
    member.join(generation=2, match={"member_id": member_id_after})
    member.sync([T0], match={"generation_id": 2})
    assert await member.run(c.ensure_active_group(), within_ms=HEARTBEAT_MS - 1)
    # Lost, not revoked: another member may own them already, so nothing is committed for them.
    assert member.listener.take() == [("lost", {T0, T1}), ("assigned", {T0})]
    assert member.port.sent(OffsetCommitRequest) == []
    await c.close(leave=False)


async def test_heartbeat_answered_for_an_older_generation_is_ignored(member: Member) -> None:
    await member.stable()
    c = member.coordinator
    await c.start()
    await member.time.tick(HEARTBEAT_MS)
    assert [s.request.generation_id for s in member.port.in_flight] == [1]
    # While that heartbeat is in flight, the member rejoins generation 2.
    c.request_rejoin("test")
    member.join(generation=2)
    member.sync([T0])
    assert await member.run(c.ensure_active_group())
    member.heartbeat(ErrorCode.ILLEGAL_GENERATION)
    await settle()
    assert (c.generation, c.state, c.need_rejoin()) == (2, MemberState.STABLE, False)
    await c.close(leave=False)


async def test_max_poll_interval_expiry_leaves_the_group_and_the_next_poll_rejoins(member: Member) -> None:
    await member.stable()
    c = member.coordinator
    await c.start()
    for _ in range(MAX_POLL_MS // HEARTBEAT_MS):
        member.heartbeat()
    member.leave(match={"members": lambda ms: [m.member_id for m in ms] == [ME]})
    await member.time.tick(MAX_POLL_MS + HEARTBEAT_MS)
    member.port.verify()
    assert len(member.port.sent(LeaveGroupRequest)) == 1
    assert (c.generation, c.member_id, c.state) == (-1, "", MemberState.UNJOINED)
    member.join(generation=2, match={"member_id": ""})
    member.sync([T0])
    assert await member.run(c.ensure_active_group(), within_ms=HEARTBEAT_MS - 1)
    assert member.listener.take() == [("lost", {T0, T1}), ("assigned", {T0})]
    await c.close(leave=False)


# -- static members: fencing ----------------------------------------------------------------------


async def test_static_member_fenced_on_heartbeat_fails_its_next_poll_and_commit() -> None:
    member = Member(instance_id="instance-1")
    member.join(match={"group_instance_id": "instance-1"})
    member.sync([T0], match={"group_instance_id": "instance-1"})
    assert await member.run(member.coordinator.ensure_active_group())
    await member.coordinator.start()
    await member.heartbeat_answered(ErrorCode.FENCED_INSTANCE_ID)
    with pytest.raises(FencedInstanceIdError):
        await member.coordinator.ensure_active_group()
    with pytest.raises(FencedInstanceIdError):
        await member.coordinator.commit_offsets({T0: OffsetAndMetadata(5)})
    assert member.port.sent(OffsetCommitRequest) == []
    # A fenced static member sends nothing more on close: no commit, no LeaveGroup.
    await member.coordinator.close()
    assert member.port.sent(LeaveGroupRequest) == []


async def test_static_member_fenced_on_join_raises() -> None:
    member = Member(instance_id="instance-1")
    member.join(error=ErrorCode.FENCED_INSTANCE_ID, member_id="")
    with pytest.raises(FencedInstanceIdError):
        await member.run(member.coordinator.ensure_active_group())


async def test_static_member_does_not_leave_on_close() -> None:
    member = Member(instance_id="instance-1")
    await member.stable()
    await member.coordinator.close()
    assert member.port.sent(LeaveGroupRequest) == []
    assert member.listener.take() == [("revoked", {T0, T1})]


# -- the coordinator moves ------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
async def test_join_answered_not_coordinator_finds_the_coordinator_again(member: Member, error: int) -> None:
    await member.port.coordinator()  # found on node 0 before
    member.join(error=error, member_id="")
    member.port.move_coordinator(1)
    member.join()
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    joins = member.port.sent(JoinGroupRequest)
    assert [j.node for j in joins] == [0, 1]
    assert member.port.lookups == 2 and member.port.forgotten == 1
    assert member.time.monotonic() == pytest.approx(BACKOFF_MS / 1000)  # with backoff, as Java


async def test_connection_lost_under_join_finds_the_coordinator_again(member: Member) -> None:
    await member.port.coordinator()  # found on node 0 before
    member.port.prepare_disconnect(JoinGroupRequest)
    member.port.move_coordinator(2)
    member.join()
    member.sync([T0], match={"member_id": ME})
    assert await member.run(member.coordinator.ensure_active_group())
    assert [j.node for j in member.port.sent(JoinGroupRequest)] == [0, 2]
    assert member.port.sent(SyncGroupRequest)[0].node == 2


@pytest.mark.parametrize("failure", ["NOT_COORDINATOR", "disconnect"])
async def test_heartbeat_losing_the_coordinator_finds_it_again_and_stays_in_the_group(
    member: Member, failure: str
) -> None:
    await member.stable()
    await member.coordinator.start()
    if failure == "disconnect":
        member.port.prepare_disconnect(HeartbeatRequest)
    else:
        member.heartbeat(ErrorCode.NOT_COORDINATOR)
    member.port.move_coordinator(1)
    await member.time.tick(HEARTBEAT_MS)
    assert member.port.known is None
    # The next heartbeat comes after the retry backoff, to the new coordinator, same generation.
    member.heartbeat(match={"generation_id": 1, "member_id": ME})
    await member.time.tick(BACKOFF_MS)
    member.port.verify()
    assert [h.node for h in member.port.sent(HeartbeatRequest)] == [0, 1]
    assert not member.coordinator.need_rejoin()
    await member.coordinator.close(leave=False)


async def test_commit_answered_not_coordinator_is_retried_at_the_new_coordinator(member: Member) -> None:
    await member.stable()
    member.commit([T0], ErrorCode.NOT_COORDINATOR)
    member.port.move_coordinator(1)
    member.commit([T0])
    await member.run(member.coordinator.commit_offsets({T0: OffsetAndMetadata(7)}))
    commits = member.port.sent(OffsetCommitRequest)
    assert [c.node for c in commits] == [0, 1]
    assert commits[1].request.generation_id_or_member_epoch == 1 and commits[1].request.member_id == ME


# -- cooperative rebalancing ----------------------------------------------------------------------


async def test_cooperative_rebalance_revokes_only_what_moved_then_rejoins() -> None:
    member = Member(assignors="cooperative-sticky")
    member.protocol = "cooperative-sticky"
    await member.stable([T0, T1])
    c = member.coordinator
    c.request_rejoin("another member joined")
    # Round 1: the member keeps its partitions while it rejoins and says it owns them.
    member.join(generation=2, match={"member_id": ME})
    member.sync([T0], match={"generation_id": 2})
    # Round 2 (asked for because T1 was revoked): T1 now free, the leader hands it out.
    member.join(generation=3)
    member.sync([T0])
    assert await member.run(c.ensure_active_group())
    joins = member.port.sent(JoinGroupRequest)
    assert owned_in(joins[1].request) == [T0, T1]
    assert owned_in(joins[2].request) == [T0]
    assert member.listener.take() == [
        ("revoked", {T1}), ("assigned", set()),  # generation 2
        ("assigned", set()),  # generation 3: nothing new
    ]
    assert c.generation == 3 and member.subscription.assigned_partitions() == {T0}


async def test_cooperative_member_keeps_fetching_its_partitions_during_a_rebalance() -> None:
    member = Member(assignors="cooperative-sticky")
    member.protocol = "cooperative-sticky"
    await member.stable([T0, T1])
    await member.coordinator.start()
    await member.heartbeat_answered(ErrorCode.REBALANCE_IN_PROGRESS)
    member.join(generation=2)
    join = asyncio.ensure_future(member.coordinator.ensure_active_group())
    await settle()
    # JoinGroup held by the coordinator: nothing revoked, both partitions still ours.
    assert member.port.in_flight and member.port.in_flight[0].api_key == SyncGroupRequest.API_KEY
    assert member.listener.calls == []
    assert member.subscription.assigned_partitions() == {T0, T1}
    member.sync([T0, T1])
    assert await member.run(join)
    assert member.listener.take() == [("assigned", set())]
    await member.coordinator.close(leave=False)


# -- commits and rebalances -----------------------------------------------------------------------


@pytest.mark.parametrize("error", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
async def test_commit_after_the_group_rebalanced_without_us_fails_and_resets(
    member: Member, error: int
) -> None:
    await member.stable()
    member.commit([T0], error)
    with pytest.raises(CommitFailedError):
        await member.run(member.coordinator.commit_offsets({T0: OffsetAndMetadata(3)}))
    c = member.coordinator
    assert c.generation == -1 and c.need_rejoin()
    assert c.member_id == ("" if error == ErrorCode.UNKNOWN_MEMBER_ID else ME)
    # The transactional identity stays the last completed join's (KIP-447).
    assert c.group_metadata().generation_id == 1


async def test_commit_answered_rebalance_in_progress_fails_and_asks_to_rejoin(member: Member) -> None:
    await member.stable()
    await member.coordinator.start()
    await member.heartbeat_answered(ErrorCode.REBALANCE_IN_PROGRESS)
    member.commit([T0], ErrorCode.REBALANCE_IN_PROGRESS)
    with pytest.raises(CommitFailedError):
        await member.run(member.coordinator.commit_offsets({T0: OffsetAndMetadata(3)}))
    c = member.coordinator
    assert c.generation == 1 and c.member_id == ME and c.need_rejoin()  # not reset, as Java
    await c.close(leave=False)


async def test_commit_while_rebalancing_fails_without_a_request(member: Member) -> None:
    await member.stable()
    member.join(generation=2)
    member.coordinator.request_rejoin("test")
    join = asyncio.ensure_future(member.coordinator.ensure_active_group())
    await settle()
    assert member.coordinator.state == MemberState.REBALANCING
    with pytest.raises(CommitFailedError):
        await member.coordinator.commit_offsets({T0: OffsetAndMetadata(3)})
    assert member.port.sent(OffsetCommitRequest) == []
    member.sync([T0])
    assert await member.run(join)


async def test_eager_rejoin_commits_consumed_offsets_before_revoking() -> None:
    member = Member(auto_commit=True)
    await member.stable([T0])
    member.subscription.seek(T0, 42)
    member.coordinator.request_rejoin("test")
    member.port.prepare_response(
        OffsetCommitResponse(topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
            name=TOPIC, partitions=[OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0)])]),
        match={"generation_id_or_member_epoch": 1,
               "topics": lambda ts: [(p.partition_index, p.committed_offset)
                                     for p in ts[0].partitions] == [(0, 42)]},
    )
    member.join(generation=2)
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    kinds = [r.name for r in member.port.requests]
    assert kinds[-3:] == ["OffsetCommitRequest", "JoinGroupRequest", "SyncGroupRequest"]
    assert member.listener.take() == [("revoked", {T0}), ("assigned", {T0})]


# -- leaving --------------------------------------------------------------------------------------


async def test_dynamic_member_revokes_and_leaves_on_close(member: Member) -> None:
    await member.stable()
    member.leave(match={"members": lambda ms: [(m.member_id, m.group_instance_id) for m in ms]
                        == [(ME, None)]})
    await member.run(member.coordinator.close())
    assert member.listener.take() == [("revoked", {T0, T1})]
    assert len(member.port.sent(LeaveGroupRequest)) == 1
    assert member.coordinator.member_id == "" and member.coordinator.generation == -1


async def test_leave_on_close_survives_a_lost_connection_once(member: Member) -> None:
    await member.stable()
    member.port.prepare_disconnect(LeaveGroupRequest)
    member.leave()
    await member.run(member.coordinator.close())
    assert len(member.port.sent(LeaveGroupRequest)) == 2


async def test_ensure_active_group_gives_up_at_its_timeout_while_no_coordinator_is_found(
    member: Member,
) -> None:
    member.port.move_coordinator(None)
    assert not await member.run(member.coordinator.ensure_active_group(timeout_ms=1000))
    assert member.time.monotonic() == pytest.approx(1.0)
    assert member.port.requests == []


# -- the non-flexible fallback --------------------------------------------------------------------


async def test_one_lost_connection_does_not_downgrade_the_group_versions(member: Member) -> None:
    # A network blip under a flexible JoinGroup says nothing about the broker's versions: the
    # retry, and every request after it, still speak the newest versions.
    member.port.prepare_disconnect(JoinGroupRequest)
    member.join()
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert [j.version for j in member.port.sent(JoinGroupRequest)] == [9, 9]
    assert [s.version for s in member.port.sent(SyncGroupRequest)] == [5]
    await member.coordinator.start()
    await member.heartbeat_answered(0)
    assert member.port.sent(HeartbeatRequest)[-1].version == 4
    await member.coordinator.close(leave=False)


def flexible_dropped(answer: Any) -> Any:
    """A broker that closes the connection on flexible requests and answers the others (as
    librdkafka's mock cluster does in some versions)."""

    def respond(sent: SentRequest) -> Any:
        flexible = type(sent.request).FLEXIBLE_FROM
        if flexible is not None and sent.version >= flexible:
            return KafkaConnectionError("connection closed by the broker")
        return answer

    return respond


async def test_a_broker_that_drops_every_flexible_join_gets_the_non_flexible_versions(member: Member) -> None:
    join = JoinGroupResponse(generation_id=1, protocol_type="consumer", protocol_name="range",
                             leader=OTHER, member_id=ME)
    for _ in range(3):
        member.port.prepare_response(flexible_dropped(join), api=JoinGroupRequest)
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert [j.version for j in member.port.sent(JoinGroupRequest)] == [9, 9, 5]
    assert [s.version for s in member.port.sent(SyncGroupRequest)] == [3]
    assert member.coordinator.channel.fallback.non_flexible(0)


async def test_the_fallback_is_withdrawn_when_non_flexible_requests_are_lost_too(member: Member) -> None:
    for _ in range(2):
        member.port.prepare_disconnect(JoinGroupRequest)
    member.port.prepare_disconnect(JoinGroupRequest)  # a non-flexible one lost as well
    member.join()
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert [j.version for j in member.port.sent(JoinGroupRequest)] == [9, 9, 5, 9]
    assert not member.coordinator.channel.fallback.non_flexible(0)


async def test_the_fallback_expires_and_the_flexible_versions_are_tried_again(member: Member) -> None:
    for _ in range(2):
        member.port.prepare_disconnect(JoinGroupRequest)
    member.join()
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert member.coordinator.channel.fallback.non_flexible(0)
    await member.time.tick(FALLBACK_TTL_S * 1000)
    member.coordinator.request_rejoin("test")
    member.join(generation=2)
    member.sync([T0])
    assert await member.run(member.coordinator.ensure_active_group())
    assert [j.version for j in member.port.sent(JoinGroupRequest)] == [9, 9, 5, 9]


# -- timers, offsets, timeouts --------------------------------------------------------------------


def fetch_answer(offset: int, error: int = 0) -> OffsetFetchResponse:
    group = OffsetFetchResponse.OffsetFetchResponseGroup
    topic = group.OffsetFetchResponseTopics(name=TOPIC, partitions=[
        group.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
            partition_index=0, committed_offset=offset, metadata="m", error_code=error)])
    return OffsetFetchResponse(groups=[group(group_id=GROUP, topics=[topic])])


async def test_auto_commit_commits_consumed_positions_every_interval() -> None:
    member = Member(auto_commit=True)
    await member.stable([T0])
    await member.coordinator.start()
    member.subscription.seek(T0, 10)
    for _ in range(5000 // HEARTBEAT_MS + 1):
        member.heartbeat()
    member.commit([T0])
    await member.time.tick(5000)
    commits = member.port.sent(OffsetCommitRequest)
    assert len(commits) == 1
    assert commits[0].request.topics[0].partitions[0].committed_offset == 10
    # Nothing consumed since: the next interval commits nothing.
    await member.time.tick(5000)
    assert len(member.port.sent(OffsetCommitRequest)) == 1
    member.port.verify()
    await member.coordinator.close(leave=False)


async def test_committed_offsets_wait_out_a_pending_transaction_and_a_loading_coordinator(
    member: Member,
) -> None:
    await member.stable([T0])
    member.port.prepare_response(fetch_answer(-1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    member.port.prepare_response(fetch_answer(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
                                 match={"require_stable": True})
    member.port.prepare_response(fetch_answer(33))
    committed = await member.run(member.coordinator.fetch_committed_offsets([T0]))
    assert committed == {T0: OffsetAndMetadata(33, "m", -1)}
    assert len(member.port.sent(OffsetFetchRequest)) == 3
    assert member.time.monotonic() == pytest.approx(2 * BACKOFF_MS / 1000)


async def test_a_heartbeat_without_answer_times_out_and_the_coordinator_is_found_again(
    member: Member,
) -> None:
    await member.stable()
    await member.coordinator.start()
    await member.time.tick(HEARTBEAT_MS)
    assert [s.name for s in member.port.in_flight] == ["HeartbeatRequest"]
    await member.time.tick(member.port.request_timeout_ms)
    assert member.port.in_flight == [] and member.port.known is None
    member.heartbeat()
    await member.time.tick(BACKOFF_MS)
    member.port.verify()
    assert len(member.port.sent(HeartbeatRequest)) == 2 and member.port.lookups == 2
    assert not member.coordinator.need_rejoin()
    await member.coordinator.close(leave=False)


async def test_close_commits_then_revokes_then_leaves() -> None:
    member = Member(auto_commit=True)
    await member.stable([T0])
    member.subscription.seek(T0, 5)
    member.commit([T0])
    member.leave()
    await member.run(member.coordinator.close())
    assert [r.name for r in member.port.requests[-2:]] == ["OffsetCommitRequest", "LeaveGroupRequest"]
    assert member.listener.take() == [("revoked", {T0})]


# -- the fakes themselves -------------------------------------------------------------------------


async def test_a_request_that_does_not_match_its_script_fails_and_is_kept(member: Member) -> None:
    member.join(match={"member_id": "someone else"})
    with pytest.raises(AssertionError, match="member_id"):
        await member.run(member.coordinator.ensure_active_group())
    with pytest.raises(AssertionError, match="member_id"):
        member.port.verify()


async def test_mock_time_moves_only_when_told() -> None:
    time = MockTime()
    woken: list[float] = []

    async def sleeper(seconds: float) -> None:
        await time.sleep(seconds)
        woken.append(time.monotonic())

    tasks = [asyncio.ensure_future(sleeper(s)) for s in (2.0, 1.0)]
    await settle()
    assert woken == [] and time.sleeping() == 2
    await time.tick(1500)
    assert woken == [1.0]
    with pytest.raises(TimeoutError):
        await time.wait_for(asyncio.Event().wait(), 0)
    await time.tick(500)
    assert woken == [1.0, 2.0]
    await asyncio.gather(*tasks)


# -- the background join task (what sdk.Consumer runs, as aiokafka) --------------------------------


async def test_join_task_joins_without_a_poll(member: Member) -> None:
    member.join(match={"member_id": ""})
    member.sync([T0, T1], match={"generation_id": 1})
    c = member.coordinator
    await c.start(join_in_background=True)
    await settle()
    assert (c.state, c.generation) == (MemberState.STABLE, 1)
    assert member.subscription.assigned_partitions() == {T0, T1}
    assert member.listener.take() == [("assigned", {T0, T1})]
    assert member.time.monotonic() == 0  # joined at once, no poll and no timer needed
    member.port.verify()
    await c.close(leave=False)


async def test_join_task_rejoins_when_a_heartbeat_reports_a_rebalance(member: Member) -> None:
    await member.stable()
    c = member.coordinator
    await c.start(join_in_background=True)
    member.join(generation=2, match={"member_id": ME})
    member.sync([T2], match={"generation_id": 2})
    await member.heartbeat_answered(ErrorCode.REBALANCE_IN_PROGRESS)
    await settle()
    assert (c.state, c.generation) == (MemberState.STABLE, 2)
    assert member.listener.take() == [("revoked", {T0, T1}), ("assigned", {T2})]
    await c.close(leave=False)


async def test_join_task_joins_a_changed_subscription_when_woken(member: Member) -> None:
    await member.stable()
    c = member.coordinator
    await c.start(join_in_background=True)
    member.topics.counts["u"] = 1
    member.subscription.subscribe(topics=[TOPIC, "u"], listener=member.listener)
    member.join(generation=2, match={"protocols": lambda ps: decode_subscription(bytes(ps[0].metadata)).topics
                                     == [TOPIC, "u"]})
    member.sync([T0, TopicPartition("u", 0)], match={"generation_id": 2})
    c.wake_join()
    await settle()
    assert (c.state, c.generation) == (MemberState.STABLE, 2)
    assert member.subscription.assigned_partitions() == {T0, TopicPartition("u", 0)}
    await c.close(leave=False)


async def test_join_task_waits_for_a_poll_after_leaving_on_max_poll_interval(member: Member) -> None:
    await member.stable()
    c = member.coordinator
    await c.start(join_in_background=True)
    for _ in range(MAX_POLL_MS // HEARTBEAT_MS):
        member.heartbeat()
    member.leave()
    await member.time.tick(MAX_POLL_MS + HEARTBEAT_MS)
    await member.time.tick(10 * HEARTBEAT_MS)
    assert (c.generation, c.state) == (-1, MemberState.UNJOINED)
    joins = len(member.port.sent(JoinGroupRequest))
    assert joins == 1  # the first join only: no rejoin before the application polls again
    member.join(generation=2, match={"member_id": ""})
    member.sync([T0])
    c.record_poll()
    await settle()
    assert len(member.port.sent(JoinGroupRequest)) == joins + 1
    assert (c.state, c.generation) == (MemberState.STABLE, 2)
    await c.close(leave=False)


async def test_a_non_retriable_background_join_error_is_raised_by_the_next_poll(member: Member) -> None:
    member.join(error=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    c = member.coordinator
    await c.start(join_in_background=True)
    await settle()
    member.port.verify()
    with pytest.raises(Exception) as raised:
        await c.ensure_active_group()
    assert raised.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
    await c.close(leave=False)
