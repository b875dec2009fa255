"""Writing the batches a cleaning pass keeps: a filtered copy of a batch, or its empty header.

A kept batch keeps its base offset, last offset (``lastOffsetDelta`` of the original, so the
producer's last sequence is still implied), producer id, epoch, base sequence, partition leader
epoch, attributes and codec; its records keep their offsets and timestamps. When the pass must
remember a delete horizon (KIP-534: the batch holds a tombstone or the marker of a transaction
none of whose data is left), the horizon goes in the base timestamp field with attribute bit 0x40,
and the record timestamp deltas are taken from it, as Kafka's ``MemoryRecords.filterTo`` does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

from sdk.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    Record,
    RecordBatch,
    compress,
    encode_headers,
)
from sdk.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CRC_OFFSET,
    CRC_START,
    MAGIC,
)
from sdk.records.varint import encode_varint

__all__ = ["empty_batch", "filtered_batch"]

_CRC = struct.Struct(">I")
_NULL = encode_varint(-1)


def _field(data: bytes | None) -> bytes:
    if data is None:
        return _NULL
    return encode_varint(len(data)) + data


def _encode_record(record: Record, base_timestamp: int, base_offset: int) -> bytes:
    body = b"".join((
        b"\x00",
        encode_varint(record.timestamp - base_timestamp),
        encode_varint(record.offset - base_offset),
        _field(record.key),
        _field(record.value),
        encode_headers(record.headers),
    ))
    return encode_varint(len(body)) + body


def _finish(header_fields: tuple[int, ...], section: bytes) -> bytes:
    out = bytearray(BATCH_HEADER_SIZE)
    out += section
    base_offset, leader_epoch, attributes, last_delta, base_ts, max_ts, pid, epoch, seq, count = (
        header_fields)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, leader_epoch, MAGIC, 0, attributes,
        last_delta, base_ts, max_ts, pid, epoch, seq, count,
    )
    _CRC.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def filtered_batch(batch: RecordBatch, records: Sequence[Record], delete_horizon_ms: int | None) -> bytes:
    """``batch`` holding only ``records`` (at least one), with ``delete_horizon_ms`` if given."""
    attributes = batch.attributes & ~ATTR_DELETE_HORIZON
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = records[0].timestamp
    max_timestamp = batch.max_timestamp if batch.timestamp_type == 1 else max(r.timestamp for r in records)
    section = b"".join(_encode_record(r, base_timestamp, batch.base_offset) for r in records)
    codec = Compression(batch.attributes & ATTR_COMPRESSION_MASK)
    if codec != Compression.NONE:
        section = compress(codec, section)
    return _finish((
        batch.base_offset, batch.partition_leader_epoch, attributes, batch.last_offset_delta,
        base_timestamp, max_timestamp, batch.producer_id, batch.producer_epoch,
        batch.base_sequence, len(records),
    ), section)


def empty_batch(batch: RecordBatch) -> bytes:
    """The header of ``batch`` without records (Kafka's ``writeEmptyHeader``): it keeps the
    producer's id, epoch and sequence range, and the batch's offset range."""
    attributes = batch.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    return _finish((
        batch.base_offset, batch.partition_leader_epoch, attributes, batch.last_offset_delta,
        batch.max_timestamp, batch.max_timestamp, batch.producer_id, batch.producer_epoch,
        batch.base_sequence, 0,
    ), b"")
