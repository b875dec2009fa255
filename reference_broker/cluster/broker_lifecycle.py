"""A broker's membership in the cluster: Kafka's BrokerLifecycleManager and its channel to the
active controller (NodeToControllerChannelManager).

``ControllerChannel`` sends a request to the active controller: the raft leader when known,
otherwise each voter in turn; a NOT_CONTROLLER answer or a failed connection moves on to the next
candidate after a short backoff, until the request's deadline, and a request outstanding when the
quorum names another leader goes to that leader at once.

``BrokerLifecycle`` registers the broker (BrokerRegistration with its incarnation id, listeners,
rack and supported features: every feature of ``SUPPORTED_FEATURES``, as Kafka 4.1's brokers)
and then heartbeats every ``broker.heartbeat.interval.ms`` with the
offset of the metadata it has applied. It asks to stay fenced (``want_fence``) until the broker
has published metadata at least up to its own registration, so it is unfenced only when it can
serve what the image says it leads. A STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED answer (the
controller fenced and dropped it, or lost its registration) registers it again with its
previous epoch. ``controlled_shutdown`` heartbeats ``want_shut_down`` until the controller has
moved its leaderships away and says it may stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from reference_broker.controller.supported_features import SUPPORTED_FEATURES
from reference_broker.network.peer import PeerChannels, PeerConnectionError, PeerUnsupportedError
from reference_broker.replication.partition import IsrCommitted, IsrProposal
from sdk.protocol.errors import ErrorCode, make_error
from sdk.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    Message,
)

log = logging.getLogger("reference_broker.cluster")

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
RETRY_BACKOFF_S = 0.1
#: How often a request outstanding at a controller candidate looks whether the quorum has named
#: another leader meanwhile.
LEADER_CHECK_S = 0.05
_LEADER_MOVED: Any = object()


class ControllerUnavailableError(Exception):
    """No active controller answered before the deadline."""


def _not_controller(response: Message) -> bool:
    """Whether the controller that answered is not the active one: NOT_CONTROLLER at the top, or
    in every entry of the response's per-resource results (CreateTopics, DeleteTopics,
    CreatePartitions and the config APIs answer per topic or resource), so the request is sent
    again to the active controller instead of reaching a client that may not retry it."""
    if getattr(response, "error_code", ErrorCode.NONE) == ErrorCode.NOT_CONTROLLER:
        return True
    for field in type(response).FIELDS:
        if not field.array or field.struct is None:
            continue
        entries = getattr(response, field.name, None) or []
        codes = [getattr(entry, "error_code", None) for entry in entries]
        if codes and all(code == ErrorCode.NOT_CONTROLLER for code in codes):
            return True
    return False


class ControllerChannel:
    """Requests to whichever voter is the active controller."""

    def __init__(
        self,
        voters: dict[int, tuple[str, int]],
        leader: Callable[[], int | None],
        channels: PeerChannels,
    ):
        #: the raft client's live map (a dynamic quorum's voters change with the metadata log;
        #: until the log names them, the bootstrap servers under negative ids)
        self.voters = voters
        self.leader = leader
        self.channels = channels
        self._next_guess = 0

    def _candidate(self) -> int:
        for node_id, (host, port) in list(self.voters.items()):
            self.channels.update(node_id, host, port)  # no-op for a known address
        leader = self.leader()
        if leader is not None and leader in self.voters:
            return leader
        ids = sorted(self.voters)
        self._next_guess = (self._next_guess + 1) % len(ids)
        return ids[self._next_guess]

    async def send(
        self,
        request: Message,
        *,
        timeout_s: float = 30.0,
        unwrap: Callable[[Any], Any] | None = None,
    ) -> Any:
        """``request``'s answer from the active controller (any answer but NOT_CONTROLLER);
        ``unwrap`` turns each answer into the one looked at and returned (an Envelope's
        content: NOT_CONTROLLER is the forwarded request's answer, not the envelope's)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            node = self._candidate()
            remaining = deadline - loop.time()
            try:
                response = await self._answer_unless_leader_moves(
                    node, request, timeout_s=max(0.1, remaining))
                if response is _LEADER_MOVED:
                    if loop.time() >= deadline:
                        raise ControllerUnavailableError(
                            f"no active controller answered {type(request).__name__}")
                    continue  # at once to the new leader
                if unwrap is not None:
                    response = unwrap(response)
                if not _not_controller(response):
                    return response
            except (PeerConnectionError, PeerUnsupportedError) as exc:
                log.debug("controller candidate %d: %s", node, exc)
            if loop.time() + RETRY_BACKOFF_S >= deadline:
                raise ControllerUnavailableError(f"no active controller answered {type(request).__name__}")
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _answer_unless_leader_moves(self, node: int, request: Message, *, timeout_s: float) -> Any:
        """``node``'s answer to ``request``, or ``_LEADER_MOVED`` as soon as the quorum names
        another leader while it is outstanding. A controller that stopped answering (paused, cut
        off) is replaced within the election timeout, and a heartbeat still waiting on it for the
        request's whole timeout could let the new controller's session of this broker expire. The
        abandoned request runs on to its own timeout (cancelling it could leave its connection
        half set up); a stale controller's late answer is dropped."""
        attempt = asyncio.ensure_future(self.channels.send(node, request, timeout_s=timeout_s))
        try:
            while True:
                done, _ = await asyncio.wait({attempt}, timeout=LEADER_CHECK_S)
                if done:
                    return attempt.result()
                leader = self.leader()
                if leader is not None and leader != node and leader in self.voters:
                    log.debug("controller candidate %d: the quorum leader is now %d", node, leader)
                    attempt.add_done_callback(_drop_outcome)
                    return _LEADER_MOVED
        except asyncio.CancelledError:
            attempt.cancel()
            raise


