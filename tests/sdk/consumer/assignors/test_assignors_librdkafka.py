"""Our assignors in one group with librdkafka's (confluent-kafka), on librdkafka's mock cluster.

A bare group member speaks JoinGroup/SyncGroup/Heartbeat itself, so the test decides which side
leads: the mock elects the static member with the lowest group.instance.id. When we lead, our
assignor reads librdkafka's subscription bytes (ConsumerProtocolSubscription v3 with its owned
partitions and generation), librdkafka must accept what we hand it, and for the deterministic
assignors the result is what librdkafka computes for the same group. When librdkafka leads, its
share must be exactly what ours computes (static members ordered by group.instance.id, KIP-345)
or, for cooperative-sticky, the balanced half it kept.

The mock finishes a SyncGroup round as soon as the leader's SyncGroup arrives and answers a later
follower SyncGroup with INVALID_REQUEST and a null assignment (a real broker waits for it), so
when librdkafka leads our member usually misses its own assignment: only librdkafka's share is
checked then.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
import uuid
from typing import Any

import confluent_kafka
import pytest

from sdk.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    ConsumerPartitionAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    resolve_assignors,
)
from sdk.consumer.assignors.validation import cooperative_violations
from sdk.protocol import messages as m
from sdk.protocol.errors import ErrorCode
from sdk.testing.librdkafka_mock import LibrdkafkaMockCluster

pytestmark = pytest.mark.timeout(90)

COUNTS = {"a": 5, "b": 3}
EVERYTHING = {TopicPartition(t, p) for t, n in COUNTS.items() for p in range(n)}
SESSION_TIMEOUT_MS = 2500
THEIR_INSTANCE = "instance-m"
# The mock's group coordinator fails the flexible versions of the group APIs: use the last
# non-flexible ones (what sdk.consumer.group_channel falls back to as well).
JOIN_V, SYNC_V, HEARTBEAT_V = 5, 3, 3
REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.MEMBER_ID_REQUIRED
INVALID_REQUEST = ErrorCode.INVALID_REQUEST


class TheirMember:
    """A confluent-kafka consumer polling in a thread; its assignment from the rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, strategy: str) -> None:
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": THEIR_INSTANCE,
            "partition.assignment.strategy": strategy, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 100, "enable.auto.commit": False, "log_level": 0,
        })
        self.lock = threading.Lock()
        self.assigned: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        got = {TopicPartition(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.assigned = self.assigned | got if self.cooperative else got

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {TopicPartition(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.assigned = self.assigned - gone if self.cooperative else set()

    def _run(self) -> None:
        self.consumer.subscribe(sorted(COUNTS), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        while not self._stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()

    def start(self) -> TheirMember:
        self._thread.start()
        return self

    def assignment(self) -> set[TopicPartition]:
        with self.lock:
            return set(self.assigned)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


class BareMember:
    """A group member reduced to the protocol: join, (lead,) sync, heartbeat."""

    def __init__(self, client: KafkaClient, group: str, instance: str, assignor: ConsumerPartitionAssignor):
        self.client, self.group, self.instance, self.assignor = client, group, instance, assignor
        self.member_id = ""
        self.generation = -1
        self.owned: list[TopicPartition] = []
        self.seen_subscriptions: list[dict[str, Subscription]] = []
        self.leader_id = ""
        self.coordinator: int | None = None

    async def _send(self, request: Any, version: int) -> Any:
        if self.coordinator is None:
            found = await self.client.send_to_any(m.FindCoordinatorRequest(key=self.group, key_type=0), 2)
            assert found.error_code == 0, found
            self.coordinator = found.node_id
        conn = await self.client.get_connection(self.coordinator)
        return await conn.request(request, version, timeout_ms=20000)

    async def join_and_sync(self) -> set[TopicPartition]:
        """One rebalance round; returns the partitions this member gave up."""
        while True:
            subscription = Subscription(
                sorted(COUNTS), self.assignor.subscription_user_data(set(COUNTS)), self.owned, self.generation
            )
            protocol = m.JoinGroupRequest.JoinGroupRequestProtocol(
                name=self.assignor.name, metadata=encode_subscription(subscription)
            )
            join = await self._send(m.JoinGroupRequest(
                group_id=self.group, session_timeout_ms=SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=SESSION_TIMEOUT_MS, member_id=self.member_id,
                group_instance_id=self.instance, protocol_type="consumer",
                protocols=[protocol],
            ), JOIN_V)
            if join.error_code == MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code == REBALANCE_IN_PROGRESS:
                continue
            assert join.error_code == 0, join
            break
        self.member_id, self.generation, self.leader_id = join.member_id, join.generation_id, join.leader
        assert join.protocol_name == self.assignor.name
        assignments: dict[str, bytes] = {}
        if join.leader == self.member_id:
            subscriptions = {
                member.member_id: decode_subscription(bytes(member.metadata)) for member in join.members
            }
            self.seen_subscriptions.append(subscriptions)
            instances = {member.member_id: member.group_instance_id for member in join.members}
            result = self.assignor.assign(COUNTS, subscriptions, instances)
            if self.assignor.name == "cooperative-sticky":
                assert cooperative_violations(subscriptions, result) == set()
            assignments = {member: encode_assignment(a) for member, a in result.items()}
        sync = await self._send(m.SyncGroupRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance,
            assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=k, assignment=v)
                         for k, v in assignments.items()],
        ), SYNC_V)
        if sync.error_code == INVALID_REQUEST:
            # The mock's late-follower answer (see the module docstring; its null assignment
            # reads as empty).
            assert join.leader != self.member_id and sync.assignment == b""
            self.owned = []
            return set()
        if sync.error_code == REBALANCE_IN_PROGRESS:
            return set()
        assert sync.error_code == 0, sync
        assignment = decode_assignment(bytes(sync.assignment)) if sync.assignment else Assignment([])
        self.assignor.on_assignment(assignment, self.generation)
        given_up = set(self.owned) - set(assignment.partitions)
        self.owned = list(assignment.partitions)
        return given_up

    async def heartbeat(self) -> int:
        response = await self._send(m.HeartbeatRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance,
        ), HEARTBEAT_V)
        return int(response.error_code)

    async def leave(self) -> None:
        await self._send(m.LeaveGroupRequest(group_id=self.group, member_id=self.member_id), 0)


def _quick_first_join(mock: LibrdkafkaMockCluster) -> None:
    """Drop the mock's 3 s group.initial.rebalance.delay.ms (the mock object exposes no setter)."""
    lib = mock._lib
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mock._cluster, 0)


