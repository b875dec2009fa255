"""AlterPartition over the wire to a running node's controller listener: a new ISR member must be
registered, unfenced and named with the epoch of its current registration (KIP-903), or the
partition is answered INELIGIBLE_REPLICA and its ISR stays; a requester whose own epoch is not its
registration's is answered STALE_BROKER_EPOCH for the whole request.

The test plays two brokers, 10 and 11, itself: it registers them with the controller of a one-node
cluster, keeps them unfenced with its own heartbeats (or stops, to have one fenced), and leads a
partition placed on them, so it knows every broker epoch the controller gave out."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.controller.supported_features import SUPPORTED_FEATURES
from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterFactory, ClusterProcess
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow]

LEADER, FOLLOWER = 10, 11
TOPIC = "eligibility"
HEARTBEAT_S = 0.2
SESSION_MS = 2000


@pytest.fixture
def cluster(reference_cluster: ClusterFactory) -> Iterator[ClusterProcess]:
    yield reference_cluster(1, {"broker.session.timeout.ms": SESSION_MS})


class FakeBrokers:
    """Brokers registered by the test over one connection to the controller listener."""

    def __init__(self, conn: PeerConnection, cluster_id: str) -> None:
        self.conn = conn
        self.cluster_id = cluster_id
        #: broker id -> the epoch its heartbeats carry (absent: not heartbeating)
        self.beating: dict[int, int] = {}
        self.fenced: dict[int, bool] = {}

    async def register(self, broker_id: int) -> int:
        """A new incarnation of ``broker_id``; its broker epoch (heartbeats start with it)."""
        response: Any = await self.conn.send(BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=self.cluster_id, incarnation_id=uuid.uuid4(),
            listeners=[BrokerRegistrationRequest.Listener(
                name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0)],
            features=[BrokerRegistrationRequest.Feature(
                name=name, min_supported_version=low, max_supported_version=high)
                for name, (low, high) in SUPPORTED_FEATURES.items()],
            rack=None, previous_broker_epoch=-1))
        assert response.error_code == ErrorCode.NONE, response
        self.beating[broker_id] = response.broker_epoch
        self.fenced[broker_id] = True
        return int(response.broker_epoch)

    async def heartbeat_forever(self) -> None:
        while True:
            for broker_id, epoch in list(self.beating.items()):
                response: Any = await self.conn.send(BrokerHeartbeatRequest(
                    broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=2**62,
                    want_fence=False, want_shut_down=False))
                if response.error_code == ErrorCode.NONE and self.beating.get(broker_id) == epoch:
                    self.fenced[broker_id] = response.is_fenced
            await asyncio.sleep(HEARTBEAT_S)

    async def wait(self, broker_id: int, *, fenced: bool, timeout_s: float = 30.0) -> None:
        async def until() -> None:
            while self.fenced.get(broker_id) != fenced:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(until(), timeout_s)


def alter_isr(requester_epoch: int, topic_id: uuid.UUID, leader_epoch: int, partition_epoch: int,
              isr: list[tuple[int, int]]) -> AlterPartitionRequest:
    return AlterPartitionRequest(
        broker_id=LEADER, broker_epoch=requester_epoch,
        topics=[AlterPartitionRequest.TopicData(topic_id=topic_id, partitions=[
            AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=e)
                                     for b, e in isr])])])


async def fenced_until_heard(cluster: ClusterProcess, broker_id: int) -> bool:
    """Whether ``broker_id`` is missing from the node's Metadata brokers (fenced or unknown)."""
    brokers = await asyncio.to_thread(cluster.registered_brokers, via=1)
    return broker_id not in brokers


