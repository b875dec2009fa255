"""ConsumerCoordinator against real brokers: librdkafka's mock cluster and the reference broker.

Each member is a ConsumerCoordinator with its own KafkaClient and SubscriptionState, driven by a poll
loop that calls ``ensure_active_group`` and ``record_poll`` as the Consumer does. The reference
broker runs with ``group.initial.rebalance.delay.ms=0`` so a group forms at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest
import pytest_asyncio

from reference_broker.testing import BrokerProcess
from sdk.client import KafkaClient
from sdk.client.client import coordinator_node_id
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import resolve_assignors
from sdk.consumer.consumer_coordinator import ConsumerCoordinator, MemberState
from sdk.consumer.errors import CommitFailedError
from sdk.consumer.listener import ConsumerRebalanceListener
from sdk.consumer.records import OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import FencedInstanceIdError, KafkaConnectionError  # type: ignore[attr-defined]
from sdk.protocol import messages

pytestmark = pytest.mark.timeout(120)

MOCK_PARTITIONS = 4  # what the mock cluster auto-creates


# -- brokers --------------------------------------------------------------------------------------


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def reference(request: pytest.FixtureRequest) -> str:
    """The reference broker and Apache Kafka, without the mock cluster, for tests it adds only
    its fixed ~5 s rebalance wait to (or cannot run: it has no static membership)."""
    if request.param == "apache":
        return str(request.getfixturevalue("group_kafka").bootstrap)
    return str(request.getfixturevalue("group_broker").bootstrap)


async def create_topic(bootstrap: str, name: str, partitions: int) -> list[TopicPartition]:
    """``name`` with ``partitions`` partitions (the mock auto-creates MOCK_PARTITIONS instead)."""
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        conn = await client.get_connection(await client.wait_for_node())
        if conn.supports(messages.CreateTopicsRequest.API_KEY) and len(client.cluster.brokers) == 1:
            request = messages.CreateTopicsRequest(
                topics=[
                    messages.CreateTopicsRequest.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=1
                    )
                ],
                timeout_ms=10000,
            )
            response = await client.send_to_any(request)
            assert response.topics[0].error_code == 0, response
        client.add_topic(name)
        deadline = time.monotonic() + 10
        while True:
            await client.refresh_metadata()
            found = client.cluster.partitions_for(name)
            if found:
                return [TopicPartition(name, p) for p in found]
            assert time.monotonic() < deadline, f"topic {name} did not appear"
            await asyncio.sleep(0.05)
    finally:
        await client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- members --------------------------------------------------------------------------------------


class Recorder(ConsumerRebalanceListener):
    """Records every listener call, with the member's assignment at that moment."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.events.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: Any) -> None:
        self.events.append(("lost", frozenset(lost)))

    def calls(self, kind: str) -> list[frozenset[TopicPartition]]:
        return [parts for name, parts in self.events if name == kind]