def _drop_outcome(attempt: asyncio.Future[Any]) -> None:
    if not attempt.cancelled():
        attempt.exception()  # retrieved: an abandoned request's failure is expected


class BrokerLifecycle:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        channel: ControllerChannel,
        *,
        listeners: Sequence[Any],
        rack: str | None,
        heartbeat_interval_ms: int,
        metadata_offset: Callable[[], int],
        incarnation_id: uuid.UUID | None = None,
    ):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.channel = channel
        self.listeners = list(listeners)
        self.rack = rack
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.metadata_offset = metadata_offset
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.should_shut_down = False
        self._want_shut_down = False
        self._task: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        self.unfenced = asyncio.Event()
        #: Set by the first heartbeat answer saying the broker's metadata reached its registration
        #: (Kafka's initialCatchUpFuture); never cleared.
        self.initially_caught_up = asyncio.Event()

    def _registration(self) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=self.node_id,
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name=lst.name,
                    host=lst.advertised()[0],
                    port=lst.advertised()[1],
                    security_protocol=SECURITY_PROTOCOL_IDS[lst.security_protocol],
                )
                for lst in self.listeners
            ],
            features=[
                BrokerRegistrationRequest.Feature(name=name, min_supported_version=low,
                                                  max_supported_version=high)
                for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
            ],
            rack=self.rack,
            previous_broker_epoch=self.broker_epoch,
        )

    async def _register(self) -> None:
        while True:
            try:
                response: Any = await self.channel.send(
                    self._registration(), timeout_s=self.heartbeat_interval_s * 5
                )
            except ControllerUnavailableError as exc:
                log.info("broker %d: registration not answered yet: %s", self.node_id, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if response.error_code == ErrorCode.NONE:
                self.broker_epoch = response.broker_epoch
                self.fenced = True
                self.unfenced.clear()
                self.registered.set()
                log.info("broker %d registered with epoch %d", self.node_id, self.broker_epoch)
                return
            log.warning("broker %d: registration refused: %s", self.node_id, make_error(response.error_code))
            await asyncio.sleep(self.heartbeat_interval_s)

    def _heartbeat_request(self) -> BrokerHeartbeatRequest:
        offset = self.metadata_offset()
        return BrokerHeartbeatRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=offset,
            want_fence=offset < self.broker_epoch,
            want_shut_down=self._want_shut_down,
        )

    async def heartbeat_once(self) -> None:
        response: Any = await self.channel.send(
            self._heartbeat_request(), timeout_s=self.heartbeat_interval_s * 5
        )
        if response.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.warning(
                "broker %d: heartbeat answered %s, registering again",
                self.node_id,
                make_error(response.error_code),
            )
            self.registered.clear()
            await self._register()
            return
        if response.error_code != ErrorCode.NONE:
            log.warning("broker %d: heartbeat refused: %s", self.node_id, make_error(response.error_code))
            return
        was_fenced = self.fenced
        self.fenced = response.is_fenced
        self.caught_up = response.is_caught_up
        if self.caught_up:
            self.initially_caught_up.set()
        self.should_shut_down = response.should_shut_down
        if was_fenced and not self.fenced:
            log.info("broker %d unfenced", self.node_id)
            self.unfenced.set()
        elif self.fenced and not was_fenced:
            log.warning("broker %d was fenced by the controller", self.node_id)
            self.unfenced.clear()

    async def _run(self) -> None:
        await self._register()
        while True:
            try:
                await self.heartbeat_once()
            except ControllerUnavailableError as exc:
                log.info("broker %d: heartbeat not answered: %s", self.node_id, exc)
            await asyncio.sleep(self.heartbeat_interval_s)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away; True once it says to stop."""
        self._want_shut_down = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.should_shut_down and loop.time() < deadline and self.broker_epoch >= 0:
            with contextlib.suppress(ControllerUnavailableError):
                await self.heartbeat_once()
            if not self.should_shut_down:
                await asyncio.sleep(min(self.heartbeat_interval_s, 0.2))
        return self.should_shut_down

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class AlterPartitionSender:
    """The replication layer's ISR proposals sent to the controller as AlterPartition (v3+:
    ``new_isr_with_epochs`` carries each member's broker epoch as the leader knows it, so the
    controller refuses a member whose registration has changed since with INELIGIBLE_REPLICA)."""

    def __init__(
        self, channel: ControllerChannel, lifecycle: BrokerLifecycle, topic_id: Callable[[str], uuid.UUID]
    ):
        self.channel = channel
        self.lifecycle = lifecycle
        self.topic_id = topic_id

    async def __call__(self, proposal: IsrProposal) -> IsrCommitted:
        request = AlterPartitionRequest(
            broker_id=self.lifecycle.node_id,
            broker_epoch=self.lifecycle.broker_epoch,
            topics=[
                AlterPartitionRequest.TopicData(
                    topic_name=proposal.topic,
                    topic_id=self.topic_id(proposal.topic),
                    partitions=[
                        AlterPartitionRequest.PartitionData(
                            partition_index=proposal.partition,
                            leader_epoch=proposal.leader_epoch,
                            partition_epoch=proposal.partition_epoch,
                            new_isr=list(proposal.isr),
                            new_isr_with_epochs=[
                                AlterPartitionRequest.BrokerState(
                                    broker_id=b, broker_epoch=proposal.epoch_of(b))
                                for b in proposal.isr
                            ],
                        )
                    ],
                )
            ],
        )
        response: Any = await self.channel.send(request)
        if response.error_code != ErrorCode.NONE:
            raise make_error(response.error_code)
        part = response.topics[0].partitions[0]
        if part.error_code != ErrorCode.NONE:
            raise make_error(part.error_code)
        return IsrCommitted(
            leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch, isr=tuple(part.isr)
        )


def install_forwarding(registry: Any, apis: dict[int, Callable[[Any, int, int], Message | None]]) -> None:
    """Serve ``apis`` on a broker by forwarding each request to the active controller (Kafka
    brokers forward CreateTopics, DeleteTopics, CreatePartitions, ...); ``apis`` maps each key to
    its error-response builder, used when no controller answers in the request's time."""

    def forwarder(error: Callable[[Any, int, int], Message | None]) -> Callable[..., Any]:
        async def forward(broker: Any, ctx: Any, request: Any) -> Message | None:
            timeout_ms = getattr(request, "timeout_ms", 30_000) or 30_000
            return await forward_to_controller(
                broker, ctx, request, lambda code: error(request, ctx.api_version, code),
                timeout_s=max(1.0, timeout_ms / 1000),
            )

        return forward

    for api_key, error in apis.items():
        registry.register(api_key, forwarder(error), error_response=error)


