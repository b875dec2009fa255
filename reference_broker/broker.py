"""The broker: storage, services and handlers and the network server wired together.

``async with Broker(config) as broker:`` opens the logs (running recovery), starts the services
(the group coordinator, which starts loading ``__consumer_offsets``; the log's retention and
housekeeping chores) and binds its listeners (``listeners``, each with its TLS context and SASL
mechanisms; ``reference_broker.security``); leaving the block stops accepting, drops
connections, stops the services and closes the logs cleanly (flush, close segments, write the
checkpoints recovery would otherwise rebuild).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from reference_broker._event_loop import loop_name
from reference_broker._memory import ReturnFreedMemory
from reference_broker.clock import Clock, LoopClock
from reference_broker.config import BrokerConfig, quorum_configured
from reference_broker.controller.supported_features import TRANSACTION_VERSION
from reference_broker.coordinator.group.coordinator import GroupCoordinator
from reference_broker.coordinator.group.service import GroupCoordinatorService
from reference_broker.coordinator.txn.coordinator import TransactionCoordinator
from reference_broker.coordinator.txn.service import TransactionCoordinatorService
from reference_broker.features import finalized_level
from reference_broker.fetch_sessions import FetchSessionCache
from reference_broker.handlers import HandlerRegistry
from reference_broker.handlers import install_all as install_handlers
from reference_broker.handlers.authorization import install as install_authorization
from reference_broker.network.limits import ConnectionLimits
from reference_broker.network.server import KafkaServer, RequestContext
from reference_broker.producer_ids import ProducerIdManager
from reference_broker.quotas import QuotaManager
from reference_broker.replication.replica_manager import ReplicaManager
from reference_broker.security.authorizer import Authorizer
from reference_broker.security.config import authorizer_enabled, configured_listeners, super_users
from reference_broker.security.listeners import Listener
from reference_broker.security.sasl import SaslSettings
from reference_broker.security.scram import ScramCredentialStore
from reference_broker.security.tls import server_context
from reference_broker.services import LogChores, LogCleanerChore, MemoryReturnChore, ServiceRunner
from reference_broker.storage import Storage
from reference_broker.waiters import DataWaiters

log = logging.getLogger("reference_broker")


class Broker:
    """One single-node Kafka broker serving ``config.data_dir`` on ``config.host:config.port``."""

    def __init__(self, config: BrokerConfig, clock: Clock | None = None):
        self.config = config
        self.clock: Clock = clock or LoopClock()
        self.node_id = config.node_id
        self.waiters = DataWaiters()
        self.quotas = QuotaManager.from_config(config)
        #: Cluster mode: the partitions this node replicates (None on a single node). Created
        #: before the handlers are installed: Produce waits for acks=all only when it is set.
        self.replica_manager: ReplicaManager | None = None
        #: Cluster mode (``controller.quorum.voters`` set): the node's raft client, the registry
        #: of its controller listeners and the cluster member wiring them; None on a single node.
        self.raft: Any = None
        self.controller_registry: HandlerRegistry | None = None
        self.cluster_member: Any = None
        self.quorum_voters: dict[int, tuple[str, int]] = {}
        self.storage: Storage | None = None
        self.producer_ids = ProducerIdManager(config.data_dir)
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.cluster_id = ""
        self.server: KafkaServer | None = None
        self.servers: list[KafkaServer] = []
        self.listeners: list[Listener] = configured_listeners(config)
        self.scram_credentials: ScramCredentialStore | None = None
        #: None when ``authorizer.class.name`` is empty: every request is allowed, as in Kafka.
        self.authorizer: Authorizer | None = None
        self.services = ServiceRunner()
        self.group_service: GroupCoordinatorService | None = None
        #: Set by the transaction coordinator's service; FindCoordinator checks it.
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.txn_service: TransactionCoordinatorService | None = None
        self.host = config.host
        self.port = config.port
        if quorum_configured(config):
            self._init_cluster_member(config)  # sets replica_manager, producer_ids: before handlers
        self.registry = HandlerRegistry(self)
        install_handlers(self.registry)
        if authorizer_enabled(config):
            install_authorization(self.registry)

    def _init_cluster_member(self, config: BrokerConfig) -> None:
        from reference_broker.cluster.broker_lifecycle import ClusterMember
        from reference_broker.raft.client import parse_bootstrap_servers, parse_voters
        from reference_broker.raft.handlers import install as install_raft_apis

        if config.get("controller.quorum.voters"):
            self.quorum_voters = parse_voters(config.get("controller.quorum.voters"))
        else:  # a dynamic quorum: the raft client fills in the log's voters once it knows them
            self.quorum_voters = parse_bootstrap_servers(
                config.get("controller.quorum.bootstrap.servers"))
        self.controller_registry = HandlerRegistry(self, "controller")
        install_raft_apis(self.controller_registry)
        self.cluster_member = ClusterMember(self, voters=self.quorum_voters,
                                            roles=config.get("process.roles"))

    def _create_raft(self) -> None:
        from reference_broker.metadata.snapshot_generator import SnapshotGenerator
        from reference_broker.raft.client import RaftClient
        from reference_broker.raft.core import RaftTimeouts
        from reference_broker.raft.handlers import install_broker_side
        from reference_broker.raft.log import MetadataLogSettings

        config = self.config
        timeouts = RaftTimeouts(
            election_timeout_ms=config.get("controller.quorum.election.timeout.ms"),
            fetch_timeout_ms=config.get("controller.quorum.fetch.timeout.ms"),
            election_backoff_max_ms=config.get("controller.quorum.election.backoff.max.ms"),
            request_timeout_ms=config.get("controller.quorum.request.timeout.ms"),
        )
        metadata_dir = config.get("metadata.log.dir") or config.data_dir
        from reference_broker.raft.voter_set import Endpoint

        dynamic = not config.get("controller.quorum.voters")
        controller_names = [n.upper() for n in config.get("controller.listener.names") or []]
        controller_names = controller_names or ["CONTROLLER"]
        self.raft = RaftClient(self.node_id, self.quorum_voters, Path(metadata_dir),
                               cluster_id=self.cluster_id, timeouts=timeouts,
                               local_host=self.listeners[0].host,
                               log_settings=MetadataLogSettings.from_config(config),
                               bootstrap=dict(self.quorum_voters) if dynamic else None,
                               directory_id=self.logs.directory_id,
                               controller_listener=controller_names[0],
                               endpoints=tuple(
                                   Endpoint(lst.name, *lst.advertised()) for name in controller_names
                                   for lst in self.listeners if lst.name == name))
        self.cluster_member.attach(self.raft, self.controller_registry)
        if getattr(self, "metadata_publisher", None) is not None and self.group_service is not None:
            from reference_broker.cluster.coordinators import (
                attach_group_coordinator,
                attach_remote_markers,
                attach_transaction_coordinator,
                install_replicated_group_writes,
                install_replicated_transaction_log,
            )

            attach_group_coordinator(self)
            install_replicated_group_writes(self.registry)
            if self.txn_service is not None:
                attach_remote_markers(self)
                attach_transaction_coordinator(self)
                install_replicated_transaction_log(self.registry)
        SnapshotGenerator.attach(self.raft, self.cluster_member.loader, config)
        install_broker_side(self.registry)

    @property
    def logs(self) -> Storage:
        assert self.storage is not None, "broker not started"
        return self.storage

    @property
    def groups(self) -> GroupCoordinator:
        assert self.group_service is not None, "broker not started"
        return self.group_service.coordinator

    @property
    def advertised_host(self) -> str:
        return self.listeners[0].advertised()[0]

    @property
    def advertised_port(self) -> int:
        return self.listeners[0].advertised()[1]

    def advertised_address(self, ctx: RequestContext) -> tuple[str, int]:
        """What Metadata and FindCoordinator tell this client: the advertised address of the
        listener it connected on."""
        return ctx.connection.session.listener.advertised()

    def _data_arrived(self, key: Hashable) -> None:
        """An append (or a topic deletion) touched ``key``: in cluster mode the partition's leader
        may move its high watermark first (an ISR of one commits at once, coordinator writes and
        transaction markers too), then the long polls waiting on it wake."""
        replicas = self.replica_manager
        if replicas is not None:
            replicas.on_append(key)
        self.waiters.notify(key)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        data_dir = self.config.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        if self.cluster_member is not None:
            from reference_broker.cluster.single_node_stores import refuse_single_node_stores

            refuse_single_node_stores(data_dir)
        self.storage = Storage.open(self.config, on_data=self._data_arrived)
        self.cluster_id = self.storage.cluster_id
        try:
            self._add_services(self.storage)
            await self.services.start()
            self.scram_credentials = ScramCredentialStore(data_dir)
            if authorizer_enabled(self.config):
                self.authorizer = Authorizer.open(
                    data_dir,
                    super_users=super_users(self.config),
                    allow_if_no_acl=self.config.get("allow.everyone.if.no.acl.found"),
                )
            if self.cluster_member is not None:
                self._create_raft()
            await self._bind()
            if self.raft is not None:
                await self.raft.start()
                await self.cluster_member.start()
        except BaseException:
            await self._stop_cluster()
            for server in self.servers:
                await server.close()
            self.servers = []
            await self.services.stop()
            self.storage.close()
            self.storage = None
            raise
        log.info(
            "broker %d (cluster %s) listening on %s:%d, data in %s, event loop %s",
            self.node_id,
            self.cluster_id,
            self.host,
            self.port,
            data_dir,
            loop_name(asyncio.get_running_loop()),
        )

    async def _bind(self) -> None:
        """One server per listener; the first one's address is ``host``/``port``."""
        max_request = self.config.get("socket.request.max.bytes")
        limits = ConnectionLimits.from_config(self.config)  # shared: the limits are broker-wide
        addresses = []
        controller_listeners = set(self.config.get("controller.listener.names") or [])
        for listener in self.listeners:
            tls = None
            if listener.uses_tls:
                lookup = functools.partial(self.config.listener_get, listener.name)
                tls = server_context(listener.name, lookup)
            sasl = None
            if listener.uses_sasl:
                sasl = SaslSettings.from_config(self.config, listener.name)
                sasl.scram_store = self.scram_credentials
            registry = self.registry
            if self.controller_registry is not None and listener.name in controller_listeners:
                registry = self.controller_registry
            server = KafkaServer(
                registry, listener.host, listener.port, max_request,
                listener=listener, ssl_context=tls, sasl=sasl, limits=limits, quotas=self.quotas,
            )
            self.servers.append(server)
            # A cluster's broker takes clients once caught up with the metadata (ClusterMember).
            gated = self.cluster_member is not None and self.cluster_member.gates_clients(listener.name)
            host, port = await server.start(accept=not gated)
            addresses.append((host, port))
            log.info("listener %s (%s) on %s:%d", listener.name, listener.security_protocol, host, port)
        self.server = self.servers[0]
        self.host, self.port = addresses[0]

    def _add_services(self, storage: Storage) -> None:
        self.services = ServiceRunner()
        self.group_service = GroupCoordinatorService(self.config, storage, self.clock)
        if self.replica_manager is not None:  # cluster mode: see cluster.coordinators
            self.group_service.use_replicated_topic(self.replica_manager)
        self.services.add(self.group_service)
        self.txn_service = TransactionCoordinatorService(
            self.config, storage, self.clock, self.producer_ids, self.group_service
        )
        if self.replica_manager is not None:
            self.txn_service.use_replicated_topic(self.replica_manager)
        self.transaction_coordinator = self.txn_service.coordinator
        self.transaction_coordinator.transaction_version = functools.partial(
            finalized_level, self, TRANSACTION_VERSION)
        self.services.add(self.txn_service)
        self.services.add(
            LogChores(
                self.config.get("log.retention.check.interval.ms") / 1000,
                storage.enforce_retention,
                storage.housekeeping,
            )
        )
        freed_memory = ReturnFreedMemory()
        if freed_memory.available:
            self.services.add(MemoryReturnChore(freed_memory.check))
        if self.config.get("log.cleaner.enable"):
            backoff_s = self.config.get("log.cleaner.backoff.ms") / 1000
            threads = self.config.get("log.cleaner.threads")
            self.services.add(
                LogCleanerChore(backoff_s, storage.clean_logs, storage.abort_cleaning, threads))

    async def _stop_cluster(self) -> None:
        if self.cluster_member is not None and self.raft is not None:
            await self.cluster_member.stop()
        if self.raft is not None:
            await self.raft.stop()
            self.raft = None

    async def stop(self) -> None:
        await self._stop_cluster()
        for server in self.servers:
            await server.close()
        self.servers = []
        self.server = None
        await self.services.stop()
        self.waiters.notify_all()
        if self.storage is not None:
            self.storage.close()
            self.storage = None
        log.info("broker %d stopped", self.node_id)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