class Member:
    """One group member and the poll loop that keeps it in the group."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: Iterable[str],
        *,
        strategy: str = "range",
        instance_id: str | None = None,
        session_timeout_ms: int = 6000,
        max_poll_interval_ms: int = 30000,
        enable_auto_commit: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        self.client = KafkaClient(bootstrap)
        self.subscription = SubscriptionState("earliest")
        self.listener = Recorder(self)
        self.subscription.subscribe(list(topics), listener=self.listener)
        self.coordinator = ConsumerCoordinator.for_client(
            self.client,
            self.subscription,
            group_id=group,
            group_instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=200,
            rebalance_timeout_ms=8000,
            max_poll_interval_ms=max_poll_interval_ms,
            retry_backoff_ms=50,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=200,
            assignors=resolve_assignors(strategy),
        )
        self.error: BaseException | None = None
        self.polling = True
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Member:
        await self.client.start()
        await self.coordinator.start()
        self._task = asyncio.get_running_loop().create_task(self._poll_loop())
        return self

    async def _poll_loop(self) -> None:
        while True:
            if self.polling:
                try:
                    await self.coordinator.ensure_active_group()
                except Exception as exc:
                    self.error = exc
                    return
                self.coordinator.record_poll()
            await asyncio.sleep(0.05)

    def assignment(self) -> set[TopicPartition]:
        return self.subscription.assigned_partitions()

    @property
    def stable(self) -> bool:
        return self.coordinator.state == MemberState.STABLE and not self.coordinator.need_rejoin()

    async def stop(self, *, leave: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            await self.coordinator.close(leave=leave)
        finally:
            await self.client.close()


@pytest_asyncio.fixture
async def members() -> AsyncIterator[Callable[..., Any]]:
    """``await members(bootstrap, group, topics, **options)`` starts a Member; all stop at the end."""
    started: list[Member] = []

    async def make(*args: Any, **kwargs: Any) -> Member:
        member = Member(*args, **kwargs)
        started.append(member)
        return await member.start()

    yield make
    await asyncio.gather(*(m.stop() for m in started if m._task is not None), return_exceptions=True)


async def settled(group: list[Member], partitions: Iterable[TopicPartition], timeout: float = 30) -> None:
    """Wait until every member is stable and the partitions are shared with no overlap or gap."""
    wanted = set(partitions)
    deadline = time.monotonic() + timeout
    while True:
        for member in group:
            if member.error is not None:
                raise member.error
        assignments = [m.assignment() for m in group]
        union = set().union(*assignments)
        overlap = sum(len(a) for a in assignments) != len(union)
        if all(m.stable for m in group) and union == wanted and not overlap:
            generations = {m.coordinator.generation for m in group}
            if len(generations) == 1:
                return
        if time.monotonic() > deadline:
            state = [(m.coordinator.state, m.coordinator.generation, sorted(m.assignment())) for m in group]
            raise AssertionError(f"group did not settle: {state}")
        await asyncio.sleep(0.05)


# -- tests ----------------------------------------------------------------------------------------


async def test_members_share_partitions_and_rebalance_on_join_and_leave(
    bootstrap: str, members: Callable[..., Any]
) -> None:
    topic, group = unique("shared"), unique("group")
    partitions = await create_topic(bootstrap, topic, 6)
    first = await members(bootstrap, group, [topic])
    await settled([first], partitions)
    assert first.listener.events == [("assigned", frozenset(partitions))]

    second = await members(bootstrap, group, [topic])
    third = await members(bootstrap, group, [topic])
    await settled([first, second, third], partitions)
    # Eager (range): the first member revoked everything before rejoining, then got its share.
    kinds = [kind for kind, _ in first.listener.events]
    assert kinds[:3] == ["assigned", "revoked", "assigned"]
    assert first.listener.calls("revoked")[0] == frozenset(partitions)

    await third.stop()
    await settled([first, second], partitions)
    assert not first.listener.calls("lost") and not second.listener.calls("lost")


async def test_eager_revocation_commits_consumed_offsets_first(
    reference: str, members: Callable[..., Any]
) -> None:
    bootstrap = reference
    topic, group = unique("commit"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    first = await members(bootstrap, group, [topic], enable_auto_commit=True)
    await settled([first], partitions)
    for index, tp in enumerate(sorted(partitions)):
        first.subscription.seek(tp, 10 + index)
    committed_at_revoke: dict[TopicPartition, OffsetAndMetadata | None] = {}

    async def on_revoked(revoked: Any) -> None:
        committed_at_revoke.update(await first.coordinator.fetch_committed_offsets(revoked))

    first.listener.on_partitions_revoked = on_revoked  # type: ignore[method-assign]
    second = await members(bootstrap, group, [topic])
    await settled([first, second], partitions)
    # The listener saw the positions already committed: revocation commits before it runs.
    assert {tp: o.offset for tp, o in committed_at_revoke.items() if o is not None} == {
        tp: 10 + i for i, tp in enumerate(sorted(partitions))
    }


async def test_commit_from_a_stale_generation_fails(bootstrap: str, members: Callable[..., Any]) -> None:
    topic, group = unique("stale"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    first = await members(bootstrap, group, [topic])
    await settled([first], partitions)
    tp = sorted(first.assignment())[0]
    await first.coordinator.commit_offsets({tp: OffsetAndMetadata(5, "meta")})
    committed = (await first.coordinator.fetch_committed_offsets([tp]))[tp]
    assert committed is not None and (committed.offset, committed.metadata) == (5, "meta")
    real_generation = first.coordinator.generation
    first.coordinator.generation = real_generation + 10  # as if the member missed a rebalance
    with pytest.raises(CommitFailedError):
        await first.coordinator.commit_offsets({tp: OffsetAndMetadata(6)})
    # The member notices, reports the partitions lost and rejoins.
    await settled([first], partitions)
    assert first.listener.calls("lost")


async def test_max_poll_interval_leaves_the_group_and_the_next_poll_rejoins(
    reference: str, members: Callable[..., Any]
) -> None:
    bootstrap = reference
    topic, group = unique("slow"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    slow = await members(bootstrap, group, [topic], max_poll_interval_ms=1500)
    other = await members(bootstrap, group, [topic])
    await settled([slow, other], partitions)
    slow.polling = False
    # The slow member leaves: the other one gets every partition.
    deadline = time.monotonic() + 20
    while not (other.stable and other.assignment() == set(partitions)):
        assert time.monotonic() < deadline, "the slow member did not leave"
        await asyncio.sleep(0.05)
    slow.polling = True
    await settled([slow, other], partitions)
    assert slow.listener.calls("lost"), "partitions held past max_poll_interval_ms are lost"


async def test_listener_order_across_rebalances(reference: str, members: Callable[..., Any]) -> None:
    bootstrap = reference
    topic, group = unique("order"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    first = await members(bootstrap, group, [topic])
    second = await members(bootstrap, group, [topic])
    await settled([first, second], partitions)
    await second.stop()
    await settled([first], partitions)
    events = first.listener.events
    # Every revocation names what was assigned before it; assignments follow revocations.
    held: frozenset[TopicPartition] = frozenset()
    for kind, parts in events:
        if kind == "revoked":
            assert parts == held
            held = frozenset()
        elif kind == "assigned":
            assert not held, "eager: assigned without a revocation first"
            held = parts
    assert held == frozenset(partitions)


async def test_auto_commit_commits_positions_periodically(
    bootstrap: str, members: Callable[..., Any]
) -> None:
    topic, group = unique("autocommit"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    member = await members(bootstrap, group, [topic], enable_auto_commit=True)
    await settled([member], partitions)
    positions = {tp: 3 + i for i, tp in enumerate(sorted(partitions))}
    for tp, offset in positions.items():
        member.subscription.seek(tp, offset)
    deadline = time.monotonic() + 10
    while True:
        committed = await member.coordinator.fetch_committed_offsets(partitions)
        if {tp: o.offset for tp, o in committed.items() if o is not None} == positions:
            break
        assert time.monotonic() < deadline, f"auto-commit did not commit {positions}: {committed}"
        await asyncio.sleep(0.1)


async def test_dynamic_member_leaves_on_close(
    group_broker: BrokerProcess, members: Callable[..., Any]
) -> None:
    """LeaveGroup on close: the others rebalance at once, not after the session timeout."""
    bootstrap = group_broker.bootstrap
    topic, group = unique("leave"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    # A session of 45 s: without the LeaveGroup the rebalance waits that long, far beyond the
    # 20 s bound below, which leaves a loaded runner room for a slow rejoin.
    stays = await members(bootstrap, group, [topic], session_timeout_ms=45000)
    goes = await members(bootstrap, group, [topic], session_timeout_ms=45000)
    await settled([stays, goes], partitions)
    started = time.monotonic()
    await goes.stop()
    await settled([stays], partitions)
    assert time.monotonic() - started < 20


# -- static membership (reference broker, Apache Kafka) -----------------------------------------------


@pytest.mark.parametrize("role", ["follower", "leader"])
async def test_static_member_restart_keeps_its_partitions_without_a_rebalance(
    reference: str, members: Callable[..., Any], role: str
) -> None:
    """A static member restarting within its session timeout gets its partitions back and the
    others notice nothing (same generation, no listener call). A restarted leader is told to skip
    the assignment (JoinGroup v9, KIP-814)."""
    bootstrap = reference
    topic, group = unique("static"), unique("group")
    partitions = await create_topic(bootstrap, topic, 6)
    group_members = [
        await members(bootstrap, group, [topic], instance_id=f"instance-{i}", session_timeout_ms=6000)
        for i in range(3)
    ]
    await settled(group_members, partitions)
    generation = group_members[0].coordinator.generation
    before = {i: m.assignment() for i, m in enumerate(group_members)}
    rebalances = [m.coordinator.rebalances for m in group_members]
    listener_calls = [len(m.listener.events) for m in group_members]
    leader = next(
        i for i, m in enumerate(group_members) if m.coordinator.leader_id == m.coordinator.member_id
    )
    index = leader if role == "leader" else (leader + 1) % 3

    await group_members[index].stop()  # a static member does not leave on close
    restarted = await members(
        bootstrap, group, [topic], instance_id=f"instance-{index}", session_timeout_ms=6000
    )
    group_members[index] = restarted
    await settled(group_members, partitions)
    assert restarted.assignment() == before[index]
    for i in {0, 1, 2} - {index}:
        assert group_members[i].coordinator.generation == generation
        assert group_members[i].coordinator.rebalances == rebalances[i]
        assert group_members[i].assignment() == before[i]
        assert group_members[i].listener.events[listener_calls[i]:] == [], "the others saw no rebalance"


async def test_static_member_down_past_its_session_timeout_is_replaced(
    reference: str, members: Callable[..., Any]
) -> None:
    bootstrap = reference
    topic, group = unique("static-gone"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    stays = await members(bootstrap, group, [topic], instance_id="stays", session_timeout_ms=3000)
    goes = await members(bootstrap, group, [topic], instance_id="goes", session_timeout_ms=3000)
    await settled([stays, goes], partitions)
    generation = stays.coordinator.generation
    await goes.stop()
    await settled([stays], partitions, timeout=20)
    assert stays.coordinator.generation > generation


async def test_two_live_instances_with_one_id_fence_the_older(
    reference: str, members: Callable[..., Any]
) -> None:
    bootstrap = reference
    topic, group = unique("fenced"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    older = await members(bootstrap, group, [topic], instance_id="twin")
    await settled([older], partitions)
    newer = await members(bootstrap, group, [topic], instance_id="twin")
    await settled([newer], partitions)
    deadline = time.monotonic() + 10
    while older.error is None:
        assert time.monotonic() < deadline, "the older instance was not fenced"
        await asyncio.sleep(0.05)
    assert isinstance(older.error, FencedInstanceIdError)
    assert "twin" in str(older.error)
    with pytest.raises(FencedInstanceIdError):
        await older.coordinator.ensure_active_group()
    with pytest.raises(FencedInstanceIdError):
        await older.coordinator.commit_offsets({partitions[0]: OffsetAndMetadata(1)})


# -- cooperative rebalancing (KIP-429) --------------------------------------------------------------


async def test_cooperative_join_moves_only_what_must_move(
    reference: str, members: Callable[..., Any]
) -> None:
    bootstrap = reference
    topic, group = unique("coop"), unique("group")
    partitions = await create_topic(bootstrap, topic, 6)
    old = [await members(bootstrap, group, [topic], strategy="cooperative-sticky") for _ in range(2)]
    await settled(old, partitions)
    before = [m.assignment() for m in old]
    revocations_before = [len(m.listener.calls("revoked")) for m in old]
    # Sample the old members' fetchable partitions while the third member joins.
    samples: list[list[set[TopicPartition]]] = []
    sampling = True

    async def sample() -> None:
        while sampling:
            samples.append([_consumable(m) for m in old])
            await asyncio.sleep(0.01)

    sampler = asyncio.get_running_loop().create_task(sample())
    newcomer = await members(bootstrap, group, [topic], strategy="cooperative-sticky")
    await settled([*old, newcomer], partitions)
    sampling = False
    await sampler
    after = [m.assignment() for m in old]
    moved = set(newcomer.assignment())
    assert moved and len(moved) == len(partitions) // 3
    for i, member in enumerate(old):
        kept = before[i] & after[i]
        assert before[i] - after[i] <= moved, "a partition moved between two old members"
        # Only the partitions that moved were revoked, and nothing was lost.
        revoked: set[TopicPartition] = set().union(*member.listener.calls("revoked")[revocations_before[i]:])
        assert revoked == before[i] - after[i]
        assert not member.listener.calls("lost")
        # The partitions kept stayed assigned and fetchable the whole time.
        assert all(kept <= snapshot[i] for snapshot in samples), "a kept partition stopped being consumed"


def _consumable(member: Member) -> set[TopicPartition]:
    """Assigned partitions the fetcher may read: not paused, not being revoked (the test gives
    them no positions, so ``fetchable_partitions`` would be empty)."""
    return {
        tp for tp, state in member.subscription.items() if not state.revoking and not state.paused
    }


# -- coordinator failover ---------------------------------------------------------------------------


async def test_group_survives_a_broker_kill_and_restart(
    broker_factory: Callable[..., BrokerProcess], members: Callable[..., Any]
) -> None:
    """Heartbeats and joins find the coordinator again after it dies (lost connections, then
    COORDINATOR_LOAD_IN_PROGRESS while it reloads __consumer_offsets); committed offsets survive."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": 0, "num.partitions": 1})
    bootstrap = broker.bootstrap
    topic, group = unique("failover"), unique("group")
    partitions = await create_topic(bootstrap, topic, 4)
    group_members = [await members(bootstrap, group, [topic], session_timeout_ms=6000) for _ in range(2)]
    await settled(group_members, partitions)
    first = group_members[0]
    tp = sorted(first.assignment())[0]
    await first.coordinator.commit_offsets({tp: OffsetAndMetadata(42, "before the crash")})

    await asyncio.to_thread(broker.restart, kill=True)
    # A member joining after the restart: the others learn of it from their heartbeats.
    group_members.append(await members(bootstrap, group, [topic], session_timeout_ms=6000))
    await settled(group_members, partitions, timeout=40)
    owner = next(m for m in group_members if tp in m.assignment())
    committed = (await owner.coordinator.fetch_committed_offsets([tp]))[tp]
    assert committed is not None and (committed.offset, committed.metadata) == (42, "before the crash")