#: How long a broker forwarding a request waits for an active controller (Kafka's
#: ForwardingManager answers REQUEST_TIMED_OUT after the request's timeout).
FORWARD_TIMEOUT_S = 30.0


async def forward_to_controller(
    broker: Any, ctx: Any, request: Message, error: Callable[[int], Any], *,
    timeout_s: float = FORWARD_TIMEOUT_S,
) -> Any:
    """``request``'s answer from the active controller, sent in an Envelope naming the client of
    ``ctx`` (``reference_broker.cluster.envelope``: the controller authorizes it as that client,
    not as this broker), at the client's version. NOT_CONTROLLER answers, at the top or per
    resource, are sent again by the channel; ``error(REQUEST_TIMED_OUT)`` when no controller
    answered in ``timeout_s``."""
    from reference_broker.cluster.envelope import opened, sealed

    api_key, version = type(request).API_KEY, ctx.api_version
    assert api_key is not None
    try:
        return await broker.controller_channel.send(
            sealed(ctx, request), timeout_s=timeout_s,
            unwrap=lambda answer: opened(answer, api_key, version, error),
        )
    except ControllerUnavailableError:
        return error(ErrorCode.REQUEST_TIMED_OUT)


class ControllerProducerIds:
    """Producer ids from blocks the active controller hands out (Kafka's RPCProducerIdManager), so
    no two brokers of a cluster ever give out the same id. One block is kept in reserve and the
    next is fetched as soon as the reserve is taken into use; while no id is at hand (before the
    first block arrives) ``next_id`` raises COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""

    def __init__(self, channel: ControllerChannel, lifecycle: BrokerLifecycle):
        self.channel = channel
        self.lifecycle = lifecycle
        self._blocks: list[list[int]] = []  # [next, end) per block, in order
        self._fetch: asyncio.Task[None] | None = None

    def next_id(self) -> int:
        while self._blocks and self._blocks[0][0] >= self._blocks[0][1]:
            self._blocks.pop(0)
        if len(self._blocks) < 2:
            self.prefetch()
        if not self._blocks:
            raise make_error(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block from the controller yet"
            )
        block = self._blocks[0]
        block[0] += 1
        return block[0] - 1

    def prefetch(self) -> None:
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.get_running_loop().create_task(self._allocate())

    async def _allocate(self) -> None:
        await self.lifecycle.registered.wait()
        request = AllocateProducerIdsRequest(
            broker_id=self.lifecycle.node_id, broker_epoch=self.lifecycle.broker_epoch
        )
        try:
            response: Any = await self.channel.send(request)
        except ControllerUnavailableError as exc:
            log.info("broker %d: no producer id block: %s", self.lifecycle.node_id, exc)
            return
        if response.error_code != ErrorCode.NONE:
            log.info(
                "broker %d: producer id block refused: %s",
                self.lifecycle.node_id,
                make_error(response.error_code),
            )
            return
        start = response.producer_id_start
        self._blocks.append([start, start + response.producer_id_len])

    async def stop(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetch


class ClusterMember:
    """What a cluster-mode node runs on top of its raft client: the metadata loader (a raft
    listener), on controllers the controller service and the node's own ControllerRegistration
    (``controller_registration``), and on brokers the controller channel, the replica manager,
    the metadata publisher and the registration/heartbeat lifecycle.

    Created in ``Broker.__init__`` before the handlers are installed (Produce is installed in its
    replicated form when ``broker.replica_manager`` exists); ``attach(raft)`` runs once the
    storage is open and before the raft client starts, so the loader and the controller see the
    metadata log from its beginning; ``start()``/``stop()`` follow the broker's. The broker gets
    ``metadata_loader``, ``controller`` (None on a broker-only node), and on brokers
    ``controller_channel``, ``replica_manager``, ``metadata_publisher``, ``lifecycle`` and
    ``producer_ids`` (blocks from the controller instead of the node's own file).
    """

    def __init__(self, broker: Any, *, voters: dict[int, tuple[str, int]], roles: Sequence[str]):
        from reference_broker.metadata.loader import MetadataLoader

        self.broker = broker
        self.voters = voters
        self.roles = set(roles)
        self.raft: Any = None
        self.loader = MetadataLoader()
        broker.metadata_loader = self.loader
        broker.controller = None
        self.lifecycle: BrokerLifecycle | None = None
        #: on controllers: their own registration (KIP-919)
        self.controller_registration: Any = None
        self.publisher: Any = None
        self._open_gate: asyncio.Task[None] | None = None
        if "broker" in self.roles:
            self._create_broker_parts()

    def _leader(self) -> int | None:
        return self.raft.leader_and_epoch.leader_id if self.raft is not None else None

    def _create_broker_parts(self) -> None:
        from reference_broker.cluster.auto_create import AutoTopicCreation
        from reference_broker.cluster.inter_broker import (
            controller_security,
            inter_broker_listener,
            inter_broker_security,
        )
        from reference_broker.cluster.metadata_publisher import BrokerMetadataPublisher
        from reference_broker.replication.config import ReplicationConfig
        from reference_broker.replication.replica_manager import ReplicaManager

        broker = self.broker
        config = broker.config
        loader = self.loader
        local_host = broker.host or None
        broker.controller_channel = ControllerChannel(
            self.voters,
            self._leader,
            controller_security(config).channels(f"broker-{broker.node_id}-to-controller",
                                                 local_host=local_host),
        )
        broker.auto_topic_creation = AutoTopicCreation(broker)
        controller_listeners = self._controller_listener_names()
        listeners = [lst for lst in broker.listeners if lst.name not in controller_listeners]
        self.lifecycle = BrokerLifecycle(
            broker.node_id,
            broker.cluster_id,
            broker.controller_channel,
            listeners=listeners,
            rack=config.get("broker.rack"),
            heartbeat_interval_ms=config.get("broker.heartbeat.interval.ms"),
            metadata_offset=lambda: loader.image.offset,
        )
        broker.lifecycle = self.lifecycle
        self.producer_ids = ControllerProducerIds(broker.controller_channel, self.lifecycle)
        broker.producer_ids = self.producer_ids

        def topic_id(name: str) -> uuid.UUID:
            topic = loader.image.topic(name)
            return topic.id if topic is not None else uuid.UUID(int=0)

        def rack_of(node: int) -> str | None:
            registration = loader.image.brokers.get(node)
            return registration.rack if registration is not None else None

        lifecycle = self.lifecycle
        broker.replica_manager = ReplicaManager(
            broker.node_id,
            get_log=lambda tp: broker.logs.manager.get_log(*tp),
            channels=inter_broker_security(config).channels(f"broker-{broker.node_id}-replica",
                                                            local_host=local_host),
            config=ReplicationConfig.from_broker_config(config),
            alter_partition=AlterPartitionSender(broker.controller_channel, lifecycle, topic_id),
            topic_id=topic_id,
            notify=broker.waiters.notify,
            broker_epoch=lambda: lifecycle.broker_epoch,
            known_partition=lambda topic, index: loader.image.partition(topic, index) is not None,
            rack_of=rack_of,
            registration=lambda node: loader.image.brokers.get(node),
        )
        inter_broker, _ = inter_broker_listener(config)
        self.publisher = BrokerMetadataPublisher(
            broker.node_id,
            storage=None,
            replica_manager=broker.replica_manager,
            inter_broker_listener=inter_broker,
            caught_up=lambda image: lifecycle is None or 0 <= lifecycle.broker_epoch <= image.offset,
        )

    def attach(self, raft: Any, controller_registry: Any | None = None) -> None:
        """Listen to ``raft`` (before it starts); the broker's storage must be open."""
        from reference_broker.cluster.envelope import install as install_envelope
        from reference_broker.cluster.inter_broker import controller_security
        from reference_broker.controller.handlers import install as install_controller_apis
        from reference_broker.controller.service import ControllerService
        from reference_broker.controller.settings import ControllerSettings
        from reference_broker.handlers.sasl import install as install_sasl_apis

        broker = self.broker
        self.raft = raft
        raft.use_connection_factory(controller_security(broker.config).connection_factory())
        raft.register(self.loader)
        from reference_broker.cluster.metadata_publisher import ClientQuotaPublisher, SecurityPublisher

        # ACLs are enforced once the image holds everything committed when the node started, as
        # Kafka's AclPublisher completes the authorizer's initial load once the MetadataLoader
        # reached the high watermark: on a broker and on a controller alike (a node whose own
        # registration must pass its controller's authorizer cannot wait for that registration).
        self.loader.install(SecurityPublisher(
            broker.authorizer, broker.scram_credentials, lambda: raft.caught_up))
        self.loader.install(ClientQuotaPublisher(broker.quotas.store))
        if self.lifecycle is not None:
            self.lifecycle.cluster_id = broker.cluster_id
        if self.publisher is not None:
            _install_admin_forwarding(broker.registry)
            self.publisher.storage = broker.logs
            self.publisher.broker_config = broker.config
            self.loader.install(self.publisher)
            broker.metadata_publisher = self.publisher
        if controller_registry is not None:  # nodes authenticate there on a SASL controller listener
            install_sasl_apis(controller_registry)
        if "controller" in self.roles:
            settings = ControllerSettings.from_config(broker.config, broker.cluster_id)
            broker.controller = ControllerService(raft, settings)
            self._create_controller_registration(raft)
            if controller_registry is not None:
                install_controller_apis(controller_registry)
                install_envelope(controller_registry)
        if getattr(broker, "authorizer", None) is not None:
            from reference_broker.cluster.cluster_action import install_broker_checks
            from reference_broker.controller.authorization import install as install_controller_checks

            install_broker_checks(broker.registry)
            if controller_registry is not None:
                install_controller_checks(controller_registry)

    def _create_controller_registration(self, raft: Any) -> None:
        """The controller's own ControllerRegistration (KIP-919), through a channel of its own
        (Kafka's ``registration`` channel manager), sent once the raft client caught up."""
        from reference_broker.cluster.controller_registration import ControllerRegistrationManager
        from reference_broker.cluster.inter_broker import controller_security

        broker = self.broker
        names = self._controller_listener_names()
        channel = ControllerChannel(
            self.voters,
            self._leader,
            controller_security(broker.config).channels(
                f"controller-{broker.node_id}-registration", local_host=broker.host or None),
        )
        self.controller_registration = ControllerRegistrationManager(
            broker.node_id,
            channel,
            listeners=lambda: [lst for lst in broker.listeners if lst.name in names],
            caught_up=lambda: bool(raft.caught_up),
        )
        broker.controller_registration = self.controller_registration
        self.loader.install(self.controller_registration)

    def _setting(self, key: str) -> Any:
        try:
            return self.broker.config.get(key)
        except KeyError:  # declared by the raft part of the cluster; absent from older builds
            return None

    def _controller_listener_names(self) -> set[str]:
        names = self._setting("controller.listener.names") or []
        return set(names if isinstance(names, list) else str(names).split(","))

    def gates_clients(self, listener_name: str) -> bool:
        """Whether ``listener_name`` takes connections only once the broker has caught up with the
        metadata: every listener of a broker but the controller ones (those serve the quorum,
        which the catching up needs)."""
        return self.lifecycle is not None and listener_name not in self._controller_listener_names()

    async def start(self) -> None:
        broker = self.broker
        if broker.controller is not None:
            await broker.controller.start()
        if self.controller_registration is not None:
            await self.controller_registration.start()
        if self.lifecycle is not None:
            await broker.replica_manager.start()
            await self.lifecycle.start()
            self.producer_ids.prefetch()
            self._open_gate = asyncio.get_running_loop().create_task(self._accept_once_caught_up())

    async def _accept_once_caught_up(self) -> None:
        """Kafka's BrokerServer order: the broker's ports are bound at start, and its request
        processing is enabled once the controller says its metadata caught up with its own
        registration. Before that its image may lack topics and brokers a client knows of."""
        assert self.lifecycle is not None
        await self.lifecycle.initially_caught_up.wait()
        names = []
        for server in self.broker.servers:
            if self.gates_clients(server.listener.name) and not server.accepting:
                server.start_accepting()
                names.append(server.listener.name)
        log.info("broker %d caught up with the metadata: taking connections on %s",
                 self.broker.node_id, ", ".join(names) or "no listener")

    async def stop(self) -> None:
        broker = self.broker
        if self._open_gate is not None:
            self._open_gate.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._open_gate
            self._open_gate = None
        if self.lifecycle is not None:
            await self.producer_ids.stop()
            await self.lifecycle.stop()
            await broker.replica_manager.stop()
            await broker.controller_channel.channels.close()
            await broker.replica_manager.channels.close()
        if self.controller_registration is not None:
            await self.controller_registration.stop()
        if broker.controller is not None:
            await broker.controller.stop()


def _install_admin_forwarding(registry: Any) -> None:
    """The partition admin APIs a single node does not serve, forwarded to the controller on a
    cluster's brokers (kafka-leader-election, kafka-reassign-partitions), and the voter changes
    of KIP-853 (kafka-metadata-quorum add-controller, remove-controller), which Kafka's brokers
    forward too, and UpdateFeatures (kafka-features upgrade, downgrade, disable)."""
    from sdk.protocol.messages import (
        AddRaftVoterRequest,
        AddRaftVoterResponse,
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        ElectLeadersRequest,
        ElectLeadersResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
        RemoveRaftVoterRequest,
        RemoveRaftVoterResponse,
        UpdateFeaturesRequest,
        UpdateFeaturesResponse,
    )

    install_forwarding(
        registry,
        {
            ElectLeadersRequest.API_KEY: lambda _req, _v, code: ElectLeadersResponse(error_code=code),
            AlterPartitionReassignmentsRequest.API_KEY: lambda _req, _v, code: (
                AlterPartitionReassignmentsResponse(error_code=code, error_message=None)
            ),
            ListPartitionReassignmentsRequest.API_KEY: lambda _req, _v, code: (
                ListPartitionReassignmentsResponse(error_code=code, error_message=None)
            ),
            AddRaftVoterRequest.API_KEY: lambda _req, _v, code: AddRaftVoterResponse(error_code=code),
            RemoveRaftVoterRequest.API_KEY: lambda _req, _v, code: RemoveRaftVoterResponse(error_code=code),
            UpdateFeaturesRequest.API_KEY: lambda _req, _v, code: UpdateFeaturesResponse(error_code=code),
        },
    )
