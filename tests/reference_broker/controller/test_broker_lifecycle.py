"""A broker's lifecycle against the real controller service: registration, heartbeats, unfencing
once its metadata reaches its registration, registering again after being dropped, and
controlled shutdown. The controller runs over the one-voter stand-in log of
``test_controller_service``; requests reach it through a transport stand-in that hands each
message to the controller's handler, as the controller listener would."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from reference_broker.cluster.broker_lifecycle import (
    BrokerLifecycle,
    ControllerChannel,
    ControllerProducerIds,
)
from reference_broker.controller.handlers import brokers as broker_apis
from reference_broker.controller.handlers import topics as topic_apis
from reference_broker.controller.service import ControllerService
from reference_broker.controller.settings import ControllerSettings
from reference_broker.metadata.loader import MetadataLoader
from reference_broker.network.peer import PeerChannels, PeerConnectionError
from sdk.protocol.errors import CoordinatorLoadInProgressError, ErrorCode
from sdk.protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
)
from tests.reference_broker.controller.test_controller_service import OneVoterLog, wait_for

pytestmark = pytest.mark.unit


class DirectConnection:
    """Hands a request to the controller node's handler in this process."""

    def __init__(self, node: Any):
        self.node = node

    async def send(self, request: Any, *, version: int | None = None, timeout_s: float | None = None) -> Any:
        ctx = SimpleNamespace(api_version=0)
        if isinstance(request, BrokerRegistrationRequest):
            return await broker_apis.broker_registration(self.node, ctx, request)
        if isinstance(request, BrokerHeartbeatRequest):
            return await broker_apis.broker_heartbeat(self.node, ctx, request)
        if isinstance(request, AllocateProducerIdsRequest):
            return await broker_apis.allocate_producer_ids(self.node, ctx, request)
        raise AssertionError(f"unexpected {type(request).__name__}")

    async def close(self) -> None:
        pass


async def test_a_broker_registers_is_unfenced_when_caught_up_and_registers_again() -> None:
    log = OneVoterLog()
    controller_node = SimpleNamespace(
        controller=ControllerService(log, ControllerSettings(node_id=1, cluster_id="c"))
    )
    broker_loader = MetadataLoader()
    log.register(broker_loader)
    publish = asyncio.Event()
    publish.set()
    log.elect(1)
    await wait_for(lambda: controller_node.controller.is_active)
    channels = PeerChannels("test", factory=lambda *a, **k: DirectConnection(controller_node))
    channel = ControllerChannel({1: ("127.0.0.1", 1)}, lambda: 1, channels)
    listener = SimpleNamespace(
        name="PLAINTEXT", security_protocol="PLAINTEXT", advertised=lambda: ("127.0.0.2", 9092)
    )
    lifecycle = BrokerLifecycle(
        2,
        "c",
        channel,
        listeners=[listener],
        rack="r1",
        heartbeat_interval_ms=20,
        metadata_offset=lambda: broker_loader.image.offset,
    )
    await lifecycle.start()
    try:
        async with asyncio.timeout(5):
            await lifecycle.unfenced.wait()
        image = controller_node.controller.core.committed
        assert not image.brokers[2].fenced and image.brokers[2].rack == "r1"
        assert broker_loader.image.offset >= lifecycle.broker_epoch
        first_epoch = lifecycle.broker_epoch
        core = controller_node.controller.core

        # producer ids come from the controller's blocks: two brokers never share one
        first, second = ControllerProducerIds(channel, lifecycle), ControllerProducerIds(channel, lifecycle)
        with pytest.raises(CoordinatorLoadInProgressError):
            first.next_id()  # no block yet: clients retry
        second.prefetch()
        await wait_for(lambda: len(first._blocks) == 1 and len(second._blocks) == 1)
        ids = [first.next_id() for _ in range(1000)]  # the whole first block; the next is asked for
        await wait_for(lambda: any(block[0] < block[1] for block in first._blocks))
        ids += [first.next_id() for _ in range(500)] + [second.next_id() for _ in range(10)]
        assert len(set(ids)) == len(ids)
        assert core.committed.next_producer_id >= 3000
        await first.stop()
        await second.stop()

        # fenced by an expired session, the broker's next heartbeat (caught up) unfences it
        core.cluster.last_contact[2] = -1e9
        assert await controller_node.controller.submit(core.fence_stale_brokers) == 2
        await wait_for(lambda: not core.committed.brokers[2].fenced)

        # an epoch the controller does not know (STALE_BROKER_EPOCH): the broker registers again,
        # and as the same incarnation it keeps its registered epoch
        lifecycle.broker_epoch = first_epoch - 1
        await wait_for(lambda: lifecycle.broker_epoch == first_epoch and not lifecycle.fenced)
        assert core.committed.brokers[2].epoch == first_epoch

        assert await lifecycle.controlled_shutdown(timeout_s=5)
        assert core.committed.brokers[2].fenced
    finally:
        await lifecycle.stop()
        await controller_node.controller.stop()