def broker_node(member: Member) -> int:
    """The node id of the (single) broker ``member`` talks to."""
    (node,) = member.client.cluster.brokers
    return node


async def test_ensure_active_group_gives_up_at_its_timeout_while_the_coordinator_is_down(
    broker_factory: Callable[..., BrokerProcess], members: Callable[..., Any]
) -> None:
    broker = broker_factory({"group.initial.rebalance.delay.ms": 0, "num.partitions": 1})
    bootstrap = broker.bootstrap
    topic, other, group = unique("down"), unique("down-other"), unique("group")
    partitions = await create_topic(bootstrap, topic, 2)
    more = await create_topic(bootstrap, other, 2)
    member = await members(bootstrap, group, [topic])
    await settled([member], partitions)
    member.polling = False
    await asyncio.to_thread(broker.kill)
    # Until the client has seen its connection close, the coordinator looks alive and an eager
    # rejoin revokes first (Java's client does the same); this test is about a coordinator known down.
    async with asyncio.timeout(5):
        while member.client.connection(broker_node(member)) is not None:
            await asyncio.sleep(0.01)
    # A new subscription needs a rejoin, which cannot happen while the broker is down.
    member.subscription.subscribe([topic, other], listener=member.listener)
    started = time.monotonic()
    assert await member.coordinator.ensure_active_group(timeout_ms=500) is False
    # About the 0.5 s asked; a timeout ignored waits until the broker is back, which it is not
    # before this returns, so 15 s only leaves a loaded runner room.
    assert time.monotonic() - started < 15
    assert member.assignment() == set(partitions), "nothing is revoked before the coordinator answers"
    await asyncio.to_thread(broker.start)
    assert await member.coordinator.ensure_active_group() is True
    assert member.assignment() == set(partitions) | set(more)


