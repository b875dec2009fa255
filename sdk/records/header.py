"""The 61-byte v2 batch header, and in-place edits the broker makes to it.

The broker never re-encodes a producer's batch: on append it rewrites the base offset (outside the
CRC), stamps the partition leader epoch (outside the CRC) and, for ``LogAppendTime`` topics, the
timestamp type and max timestamp (inside the CRC, which is then recomputed); for ``CreateTime``
topics it corrects a max timestamp that disagrees with the records (also inside the CRC). Those
edits work on a ``bytearray`` at a position so a whole produce request can be fixed up without
copying.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from sdk.records.errors import InvalidBatchLengthError, TruncatedBatchError

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER",
    "BATCH_HEADER_SIZE",
    "CRC_OFFSET",
    "CRC_START",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "assign_offsets",
    "read_batch_header",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
]

#: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
#: baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD = 12
#: Smallest batchLength a v2 batch can have (a header and no records).
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2
MAGIC_OFFSET = 16
PARTITION_LEADER_EPOCH_OFFSET = 12
#: Byte offset of the CRC field; the CRC covers everything from ``CRC_START`` (the attributes).
CRC_OFFSET = 17
CRC_START = 21
MAX_TIMESTAMP_OFFSET = 35

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The header fields of one batch, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


def read_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` without checking magic or CRC (see ``RecordBatch.validate``)."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise TruncatedBatchError(f"need {BATCH_HEADER_SIZE} header bytes", pos)
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


def _batch_end(buf: bytearray | memoryview, pos: int) -> int:
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise TruncatedBatchError(f"need {BATCH_HEADER_SIZE} header bytes", pos)
    (length,) = _INT32.unpack_from(buf, pos + 8)
    if length < MIN_BATCH_LENGTH:
        raise InvalidBatchLengthError(f"batchLength {length} < {MIN_BATCH_LENGTH}", pos + 8)
    end = pos + LOG_OVERHEAD + length
    if end > len(buf):
        raise TruncatedBatchError(f"batch needs {end - len(buf)} more bytes", pos)
    return end


def assign_offsets(buf: bytearray, pos: int, base_offset: int) -> None:
    """Set the base offset of the batch at ``pos``; record offsets are deltas, the CRC is unaffected."""
    _batch_end(buf, pos)
    _INT64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Stamp the leader epoch the broker appended the batch under (not covered by the CRC)."""
    _batch_end(buf, pos)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch ``LogAppendTime`` with ``timestamp_ms`` as its max timestamp; fix the CRC.

    Readers then report ``timestamp_ms`` for every record of the batch, as Kafka specifies.
    """
    end = _batch_end(buf, pos)
    (attributes,) = _INT16.unpack_from(buf, pos + CRC_START)
    _INT16.pack_into(buf, pos + CRC_START, attributes | ATTR_TIMESTAMP_TYPE)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]))


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Rewrite the max timestamp of the batch at ``pos`` and recompute its CRC (Kafka's
    ``setMaxTimestamp`` for a ``CreateTime`` batch, the timestamp type is left as it is).

    A broker does this when the producer's max timestamp disagrees with its records, so that the
    time index and retention, which read only batch headers, can trust the header.
    """
    end = _batch_end(buf, pos)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]))
