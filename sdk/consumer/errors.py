"""Errors only the consumer raises, all subclasses of ``sdk.errors.KafkaError``.

Conditions a broker reports keep the protocol's classes (``OffsetOutOfRangeError``,
``FencedInstanceIdError``, ...); the classes here add what the client itself detects, subclassing
the matching protocol class where there is one so a single ``except`` catches both.
"""

from __future__ import annotations

from typing import Any

from sdk.errors import (
    ClientError,
    CorruptMessageError,
    IllegalStateError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)

__all__ = [
    "CommitFailedError",
    "ConsumerStoppedError",
    "CorruptRecordInFetchError",
    "NoGroupIdError",
    "NoOffsetForPartitionError",
    "OffsetResetOutOfRangeError",
    "RecordTooLargeForFetchError",
]


class ConsumerStoppedError(IllegalStateError):
    """The consumer is stopped (or was never started): no more records come from it.

    ``async for`` ends quietly on it, as aiokafka's iterator does.
    """

    name = "CONSUMER_STOPPED"


class NoGroupIdError(IllegalStateError):
    """Committing, fetching committed offsets or subscribing needs a ``group_id``."""

    name = "NO_GROUP_ID"


class CommitFailedError(ClientError):
    """An offset commit cannot succeed: the group rebalanced (generation or member id is stale),
    so the partitions may belong to another member now. Re-poll and process again."""

    name = "COMMIT_FAILED"
    retriable = False


class NoOffsetForPartitionError(ClientError):
    """A partition has no position and ``auto_offset_reset='none'`` forbids picking one.

    ``partitions`` lists the partitions concerned.
    """

    name = "NO_OFFSET_FOR_PARTITION"

    def __init__(self, message: str, partitions: Any = ()) -> None:
        self.partitions = set(partitions)
        super().__init__(message)


class OffsetResetOutOfRangeError(OffsetOutOfRangeError):
    """The broker answered OFFSET_OUT_OF_RANGE and ``auto_offset_reset='none'``: the application
    must ``seek``. ``offsets`` maps each partition to the position that was out of range."""

    def __init__(self, message: str, offsets: dict[Any, int] | None = None) -> None:
        self.offsets = dict(offsets or {})
        super().__init__(message)


class RecordTooLargeForFetchError(RecordTooLargeError):
    """A fetch returned only part of a batch and no whole one: the batch at ``offset`` is larger
    than ``max_partition_fetch_bytes``/``fetch_max_bytes`` (an old broker; current ones always
    return the first batch whole), so the consumer cannot make progress on the partition."""

    def __init__(self, message: str, partition: Any = None, offset: int = -1) -> None:
        self.partition = partition
        self.offset = offset
        super().__init__(message)


class CorruptRecordInFetchError(CorruptMessageError):
    """A fetched batch failed its CRC or could not be decoded; the record error is ``__cause__``.

    ``partition`` and ``offset`` say where; the position stays there, so the application can
    ``seek`` past it.
    """

    def __init__(self, message: str, partition: Any = None, offset: int = -1) -> None:
        self.partition = partition
        self.offset = offset
        super().__init__(message)