async def test_leader_rebalances_when_a_subscribed_topic_appears(
    reference: str, members: Callable[..., Any]
) -> None:
    """``later`` does not exist when the leader first assigns; the leader's client then asks for
    its metadata (which creates it, as the broker auto-creates topics), sees the partition count
    change, and rebalances the group so its partition is handed out."""
    bootstrap = reference
    topic, later, group = unique("exists"), unique("later"), unique("group")
    partitions = await create_topic(bootstrap, topic, 2)
    first = await members(bootstrap, group, [topic, later])
    second = await members(bootstrap, group, [topic, later])
    await settled([first, second], [*partitions, TopicPartition(later, 0)])


async def test_a_connection_lost_under_a_flexible_join_keeps_the_flexible_versions(
    broker_factory: Callable[..., BrokerProcess], members: Callable[..., Any]
) -> None:
    # A network blip under a JoinGroup (the coordinator holds it for the initial rebalance delay)
    # must not make the member speak the non-flexible group versions to a real broker for good.
    broker = broker_factory({"group.initial.rebalance.delay.ms": 2000})
    topic, group = unique("blip"), unique("group")
    partitions = await create_topic(broker.bootstrap, topic, 2)
    member = await members(broker.bootstrap, group, [topic])
    node = await member.coordinator.channel.coordinator()
    async with asyncio.timeout(10):
        while True:
            conn = member.client.connection(coordinator_node_id(node))
            if conn is not None and conn.in_flight:
                break
            await asyncio.sleep(0.001)
    conn.close(KafkaConnectionError("connection cut by the test"))
    await settled([member], partitions)
    assert not member.coordinator.channel.fallback.non_flexible(node)
