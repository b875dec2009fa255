"""Mixed groups: our ConsumerCoordinator with confluent-kafka (librdkafka), aiokafka or kafka-python
consumers in one group, with the same assignor, on librdkafka's mock cluster and on the reference
broker. Whoever the broker elects leader computes the assignment for everyone, so this checks that
each side reads the others' subscriptions and assignments (ConsumerProtocol v0-v3) and follows the
same protocol."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import confluent_kafka
import pytest
import pytest_asyncio

from reference_broker.testing import BrokerProcess
from sdk.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import resolve_assignors
from sdk.consumer.consumer_coordinator import ConsumerCoordinator, MemberState
from sdk.consumer.listener import ConsumerRebalanceListener
from sdk.consumer.subscription import SubscriptionState
from sdk.protocol import messages

pytestmark = pytest.mark.timeout(120)


async def create_topic(bootstrap: str, name: str, partitions: int) -> set[TopicPartition]:
    """``name`` with ``partitions`` partitions on the reference broker (the mock auto-creates 4)."""
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        if len(client.cluster.brokers) == 1:
            response = await client.send_to_any(
                messages.CreateTopicsRequest(
                    topics=[
                        messages.CreateTopicsRequest.CreatableTopic(
                            name=name, num_partitions=partitions, replication_factor=1
                        )
                    ],
                    timeout_ms=10000,
                )
            )
            assert response.topics[0].error_code == 0, response
        client.add_topic(name)
        deadline = time.monotonic() + 10
        while not client.cluster.partitions_for(name):
            assert time.monotonic() < deadline, f"topic {name} did not appear"
            await asyncio.sleep(0.05)
            await client.refresh_metadata()
        return {TopicPartition(name, p) for p in client.cluster.partitions_for(name) or ()}
    finally:
        await client.close()


class Tracker(ConsumerRebalanceListener):
    """Our member's listener: what it revoked (to check cooperative moves)."""

    def __init__(self) -> None:
        self.revoked: list[frozenset[TopicPartition]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.revoked.append(frozenset(revoked))


#: The members' session timeout. librdkafka's mock cluster waits ``session.timeout.ms`` - 1 s for
#: more members to join before it elects a leader and up to ``session.timeout.ms`` for every
#: SyncGroup, in each rebalance: the mock case runs with ``MOCK_SESSION_TIMEOUT_MS``.
SESSION_TIMEOUT_MS = 6000
MOCK_SESSION_TIMEOUT_MS = 3000


class OurMember:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
    ) -> None:
        self.client = KafkaClient(bootstrap)
        self.subscription = SubscriptionState("earliest")
        self.listener = Tracker()
        self.subscription.subscribe([topic], listener=self.listener)
        self.coordinator = ConsumerCoordinator.for_client(
            self.client, self.subscription, group_id=group, group_instance_id=None,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=200, rebalance_timeout_ms=8000,
            max_poll_interval_ms=30000, retry_backoff_ms=50, enable_auto_commit=False,
            auto_commit_interval_ms=1000, assignors=resolve_assignors(strategy),
        )
        self.error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> OurMember:
        await self.client.start()
        await self.coordinator.start()
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def _poll(self) -> None:
        while True:
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

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            await self.coordinator.close()
            await self.client.close()


