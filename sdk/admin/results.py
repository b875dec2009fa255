"""What the admin client answers with: plain immutable values. Calls over several items answer
per item (a dict keyed by the item); an item that failed carries its error as the SDK's exception
(``error``, or the value itself for calls without a result), and the other items are unaffected."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sdk.admin.security import AclOperation
from sdk.client.cluster import TopicPartition
from sdk.errors import KafkaError

__all__ = [
    "ClusterDescription",
    "ConfigEntry",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerLag",
    "DeletedRecords",
    "ListOffsetsResultInfo",
    "MemberDescription",
    "Node",
    "PartitionProducers",
    "ProducerState",
    "ResourceConfigs",
    "TopicDescription",
    "TopicPartitionInfo",
    "TransactionDescription",
    "TransactionListing",
]


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller: Node | None
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class TopicPartitionInfo:
    partition: int
    leader: int  # -1 without a leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[TopicPartitionInfo, ...]
    error: KafkaError | None = None


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource. ``source`` is DescribeConfigs' config_source (1 dynamic topic,
    4 static broker, 5 default, ...); ``synonyms`` (name, value, source) when asked for."""

    name: str
    value: str | None
    source: int
    is_read_only: bool
    is_default: bool
    is_sensitive: bool
    synonyms: tuple[tuple[str, str | None, int], ...] = ()
    config_type: int = 0
    documentation: str | None = None


@dataclass(frozen=True)
class ResourceConfigs:
    entries: dict[str, ConfigEntry] = field(default_factory=dict)
    error: KafkaError | None = None


@dataclass(frozen=True)
class DeletedRecords:
    low_watermark: int = -1
    error: KafkaError | None = None


@dataclass(frozen=True)
class ListOffsetsResultInfo:
    """``offset`` -1 when no record matches (a timestamp after every record's)."""

    offset: int = -1
    timestamp: int = -1
    leader_epoch: int | None = None
    error: KafkaError | None = None


@dataclass(frozen=True)
class ConsumerGroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None
    group_type: str | None = None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str = ""
    protocol_type: str = ""
    partition_assignor: str = ""
    members: tuple[MemberDescription, ...] = ()
    coordinator: int = -1
    error: KafkaError | None = None
    #: What this client may do with the group, when asked for (``include_authorized_operations``).
    authorized_operations: frozenset[AclOperation] | None = None


@dataclass(frozen=True)
class ConsumerLag:
    """A group's position on one partition against the partition's end: ``committed`` None when
    the group has committed nothing there (``lag`` is then None too)."""

    committed: int | None
    end_offset: int
    lag: int | None


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = -1
    start_time_ms: int | None = None  # None when no transaction is open
    partitions: frozenset[TopicPartition] = frozenset()
    coordinator: int = -1
    error: KafkaError | None = None


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None until a marker of this producer was written
    current_transaction_start_offset: int | None  # None without an open transaction


@dataclass(frozen=True)
class PartitionProducers:
    active_producers: tuple[ProducerState, ...] = ()
    error: KafkaError | None = None
