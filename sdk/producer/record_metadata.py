"""What a send resolves to: where the record (or a batch of records) was written."""

from __future__ import annotations

from typing import NamedTuple

from sdk.client.cluster import TopicPartition

__all__ = ["BatchMetadata", "OffsetRange", "RecordMetadata"]

#: ``timestamp_type`` values: the producer's timestamp, or the broker's append time.
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class RecordMetadata(NamedTuple):
    """Where one record was written (aiokafka's and Java's RecordMetadata fields).

    ``offset`` is -1 for ``acks=0`` (no answer) and for a retried batch the broker recognised as a
    duplicate of one written too long ago to remember its offset. ``timestamp`` is the broker's
    append time when the topic uses LogAppendTime (then ``timestamp_type`` is 1).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int = CREATE_TIME
    log_start_offset: int = -1
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetRange(NamedTuple):
    """``count`` consecutive offsets from ``base_offset`` in ``partition``."""

    partition: int
    base_offset: int
    count: int  # type: ignore[assignment]  # a field named count shadows tuple.count, by design


class BatchMetadata(NamedTuple):
    """Result of ``Producer.send_many``: every record is written.

    ``ranges`` lists, per partition in append order, the offsets the call's records got: the n-th
    record the call sent to partition p has the n-th offset of p's ranges. Records of other sends
    may sit between two ranges of the same partition.
    """

    topic: str
    record_count: int
    ranges: tuple[OffsetRange, ...]

    def offsets(self, partition: int) -> list[int]:
        """Offsets of this call's records in ``partition``, in the order they were given."""
        result: list[int] = []
        for r in self.ranges:
            if r.partition == partition:
                result.extend(range(r.base_offset, r.base_offset + r.count))
        return result

    @property
    def partitions(self) -> set[int]:
        return {r.partition for r in self.ranges}
