"""Walk a batch's records without building them: what a broker needs to validate an append.

Validating a produce request means checking every record's framing (its length, and that its
fields fill exactly that length), that offset deltas run 0..n-1, that timestamps are in range and
what the largest one is, and for compacted topics that every record has a key. Building each
record as an object does all that too, but costs an object and two slices per record. The walk
(:func:`~sdk.records.reader.walk_records`, the record reader's walk output) reads only the fields
and returns those facts; it accepts and rejects exactly what reading the records does, since it
is the same reader.
"""

from __future__ import annotations

from sdk.records.compression import decompress
from sdk.records.errors import (
    InvalidRecordCountError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)
from sdk.records.header import (
    ATTR_COMPRESSION_MASK,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
)
from sdk.records.reader import RecordsWalk, walk_records
from sdk.records.varint import BytesLike

__all__ = ["RecordsWalk", "walk_batch_records", "walk_records"]

_RECORD_COUNT_OFFSET = 57
_MAX_CODEC = 4


def walk_batch_records(buffer: BytesLike, position: int = 0) -> RecordsWalk:
    """:func:`walk_records` over the batch at ``position``, decompressing its records once.

    The batch's framing (magic, length, CRC) must already have been checked, e.g. by
    ``RecordBatch.validate``; this reads only the attributes, the record count and the records.
    An uncompressed batch is read in place, whatever the buffer type.
    """
    (
        _base_offset,
        batch_length,
        _epoch,
        _magic,
        _crc,
        attributes,
        _last_offset_delta,
        _base_ts,
        _max_ts,
        _pid,
        _pepoch,
        _base_seq,
        count,
    ) = BATCH_HEADER.unpack_from(buffer, position)
    start = position + BATCH_HEADER_SIZE
    end = position + LOG_OVERHEAD + batch_length
    if end > len(buffer):
        raise TruncatedBatchError(
            f"batchLength {batch_length} needs {end - len(buffer)} more bytes than the buffer has",
            position,
        )
    if count < 0:
        raise InvalidRecordCountError(f"negative recordCount {count}", position + _RECORD_COUNT_OFFSET)
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        return walk_records(buffer, start, end, count)
    if codec > _MAX_CODEC:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}", position + CRC_START)
    if start == end and count == 0:
        return RecordsWalk(0, None, None, -1, -1)
    data = decompress(codec, memoryview(buffer)[start:end])
    return walk_records(data, 0, len(data), count)