class ThreadedMember:
    """A peer client's consumer polling in its own thread (``_run``), which keeps ``assigned``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.assigned: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> ThreadedMember:
        self._thread.start()
        return self

    def assignment(self) -> set[TopicPartition]:
        with self.lock:
            return set(self.assigned)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(30)


class TheirMember(ThreadedMember):
    """A confluent-kafka consumer polling in its own thread; its assignment from the callbacks."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
    ) -> None:
        super().__init__()
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": 200,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        })
        self.topic = topic
        self.revoked: list[frozenset[TopicPartition]] = []

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        got = {TopicPartition(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.assigned = self.assigned | got if self.cooperative else got

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = frozenset(TopicPartition(p.topic, p.partition) for p in partitions)
        with self.lock:
            self.revoked.append(gone)
            self.assigned = self.assigned - gone if self.cooperative else set()

    def _run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        while not self._stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()



class AiokafkaMember:
    """An aiokafka consumer (its own classic-protocol client in Python) polling in a task."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[strategy]
        self.consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, partition_assignment_strategy=(assignor,),
            session_timeout_ms=6000, heartbeat_interval_ms=200, enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> AiokafkaMember:
        await self.consumer.start()
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def _poll(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=100)

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            await self.consumer.stop()


class KafkaPythonMember(ThreadedMember):
    """A kafka-python consumer polling in its own thread; its assignment as it reports it."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        super().__init__()
        import kafka
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        assignors = {"range": RangePartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}
        assignor = assignors[strategy]
        self.consumer = kafka.KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, partition_assignment_strategy=(assignor,),
            session_timeout_ms=6000, heartbeat_interval_ms=200, enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(timeout_ms=50)
            with self.lock:
                self.assigned = {TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        self.consumer.close()



@pytest_asyncio.fixture
async def group() -> AsyncIterator[Callable[..., Any]]:
    started: list[Any] = []

    async def add(kind: str, *args: Any) -> Any:
        kinds: dict[str, Any] = {
            "ours": OurMember,
            "theirs": TheirMember,
            "aiokafka": AiokafkaMember,
            "kafka-python": KafkaPythonMember,
        }
        member = kinds[kind](*args)
        started.append(member)
        return member.start() if isinstance(member, ThreadedMember) else await member.start()

    yield add
    for member in started:
        if isinstance(member, ThreadedMember):
            await asyncio.to_thread(member.stop)
        else:
            await member.stop()


async def shared(members: list[Any], partitions: set[TopicPartition], timeout: float = 40) -> None:
    """Wait until the partitions are shared with no overlap and no gap for a whole second."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    while True:
        for member in members:
            if getattr(member, "error", None) is not None:
                raise member.error
        assignments = [m.assignment() for m in members]
        union = set().union(*assignments)
        ok = (
            union == partitions
            and sum(map(len, assignments)) == len(union)
            and all(a for a in assignments)
            and all(m.stable for m in members if isinstance(m, OurMember))
        )
        if ok:
            since = since or time.monotonic()
            if time.monotonic() - since >= 1.0:
                return
        else:
            since = None
        assert time.monotonic() < deadline, f"not shared: {[sorted(a) for a in assignments]}"
        await asyncio.sleep(0.05)


# Each rebalance costs seconds on the mock cluster (see MOCK_SESSION_TIMEOUT_MS): it runs the
# cooperative case only.
@pytest.mark.parametrize(
    ("bootstrap", "strategy"),
    [
        ("mock", "cooperative-sticky"),
        ("reference", "range"),
        ("reference", "cooperative-sticky"),
        pytest.param("apache", "range", marks=pytest.mark.apache_kafka),
        pytest.param("apache", "cooperative-sticky", marks=pytest.mark.apache_kafka),
    ],
    indirect=["bootstrap"],
)
async def test_mixed_group_shares_partitions_as_members_join_and_leave(
    bootstrap: str, strategy: str, group: Callable[..., Any], request: pytest.FixtureRequest
) -> None:
    topic, group_id = f"mixed-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    partitions = await create_topic(bootstrap, topic, 8)
    # The mock's classic groups can take several rebalance rounds to settle four members (it
    # answers a SyncGroup that comes late with INVALID_REQUEST, and that member joins again): it
    # gets longer to settle than our broker, and a shorter session timeout for shorter rounds.
    mock = request.node.callspec.params["bootstrap"] == "mock"
    settle = 90.0 if mock else 40.0
    session = MOCK_SESSION_TIMEOUT_MS if mock else SESSION_TIMEOUT_MS
    ours = await group("ours", bootstrap, group_id, topic, strategy, session)
    theirs = await group("theirs", bootstrap, group_id, topic, strategy, session)
    await shared([ours, theirs], partitions, settle)
    second_ours = await group("ours", bootstrap, group_id, topic, strategy, session)
    second_theirs = await group("theirs", bootstrap, group_id, topic, strategy, session)
    members = [ours, theirs, second_ours, second_theirs]
    await shared(members, partitions, settle)
    # One of each leaves: a confluent-kafka member and one of ours.
    await asyncio.gather(asyncio.to_thread(theirs.stop), second_ours.stop())
    await shared([ours, second_theirs], partitions, settle)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
async def test_mixed_group_with_aiokafka(
    group_broker: BrokerProcess, strategy: str, group: Callable[..., Any]
) -> None:
    """aiokafka's consumers and ours in one group on the reference broker (aiokafka has no
    cooperative protocol, so only eager assignors)."""
    bootstrap = group_broker.bootstrap
    topic, group_id = f"mixed-aio-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    partitions = await create_topic(bootstrap, topic, 6)
    ours = await group("ours", bootstrap, group_id, topic, strategy)
    theirs = await group("aiokafka", bootstrap, group_id, topic, strategy)
    await shared([ours, theirs], partitions)
    second = await group("ours", bootstrap, group_id, topic, strategy)
    await shared([ours, theirs, second], partitions)
    await theirs.stop()
    await shared([ours, second], partitions)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_mixed_group_with_kafka_python(
    group_broker: BrokerProcess, strategy: str, group: Callable[..., Any]
) -> None:
    """kafka-python's consumers (which also implement cooperative-sticky) and ours in one group."""
    bootstrap = group_broker.bootstrap
    topic, group_id = f"mixed-kp-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    partitions = await create_topic(bootstrap, topic, 6)
    ours = await group("ours", bootstrap, group_id, topic, strategy)
    theirs = await group("kafka-python", bootstrap, group_id, topic, strategy)
    await shared([ours, theirs], partitions)
    second = await group("ours", bootstrap, group_id, topic, strategy)
    await shared([ours, theirs, second], partitions)
    await asyncio.to_thread(theirs.stop)
    await shared([ours, second], partitions)