async def scenario(cluster: ClusterProcess) -> None:
    node = cluster.node(1)
    conn = PeerConnection(node.host, node.controller_port, client_id="kip-903-test",
                          request_timeout_s=10)
    brokers = FakeBrokers(conn, cluster.cluster_id)
    beats: asyncio.Task[None] | None = None
    try:
        leader_epoch = await brokers.register(LEADER)
        follower_epoch = await brokers.register(FOLLOWER)
        beats = asyncio.get_running_loop().create_task(brokers.heartbeat_forever())
        await brokers.wait(LEADER, fenced=False)
        await brokers.wait(FOLLOWER, fenced=False)
        assert conn.version_for(AlterPartitionRequest.API_KEY) >= 3  # the controller takes epochs

        created: Any = await conn.send(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=-1, replication_factor=-1,
            assignments=[CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment(
                partition_index=0, broker_ids=[LEADER, FOLLOWER])])], timeout_ms=10_000))
        [topic] = created.topics
        assert topic.error_code == ErrorCode.NONE, topic
        topic_id = topic.topic_id

        async def alter(isr: list[tuple[int, int]], partition_epoch: int,
                        requester_epoch: int = leader_epoch) -> Any:
            response: Any = await conn.send(alter_isr(requester_epoch, topic_id, 0, partition_epoch, isr))
            if response.error_code != ErrorCode.NONE:
                return response
            return response.topics[0].partitions[0]

        # Current epochs: accepted (shrink to the leader, then expand again).
        shrunk = await alter([(LEADER, leader_epoch)], 0)
        assert (shrunk.error_code, shrunk.isr) == (ErrorCode.NONE, [LEADER]), shrunk
        grown = await alter([(LEADER, leader_epoch), (FOLLOWER, follower_epoch)], shrunk.partition_epoch)
        assert (grown.error_code, sorted(grown.isr)) == (ErrorCode.NONE, [LEADER, FOLLOWER]), grown
        shrunk = await alter([(LEADER, leader_epoch)], grown.partition_epoch)
        assert shrunk.isr == [LEADER], shrunk
        partition_epoch = shrunk.partition_epoch

        # A fenced broker is refused, whatever epoch it is named with.
        del brokers.beating[FOLLOWER]
        deadline = asyncio.get_running_loop().time() + 30
        while not await fenced_until_heard(cluster, FOLLOWER):
            assert asyncio.get_running_loop().time() < deadline, "broker 11 was never fenced"
            await asyncio.sleep(0.1)
        for named in (follower_epoch, -1):
            refused = await alter([(LEADER, leader_epoch), (FOLLOWER, named)], partition_epoch)
            assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA, (named, refused)
            assert refused.isr == [], refused

        # Re-registered (a new incarnation, say after a disk loss): its old epoch is stale.
        new_follower_epoch = await brokers.register(FOLLOWER)
        assert new_follower_epoch > follower_epoch
        await brokers.wait(FOLLOWER, fenced=False)
        stale = await alter([(LEADER, leader_epoch), (FOLLOWER, follower_epoch)], partition_epoch)
        assert stale.error_code == ErrorCode.INELIGIBLE_REPLICA, stale
        still = await asyncio.to_thread(cluster.partition, TOPIC, 0)
        assert list(still.isr_nodes) == [LEADER], still

        # The requester's own stale epoch fails the whole request.
        whole = await alter([(LEADER, leader_epoch), (FOLLOWER, new_follower_epoch)], partition_epoch,
                            requester_epoch=leader_epoch - 1)
        assert whole.error_code == ErrorCode.STALE_BROKER_EPOCH, whole

        # The current epoch is accepted.
        accepted = await alter([(LEADER, leader_epoch), (FOLLOWER, new_follower_epoch)], partition_epoch)
        assert accepted.error_code == ErrorCode.NONE, accepted
        assert sorted(accepted.isr) == [LEADER, FOLLOWER]
        assert accepted.partition_epoch > partition_epoch
    finally:
        if beats is not None:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
        await conn.close()


def test_alter_partition_refuses_fenced_and_stale_epoch_isr_members(cluster: ClusterProcess) -> None:
    asyncio.run(scenario(cluster))