class TopicsConnection:
    """Hands CreateTopics to a controller node's handler in this process."""

    def __init__(self, node: Any):
        self.node = node

    async def send(self, request: Any, *, version: int | None = None, timeout_s: float | None = None) -> Any:
        return await topic_apis.create_topics(self.node, SimpleNamespace(api_version=7), request)

    async def close(self) -> None:
        pass


async def test_a_per_topic_not_controller_answer_is_sent_again_to_the_active_controller() -> None:
    """An inactive voter answers CreateTopics with NOT_CONTROLLER in each topic's result, not at
    the top: the channel must still look further, as librdkafka's admin does not retry it."""
    log = OneVoterLog()
    active = SimpleNamespace(controller=ControllerService(log, ControllerSettings(node_id=1, cluster_id="c")))
    inactive = SimpleNamespace(controller=None)
    log.elect(1)
    await wait_for(lambda: active.controller.is_active)
    nodes = {("127.0.0.1", 1): active, ("127.0.0.1", 2): inactive}
    channels = PeerChannels("test", factory=lambda host, port, **_: TopicsConnection(nodes[(host, port)]))
    # no leader known: the first guess is voter 2, the inactive one
    channel = ControllerChannel({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)}, lambda: None, channels)
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=1)],
        timeout_ms=5000,
    )
    try:
        response = await channel.send(request, timeout_s=5)
        [topic] = response.topics
        # no broker is registered, so the active controller refuses the placement itself
        assert topic.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, topic
    finally:
        await active.controller.stop()


class SilentConnection:
    """A controller that stopped answering (SIGSTOPped, cut off): requests wait forever."""

    async def send(self, request: Any, *, version: int | None = None, timeout_s: float | None = None) -> Any:
        await asyncio.sleep(timeout_s or 60)
        raise PeerConnectionError("timed out")

    async def close(self) -> None:
        pass


async def test_a_heartbeat_waiting_on_a_silent_controller_goes_to_the_next_leader_at_once() -> None:
    """The quorum elects a new leader within its election timeout; a heartbeat held for its whole
    timeout by the old one would let the new controller's session of the broker expire."""
    log = OneVoterLog()
    active = SimpleNamespace(controller=ControllerService(log, ControllerSettings(node_id=1, cluster_id="c")))
    log.elect(1)
    await wait_for(lambda: active.controller.is_active)
    connections = {1: DirectConnection(active), 2: SilentConnection()}
    channels = PeerChannels("test", factory=lambda host, port, **_: connections[port])
    leader = {"id": 2}
    channel = ControllerChannel({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)}, lambda: leader["id"], channels)
    heartbeat = BrokerHeartbeatRequest(broker_id=3, broker_epoch=7, current_metadata_offset=7)
    loop = asyncio.get_running_loop()
    try:
        sent = loop.create_task(channel.send(heartbeat, timeout_s=30))
        await asyncio.sleep(0.3)
        assert not sent.done()  # waiting on the silent node 2
        leader["id"] = 1  # the quorum elected node 1
        moved = loop.time()
        async with asyncio.timeout(2):
            response = await sent
        # the active controller's verdict (it knows no broker 3), within the leader checks' period
        assert response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED, response
        assert loop.time() - moved < 1.0
    finally:
        await active.controller.stop()
