"""The cluster's metadata as of one offset of the metadata log: an immutable ``MetadataImage``.

An image is what every node derives from replaying ``__cluster_metadata`` (Kafka's
``MetadataImage``): the registered brokers and controllers, the topics and their partitions' replicas, ISR,
leader and epochs, the dynamic configs, the finalized features, the next producer id, the
client quotas, the ACLs and the SCRAM credentials. Images are never changed in place:
``MetadataDelta`` builds the next one, sharing every unchanged topic and broker (and the ACL and
credential maps when unchanged) with the previous image, so readers holding an image see a
consistent cluster while the next one is built.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from types import MappingProxyType

from reference_broker.security.acl import AclBinding
from reference_broker.security.scram import ScramCredential

NO_LEADER = -1
#: PartitionChangeRecord.leader's default: the leader (and so the leader epoch) stays.
NO_LEADER_CHANGE = -2

# LeaderRecoveryState (KIP-704): RECOVERED, RECOVERING; -1 in a PartitionChangeRecord is "no change".
RECOVERED = 0
RECOVERING = 1
RECOVERY_NO_CHANGE = -1

# ConfigRecord.resource_type (ConfigResource.Type).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4

_EMPTY: Mapping = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One listener a broker registered: clients reach it at host:port."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclasses.dataclass(frozen=True)
class BrokerRegistration:
    """A broker as the controller registered it. ``epoch`` is the offset of its registration record
    (Kafka's broker epoch), so a restarted broker always has a larger one."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False
    features: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=lambda: _EMPTY)

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint of ``listener`` (the first registered one when None)."""
        for ep in self.endpoints:
            if listener is None or ep.name == listener:
                return ep
        return None


@dataclasses.dataclass(frozen=True)
class ControllerRegistration:
    """A controller as its RegisterControllerRecord says (KIP-919, Kafka's ControllerRegistration).

    A controller sends ControllerRegistration to the active controller once its metadata has
    caught up, and again whenever this registration differs from what it would send (a restart
    gives it a new ``incarnation_id``), so the image holds the latest incarnation of every
    controller that ever registered. ``endpoints`` are its controller listeners as advertised
    (what DescribeCluster with the controller endpoint type lists); ``features`` maps a feature
    name to the (min, max) levels it supports, which UpdateFeatures checks new levels against.
    A registration is never removed: a controller that left the quorum stays registered, as in
    Kafka.
    """

    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    endpoints: tuple[Endpoint, ...]
    features: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=lambda: _EMPTY)

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint of ``listener`` (the first registered one when None)."""
        for ep in self.endpoints:
            if listener is None or ep.name == listener:
                return ep
        return None


@dataclasses.dataclass(frozen=True)
class PartitionRegistration:
    """One partition's replica assignment and leadership (Kafka's PartitionRegistration).

    ``leader_epoch`` changes only when the leader changes (or a reassignment removes replicas);
    ``partition_epoch`` changes with every change of the partition, which is what AlterPartition
    requests are checked against.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclasses.dataclass(frozen=True)
class TopicImage:
    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]


@dataclasses.dataclass(frozen=True)
class MetadataImage:
    """Everything the metadata log says as of ``offset`` (-1: nothing replayed) in raft ``epoch``."""

    offset: int = -1
    epoch: int = -1
    brokers: Mapping[int, BrokerRegistration] = dataclasses.field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = dataclasses.field(default_factory=lambda: _EMPTY)
    topic_ids: Mapping[str, uuid.UUID] = dataclasses.field(default_factory=lambda: _EMPTY)
    #: (resource_type, resource_name) -> {name: value}
    configs: Mapping[tuple[int, str], Mapping[str, str]] = dataclasses.field(default_factory=lambda: _EMPTY)
    features: Mapping[str, int] = dataclasses.field(default_factory=lambda: _EMPTY)
    #: The first producer id no broker has been given yet.
    next_producer_id: int = 0
    #: entity (tuple of (entity_type, name or None)) -> {quota key: value}
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = dataclasses.field(
        default_factory=lambda: _EMPTY
    )
    #: ACL id (AccessControlEntryRecord.id) -> binding; no two ids hold the same binding.
    acls: Mapping[uuid.UUID, AclBinding] = dataclasses.field(default_factory=lambda: _EMPTY)
    #: user -> SCRAM mechanism name (``SCRAM-SHA-256``) -> credential; no user maps to nothing.
    scram_credentials: Mapping[str, Mapping[str, ScramCredential]] = dataclasses.field(
        default_factory=lambda: _EMPTY
    )
    #: controller id -> its latest registration (RegisterControllerRecord).
    controllers: Mapping[int, ControllerRegistration] = dataclasses.field(default_factory=lambda: _EMPTY)

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics_by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        image = self.topic(topic)
        return None if image is None else image.partitions.get(partition)

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not shutting down: may lead and join an ISR."""
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def topic_config(self, topic: str) -> Mapping[str, str]:
        return self.configs.get((CONFIG_TOPIC, topic), _EMPTY)
