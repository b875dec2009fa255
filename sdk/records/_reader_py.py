"""The record reader in Python: the rules every reader of record bytes follows, and the twin of
``sdk.records._reader`` (the same reader in C), which is used instead when it is built.

A records section is ``count`` records that must fill ``data[start:end]`` exactly. One loop
(:func:`_read_section`) reads it; its records go to one of three outputs: :func:`walk_records` (facts
for validating an append, no objects), or :func:`read_records`, which builds
``sdk.records.Record``s or the consumer's ``ConsumerRecord``s (those before a minimum offset left
out).

Rules, which the C reader follows statement by statement:

* Every read is bounded by the record's own end, the record length by the section's end, so
  nothing is read from the bytes after a record or section, and lying lengths cannot cause big
  allocations or long loops.
* Varints are zigzag int32 (at most 5 bytes), the timestamp delta a varlong (at most 10); bits
  beyond the type's width are dropped, as Java's int/long arithmetic does. A longer encoding or
  one cut off by the bound raises ``InvalidVarintError`` at the varint.
* A negative key, value or header value length means null (as Kafka reads it); a negative record
  length or header count, a header key that is not UTF-8, or a field overrunning the record
  raises ``InvalidRecordError`` at the record; so does a record whose fields do not fill its
  length exactly.
* Fewer records than ``count`` before the section's end, bytes left after ``count`` records, and
  a negative ``count`` raise ``InvalidRecordCountError``.

Both readers raise the same class with the same reason and offset for the same bytes;
tests/records/test_reader.py checks that on generated, mutated and random input. The record
outputs return ``(records, error)``: the records read before the first error, and that error (or
None), so a caller can hand out the good records first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sdk.records.errors import (
    CorruptRecordError,
    InvalidRecordCountError,
    InvalidRecordError,
)
from sdk.records.varint import INT32_MASK, INT64_MASK, BytesLike, decode_bounded

__all__ = ["read_records", "walk_records"]

#: One record's fields: timestamp delta, offset delta, key position and length, value position
#: and length (negative lengths: null), headers.
Fields = tuple[int, int, int, int, int, int, list[tuple[str, bytes | None]]]


def _read_headers(
    data: BytesLike, pos: int, limit: int, record_start: int
) -> tuple[list[tuple[str, bytes | None]], int]:
    """The header section at ``data[pos:limit]`` (``limit``: the record's end)."""
    count, pos = decode_bounded(data, pos, limit, 5, INT32_MASK)
    if count < 0:
        raise InvalidRecordError(f"negative header count {count}", record_start)
    if count > (limit - pos) // 2:  # each header takes at least two bytes
        raise InvalidRecordError(f"{count} headers cannot fit in the record", record_start)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        size, pos = decode_bounded(data, pos, limit, 5, INT32_MASK)
        if size < 0 or size > limit - pos:
            raise InvalidRecordError(f"header key length {size} is invalid", record_start)
        try:
            key = str(data[pos : pos + size], "utf-8")  # any buffer: bytes, bytearray, memoryview
        except UnicodeDecodeError:
            raise InvalidRecordError("header key is not UTF-8", record_start) from None
        pos += size
        size, pos = decode_bounded(data, pos, limit, 5, INT32_MASK)
        if size < 0:
            headers.append((key, None))
            continue
        if size > limit - pos:
            raise InvalidRecordError(f"header value length {size} overruns the record", record_start)
        headers.append((key, bytes(data[pos : pos + size])))
        pos += size
    return headers, pos


def _sized_field(data: BytesLike, pos: int, limit: int, record_start: int, what: str) -> tuple[int, int, int]:
    """The key or value at ``pos`` (a length varint, then that many bytes unless it is negative,
    null): ``(where its bytes start, its length, the position after it)``."""
    size, pos = decode_bounded(data, pos, limit, 5, INT32_MASK)
    if size > limit - pos:
        raise InvalidRecordError(f"{what} length {size} overruns the record", record_start)
    return pos, size, pos + size if size > 0 else pos


def _read_section(data: BytesLike, start: int, end: int, count: int) -> Iterator[Fields]:
    """Yield the fields of the ``count`` records that must fill ``data[start:end]`` exactly."""
    if start < 0 or start > end or end > len(data):
        raise ValueError(f"records section [{start}, {end}) is outside the {len(data)}-byte buffer")
    if count < 0:
        raise InvalidRecordCountError(f"negative recordCount {count}", start)
    varint = decode_bounded
    pos = start
    for index in range(count):
        record_start = pos
        if pos >= end:
            raise InvalidRecordCountError(
                f"recordCount is {count} but the records section holds {index}", pos
            )
        length, pos = varint(data, pos, end, 5, INT32_MASK)
        if length < 0:
            raise InvalidRecordError(f"negative record length {length}", record_start)
        if length > end - pos:
            raise InvalidRecordError(f"record length {length} overruns the batch", record_start)
        record_end = pos + length
        if pos >= record_end:
            raise InvalidRecordError(f"record length {length} is too short for its fields", record_start)
        # attributes (unused), timestamp delta, offset delta
        ts_delta, pos = varint(data, pos + 1, record_end, 10, INT64_MASK)
        offset_delta, pos = varint(data, pos, record_end, 5, INT32_MASK)
        key, key_size, pos = _sized_field(data, pos, record_end, record_start, "key")
        value, value_size, pos = _sized_field(data, pos, record_end, record_start, "value")
        if pos < record_end and data[pos] == 0:
            headers: list[tuple[str, bytes | None]] = []
            pos += 1
        else:
            headers, pos = _read_headers(data, pos, record_end, record_start)
        if pos != record_end:
            raise InvalidRecordError(
                f"record length {length} disagrees with its fields ({pos - record_end + length} bytes)",
                record_start,
            )
        yield ts_delta, offset_delta, key, key_size, value, value_size, headers
    if pos != end:
        raise InvalidRecordCountError(
            f"{end - pos} bytes remain after the {count} records of recordCount", pos
        )


def walk_records(
    data: BytesLike, start: int, end: int, count: int
) -> tuple[int, int | None, int | None, int, int]:
    """``(count, smallest and largest timestamp delta, index of the first record whose offset
    delta is not its index, index of the first null key)``: what validating an append needs.
    The deltas are None and the indexes -1 where there is no such record."""
    min_ts: int | None = None
    max_ts: int | None = None
    gap = -1
    null_key = -1
    for index, (ts_delta, offset_delta, _, key_size, _, _, _) in enumerate(
        _read_section(data, start, end, count)
    ):
        if max_ts is None or ts_delta > max_ts:
            max_ts = ts_delta
        if min_ts is None or ts_delta < min_ts:
            min_ts = ts_delta
        if offset_delta != index and gap < 0:
            gap = index
        if key_size < 0 and null_key < 0:
            null_key = index
    return count, min_ts, max_ts, gap, null_key


def read_records(
    data: bytes,
    start: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    record_class: type,
    consumer: tuple[int, int, str, int] | None = None,
) -> tuple[list[Any], CorruptRecordError | None]:
    """``record_class`` objects for the records, made without running ``__init__``, and the
    error that stopped the reading (None when none did).

    The class has ``offset``, ``timestamp``, ``key``, ``value`` and ``headers`` slots (a list);
    the timestamp is ``fixed_timestamp`` when given (LogAppendTime), else the base plus the
    record's delta. With ``consumer``, ``(timestamp_type, min_offset, topic, partition)``, the
    class is ``ConsumerRecord``: records before ``min_offset`` are left out, headers are a tuple,
    and the ``topic``, ``partition``, ``timestamp_type``, ``checksum`` (None) and serialized size
    slots (-1 for null) are set too.
    """
    if type(data) is not bytes:
        data = bytes(data)  # keys and values are bytes, whatever the buffer
    new = object.__new__
    out: list[Any] = []
    timestamp_type, min_offset, topic, partition = consumer or (0, 0, "", 0)
    try:
        for ts_delta, offset_delta, key, key_size, value, value_size, headers in _read_section(
            data, start, end, count
        ):
            offset = base_offset + offset_delta
            if consumer is not None and offset < min_offset:
                continue
            record: Any = new(record_class)
            record.offset = offset
            record.timestamp = base_timestamp + ts_delta if fixed_timestamp is None else fixed_timestamp
            record.key = None if key_size < 0 else data[key : key + key_size]
            record.value = None if value_size < 0 else data[value : value + value_size]
            if consumer is None:
                record.headers = headers
            else:
                record.headers = tuple(headers)
                record.topic = topic
                record.partition = partition
                record.timestamp_type = timestamp_type
                record.checksum = None
                record.serialized_key_size = key_size if key_size >= 0 else -1
                record.serialized_value_size = value_size if value_size >= 0 else -1
            out.append(record)
    except (InvalidRecordError, InvalidRecordCountError) as exc:
        return out, exc
    return out, None
