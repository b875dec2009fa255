"""What the consumer hands out: records, committed offsets, and the group identity.

``ConsumerRecord`` has aiokafka's fields. It is a ``__slots__`` class rather than a dataclass
because the fetcher makes one per record on the hot path: it creates them without running
``__init__`` (``ConsumerRecord.__new__`` plus slot stores), which is several times cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = ["ConsumerGroupMetadata", "ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp"]

KT = TypeVar("KT")
VT = TypeVar("VT")


class ConsumerRecord(Generic[KT, VT]):
    """One record as the application sees it (aiokafka's ``ConsumerRecord`` fields; generic in
    the key and value types like aiokafka's, so ``ConsumerRecord[str, bytes]`` annotates).

    ``timestamp_type`` is 0 for CreateTime, 1 for LogAppendTime. ``checksum`` is None: magic v2
    batches carry one CRC per batch, not per record (aiokafka also reports None). The serialized
    sizes are the key/value byte lengths before deserialization, -1 for a null key/value.
    """

    __slots__ = (
        "checksum",
        "headers",
        "key",
        "offset",
        "partition",
        "serialized_key_size",
        "serialized_value_size",
        "timestamp",
        "timestamp_type",
        "topic",
        "value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: KT | None,
        value: VT | None,
        checksum: int | None,
        serialized_key_size: int,
        serialized_value_size: int,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.checksum = checksum
        self.serialized_key_size = serialized_key_size
        self.serialized_value_size = serialized_value_size
        self.headers = headers

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.checksum,
            self.serialized_key_size,
            self.serialized_value_size,
            list(self.headers),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, like aiokafka's dataclass

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"timestamp={self.timestamp}, timestamp_type={self.timestamp_type}, key={self.key!r}, "
            f"value={self.value!r}, checksum={self.checksum}, serialized_key_size="
            f"{self.serialized_key_size}, serialized_value_size={self.serialized_value_size}, "
            f"headers={self.headers!r})"
        )


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to read, plus a free-form string."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    """``offsets_for_times`` answer: the first offset whose timestamp is >= the one asked for."""

    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """The consumer's group identity, what a transactional producer's ``send_offsets_to_transaction``
    needs to fence zombies (KIP-447)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