def _shared(mine: set[TopicPartition], their: set[TopicPartition]) -> bool:
    return mine | their == EVERYTHING and not mine & their and bool(mine) and bool(their)


async def _until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _settle(ours: BareMember, settled: Any, timeout: float = 40) -> None:
    """Take part in rebalances until ``settled()`` holds steadily for 1 s."""
    deadline = time.monotonic() + timeout
    rejoin = True
    since: float | None = None
    while True:
        assert time.monotonic() < deadline, f"not settled: ours {sorted(ours.owned)}"
        if rejoin:
            # Cooperative members rejoin after giving partitions up, as KIP-429 asks.
            rejoin = bool(await ours.join_and_sync()) and ours.assignor.name == "cooperative-sticky"
            since = None
            continue
        if await ours.heartbeat() == REBALANCE_IN_PROGRESS:
            rejoin = True
            continue
        if settled():
            since = since or time.monotonic()
            if time.monotonic() - since >= 1.0:
                return
        else:
            since = None
        await asyncio.sleep(0.1)


def _expected(
    assignor: ConsumerPartitionAssignor, ours: str, theirs: str, our_instance: str
) -> dict[str, set[TopicPartition]]:
    """What a deterministic assignor gives the two static members."""
    subscriptions = {ours: Subscription(sorted(COUNTS)), theirs: Subscription(sorted(COUNTS))}
    result = assignor.assign(COUNTS, subscriptions, {ours: our_instance, theirs: THEIR_INSTANCE})
    return {member: set(a.partitions) for member, a in result.items()}


@pytest.mark.parametrize(
    ("strategy", "we_lead"),
    [("range", False), ("roundrobin", True), ("roundrobin", False), ("cooperative-sticky", True),
     ("cooperative-sticky", False)],
)
async def test_mixed_group_with_librdkafka(strategy: str, we_lead: bool) -> None:
    with LibrdkafkaMockCluster(1) as mock:
        _quick_first_join(mock)
        for topic, count in COUNTS.items():
            mock.create_topic(topic, count)
        group = f"assignors-{uuid.uuid4().hex[:8]}"
        theirs = TheirMember(mock.bootstrap, group, strategy).start()
        client = KafkaClient(mock.bootstrap)
        await client.start()
        our_instance = "instance-a" if we_lead else "instance-z"
        ours = BareMember(client, group, our_instance, resolve_assignors(strategy)[0])
        try:
            # librdkafka alone first: it owns everything when we join.
            await _until(lambda: theirs.assignment() == EVERYTHING, 20, "librdkafka never got the partitions")
            if we_lead:
                await _settle(ours, lambda: _shared(set(ours.owned), theirs.assignment()))
                assert ours.leader_id == ours.member_id
                subscriptions = ours.seen_subscriptions[-1]
                their_id = next(iter(subscriptions.keys() - {ours.member_id}))
                assert subscriptions[their_id].topics == sorted(COUNTS)
                if strategy == "cooperative-sticky":
                    # librdkafka reported the partitions it owned and its generation.
                    first = ours.seen_subscriptions[0][their_id]
                    assert set(first.owned_partitions) == EVERYTHING and first.generation_id >= 1
                    assert len(ours.owned) == len(theirs.assignment()) == 4
                else:
                    expected = _expected(ours.assignor, ours.member_id, their_id, our_instance)
                    assert set(ours.owned) == expected[ours.member_id]
                    assert theirs.assignment() == expected[their_id]
            elif strategy == "cooperative-sticky":
                # librdkafka leads: it keeps half of what it had and gives up the rest.
                await _settle(ours, lambda: len(theirs.assignment()) == 4)
                assert ours.leader_id != ours.member_id
            else:
                def as_expected() -> bool:
                    if not ours.leader_id or ours.leader_id == ours.member_id:
                        return False
                    expected = _expected(ours.assignor, ours.member_id, ours.leader_id, our_instance)
                    return theirs.assignment() == expected[ours.leader_id]

                await _settle(ours, as_expected)
        finally:
            await asyncio.to_thread(theirs.stop)
            await client.close()
