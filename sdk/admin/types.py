"""What a caller hands the admin client: new topics and partitions, config resources and changes,
offsets to look up or delete up to, a transaction to abort. aiokafka's names and fields where it
has the type (``NewTopic``, ``NewPartitions``, ``ConfigResource``, ``RecordsToDelete``), Java's
``Admin`` otherwise. Each validates its arguments when built, raising ``ValueError`` naming the
bad one, so a mistake fails at the call rather than as a broker error."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk.client.cluster import TopicPartition

__all__ = [
    "AbortTransactionSpec",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ConfigResource",
    "ConfigResourceType",
    "IsolationLevel",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "RecordsToDelete",
]


def _require(condition: bool, argument: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{argument}: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_topic_partition(value: Any, argument: str) -> TopicPartition:
    """``value`` as a ``TopicPartition`` (any (topic, partition) pair), or ``ValueError``."""
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise ValueError(f"{argument}: {value!r} is not a (topic, partition) pair") from None
    _require(isinstance(topic, str) and bool(topic), argument, f"bad topic name in {value!r}")
    _require(_is_int(partition) and partition >= 0, argument, f"bad partition in {value!r}")
    return TopicPartition(topic, partition)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions or replication factor: the broker's default
    (``num.partitions``, ``default.replication.factor``). ``replica_assignments`` (partition ->
    broker ids) replaces both, which must then be -1."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    topic_configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), "name", f"bad topic name {self.name!r}")
        _require(
            _is_int(self.num_partitions) and (self.num_partitions == -1 or self.num_partitions > 0),
            "num_partitions",
            f"must be a positive int or -1, not {self.num_partitions!r}",
        )
        _require(
            _is_int(self.replication_factor)
            and (self.replication_factor == -1 or self.replication_factor > 0),
            "replication_factor",
            f"must be a positive int or -1, not {self.replication_factor!r}",
        )
        if self.replica_assignments:
            _require(
                self.num_partitions == -1 and self.replication_factor == -1,
                "replica_assignments",
                "given with num_partitions or replication_factor (leave those -1)",
            )
        for key, value in dict(self.topic_configs).items():
            _require(
                isinstance(key, str) and isinstance(value, str),
                "topic_configs",
                f"{key!r}: {value!r} is not str: str",
            )


@dataclass(frozen=True)
class NewPartitions:
    """The total partition count a topic should have, and optionally the replicas of each new
    partition (one broker-id list per new partition)."""

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None

    def __post_init__(self) -> None:
        _require(
            _is_int(self.total_count) and self.total_count > 0,
            "total_count",
            f"must be a positive int, not {self.total_count!r}",
        )


class ConfigResourceType(enum.IntEnum):
    """DescribeConfigs' ``resource_type`` (Java's ``ConfigResource.Type``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigResource:
    """A topic, broker, broker logger, ... whose configs are described or altered. Equal and
    hashable by (type, name), so results are keyed by it. ``configs`` is for the calls that take
    values (``describe_configs``: the keys to describe, None for all; ``alter_configs``: the
    whole new set). ``resource_type`` may be a ``ConfigResourceType``, its name or its value."""

    __slots__ = ("configs", "name", "resource_type")

    def __init__(
        self,
        resource_type: ConfigResourceType | str | int,
        name: str,
        configs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            if isinstance(resource_type, str):
                self.resource_type = ConfigResourceType[resource_type.upper()]
            else:
                self.resource_type = ConfigResourceType(resource_type)
        except (KeyError, ValueError):
            raise ValueError(f"resource_type: unknown config resource type {resource_type!r}") from None
        _require(isinstance(name, str), "name", f"must be a str, not {name!r}")
        _require(
            bool(name) or self.resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER),
            "name",
            f"a {self.resource_type.name} resource needs a name",
        )
        self.name = name
        self.configs = dict(configs) if configs is not None else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return (self.resource_type, self.name) == (other.resource_type, other.name)

    def __hash__(self) -> int:
        return hash((self.resource_type, self.name))

    def __repr__(self) -> str:
        return f"ConfigResource({self.resource_type.name}, {self.name!r})"


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs' ``config_operation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class AlterConfigOp:
    """One change of one config key: SET a value, DELETE the override (back to the default),
    APPEND to or SUBTRACT from a list-valued key."""

    name: str
    value: str | None = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), "name", f"bad config name {self.name!r}")
        object.__setattr__(self, "op_type", AlterConfigOpType(self.op_type))
        if self.op_type != AlterConfigOpType.DELETE:
            _require(
                isinstance(self.value, str), "value", f"{self.op_type.name} {self.name!r} needs a str value"
            )


@dataclass(frozen=True)
class RecordsToDelete:
    """Delete a partition's records before ``before_offset`` (-1: up to the high watermark)."""

    before_offset: int

    def __post_init__(self) -> None:
        _require(
            _is_int(self.before_offset) and self.before_offset >= -1,
            "before_offset",
            f"must be an offset >= 0 or -1, not {self.before_offset!r}",
        )


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True)
class OffsetSpec:
    """Which offset ``list_offsets`` asks for: ``earliest()``, ``latest()``, ``max_timestamp()``
    (the record with the largest timestamp) or ``for_timestamp(ms)`` (the first record at or after
    it). ``timestamp`` is ListOffsets' wire value (negative sentinels for the named ones)."""

    timestamp: int

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(cls.EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(cls.LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(cls.MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        _require(
            _is_int(timestamp_ms) and timestamp_ms >= 0,
            "timestamp_ms",
            f"must be a timestamp >= 0, not {timestamp_ms!r}",
        )
        return cls(timestamp_ms)


@dataclass(frozen=True)
class AbortTransactionSpec:
    """A hanging transaction to abort (KIP-664): the partition where it is open, its producer id
    and epoch, and the coordinator epoch to stamp the marker with (``describe_producers`` shows
    all three; its ``coordinator_epoch`` is None before any marker, and 0 is then the one to use,
    as Kafka's ``kafka-transactions.sh abort`` does)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "topic_partition", check_topic_partition(self.topic_partition, "topic_partition")
        )
        _require(
            _is_int(self.producer_id) and self.producer_id >= 0, "producer_id", f"bad id {self.producer_id!r}"
        )
        _require(
            _is_int(self.producer_epoch) and 0 <= self.producer_epoch < 2**15,
            "producer_epoch",
            f"bad epoch {self.producer_epoch!r}",
        )
        _require(
            _is_int(self.coordinator_epoch) and self.coordinator_epoch >= 0,
            "coordinator_epoch",
            f"bad epoch {self.coordinator_epoch!r}",
        )
