"""Walk a batch's records without building them: what a broker needs to validate an append.

Validating a produce request means checking every record's framing (its length, and that its
fields fill exactly that length), that offset deltas run 0..n-1, that timestamps are in range and
what the largest one is, and for compacted topics that every record has a key. Decoding each
record into a :class:`~sdk.records.Record` (slicing key, value and headers out of the buffer) does
all that too, but costs a Python object and two slices per record, which made full decoding the
broker's whole produce cost. :func:`walk_records` reads only the varints (length, timestamp delta,
offset delta, key length, value length, header count) and steps over the key and value bytes;
headers, which are rare, are parsed exactly as the decoder parses them.

Producers write batches whose records mostly share one layout: same record length, same key and
value lengths, no headers, only the timestamp and offset deltas changing. Walking those one record
at a time in Python still costs about a microsecond per record, which is most of a broker's
produce latency. So once a record is walked, the records after it are checked as *columns*: with
a common size ``s`` the byte at offset ``k`` of every record is ``data[first + k :: s]``, one C-level
slice, compared against what the first record's layout requires (constant length and key/value
length bytes, a zero header count, the exact offset-delta encodings for the expected indexes, and
one- or two-byte non-negative timestamp deltas). A run is only ever accepted for records that
then parse exactly like the walked one; where a record differs, the run stops there and that
record is walked normally. Attempts start small and double while they succeed, and back off when
they fail, so irregular batches cost little more than the plain walk.

It raises exactly what iterating the batch raises for the same bytes (the same
:class:`~sdk.records.errors.CorruptRecordError` subclasses in the same situations; the tests check
this on generated and mutated batches), so a buffer it accepts also decodes, and the facts it
returns (:class:`RecordsWalk`) are those decoding would have shown.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from sdk.records.batch import _Z1, _Z2, _read_headers
from sdk.records.compression import decompress
from sdk.records.errors import (
    InvalidRecordCountError,
    InvalidRecordError,
    UnsupportedCompressionError,
)
from sdk.records.header import (
    ATTR_COMPRESSION_MASK,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
)
from sdk.records.varint import BytesLike, decode_varint, decode_varlong

__all__ = ["RecordsWalk", "walk_batch_records", "walk_records"]

_RECORD_COUNT_OFFSET = 57
_MAX_CODEC = 4
# Sentinels outside any varlong's range, so the first record always replaces them.
_NO_MIN = 1 << 64
_NO_MAX = -(1 << 64)

# -- column (run) checks ---------------------------------------------------------------------

#: An offset delta ``i`` is a ``w``-byte varint for ``i < _OD_LIMIT[w]`` (zigzag doubles it).
_OD_LIMIT = (0, 64, 8192, 1 << 20)
#: Records per batch the precomputed offset-delta columns cover; later ones are walked.
_OD_TABLE_SIZE = 1 << 18
#: Bytes a one-byte non-negative timestamp delta may be (even: zigzag of a value >= 0).
_TS1_BYTES = bytes(range(0, 0x80, 2))
#: First and second byte of a two-byte non-negative timestamp delta.
_TS2_FIRST = bytes(range(0x80, 0x100, 2))
_TS2_SECOND = bytes(range(0x80))
_FIRST_RUN = 16
_MAX_BACKOFF = 1024
_LITTLE_ENDIAN = sys.byteorder == "little"

_od_columns: dict[int, list[bytes]] = {}


def _offset_delta_columns(width: int) -> list[bytes]:
    """``columns[k][i]`` is byte ``k`` of the ``width``-byte varint of offset delta ``i``.

    Built on first use by repeating patterns (no per-entry Python loop): byte 0 of ``2i`` cycles
    every 64 values, byte ``k`` holds each value for ``2**(7k - 1)`` consecutive ``i``.
    """
    columns = _od_columns.get(width)
    if columns is not None:
        return columns
    size = min(_OD_LIMIT[width], _OD_TABLE_SIZE)
    columns = []
    for k in range(width):
        more = 0x80 if k < width - 1 else 0
        if k == 0:
            period = bytes(((2 * i) & 0x7F) | more for i in range(64))
        else:
            period = b"".join(bytes([v | more]) * (1 << (7 * k - 1)) for v in range(128))
        columns.append((period * (size // len(period) + 1))[:size])
    _od_columns[width] = columns
    return columns


class _Layout(NamedTuple):
    """Where the fields of a walked record are, for checking later records against it."""

    size: int
    constant: list[tuple[int, int]]  # (offset in record, byte every record must have there)
    ts_offset: int
    ts_width: int
    od_offset: int
    od_columns: list[bytes]
    od_limit: int
    null_key: bool


def _varint_width(data: BytesLike, pos: int) -> int:
    width = 1
    while data[pos] >= 0x80:
        pos += 1
        width += 1
    return width


def _layout(data: BytesLike, start: int, size: int) -> _Layout | None:
    """The layout of the (already validated) record at ``start``, or None when it has headers or
    its timestamp or offset delta is too wide for the column checks."""
    pos = start
    lw = _varint_width(data, pos)
    ts_offset = lw + 1
    ts_width = _varint_width(data, start + ts_offset)
    od_offset = ts_offset + ts_width
    od_width = _varint_width(data, start + od_offset)
    if ts_width > 2 or od_width > 3:
        return None
    key_offset = od_offset + od_width
    key_size, after = decode_varint(data, start + key_offset)
    key_width = after - start - key_offset
    value_offset = key_offset + key_width + max(key_size, 0)
    value_size, after = decode_varint(data, start + value_offset)
    value_width = after - start - value_offset
    if value_offset + value_width + max(value_size, 0) != size - 1 or data[start + size - 1] != 0:
        return None  # the record has headers: they are walked, never taken as a layout
    offsets = [
        *range(lw),
        *range(key_offset, key_offset + key_width),
        *range(value_offset, value_offset + value_width),
        size - 1,  # the header count, 0
    ]
    od_limit = min(_OD_LIMIT[od_width], _OD_TABLE_SIZE)
    return _Layout(
        size,
        [(k, data[start + k]) for k in offsets],
        ts_offset,
        ts_width,
        od_offset,
        _offset_delta_columns(od_width),
        od_limit,
        key_size < 0,
    )


def _run_matches(data: bytes | bytearray, first: int, n: int, index: int, lay: _Layout) -> bool:
    """Whether the ``n`` records from ``first`` (record ``index`` of the batch) all have ``lay``.

    Each check is one strided slice: every constant byte, the exact offset-delta bytes for
    indexes ``index .. index + n - 1``, and timestamp-delta bytes of the same width, non-negative.
    Records that pass parse exactly like the layout's record, so they are valid and fill ``s``.
    """
    s = lay.size
    stop = first + n * s
    for k, byte in lay.constant:
        if data[first + k : stop : s].count(byte) != n:
            return False
    od = first + lay.od_offset
    for k, column in enumerate(lay.od_columns):
        if data[od + k : stop : s] != column[index : index + n]:
            return False
    ts = first + lay.ts_offset
    if lay.ts_width == 1:
        return not data[ts:stop:s].translate(None, _TS1_BYTES)
    return not (
        data[ts:stop:s].translate(None, _TS2_FIRST) or data[ts + 1 : stop : s].translate(None, _TS2_SECOND)
    )


def _run_timestamps(data: bytes | bytearray, first: int, n: int, lay: _Layout) -> tuple[int, int]:
    """Smallest and largest timestamp delta of ``n`` records that passed :func:`_run_matches`."""
    s = lay.size
    stop = first + n * s
    ts = first + lay.ts_offset
    low = data[ts:stop:s]
    if lay.ts_width == 1:
        return min(low) >> 1, max(low) >> 1
    # Two bytes: order them as one 16-bit number (second byte high), whose order is the delta's.
    pairs = bytearray(2 * n)
    pairs[0 if _LITTLE_ENDIAN else 1 :: 2] = low
    pairs[1 if _LITTLE_ENDIAN else 0 :: 2] = data[ts + 1 : stop : s]
    numbers = memoryview(pairs).cast("H")
    smallest, largest = min(numbers), max(numbers)
    return (
        (((smallest >> 8) << 7) | (smallest & 0x7F)) >> 1,
        (((largest >> 8) << 7) | (largest & 0x7F)) >> 1,
    )


def _matching_prefix(data: bytes | bytearray, first: int, n: int, index: int, lay: _Layout) -> int:
    """How many of the ``n`` records from ``first`` match ``lay`` before the first that does not.

    Matching is a prefix property, so a binary search over it works, each step checking only the
    records not yet known to match.
    """
    if _run_matches(data, first, n, index, lay):
        return n
    s = lay.size
    good, bad = 0, n
    while bad - good > 1:
        mid = (good + bad) // 2
        if _run_matches(data, first + good * s, mid - good, index + good, lay):
            good = mid
        else:
            bad = mid
    return good


class RecordsWalk(NamedTuple):
    """What one pass over a batch's records found.

    Timestamps are deltas from the batch's ``base_timestamp`` (``None`` when there are no
    records). ``first_offset_gap`` is the index of the first record whose offset delta is not its
    index (-1 when they run 0..n-1, as a producer must write them; compaction leaves gaps in
    batches read from a log). ``first_null_key`` is the index of the first record without a key
    (-1 when all have one; compacted topics require keys).
    """

    count: int
    min_timestamp_delta: int | None
    max_timestamp_delta: int | None
    first_offset_gap: int
    first_null_key: int


def walk_records(data: BytesLike, start: int, end: int, count: int) -> RecordsWalk:
    """Walk the ``count`` records that must fill ``data[start:end]`` exactly.

    ``data`` is a records section (decompressed if it was compressed); pass ``bytes`` or
    ``bytearray`` for speed. Raises ``InvalidRecordCountError`` when the section holds fewer or
    more records than ``count``, ``InvalidRecordError`` (or ``InvalidVarintError``) for a record
    whose fields do not fill its length exactly or that is cut off. One- and two-byte varints are
    table lookups, longer ones a call, as in the decoder.
    """
    if count < 0:
        raise InvalidRecordCountError(f"negative recordCount {count}", start)
    z1 = _Z1
    z2 = _Z2
    read_varint = decode_varint
    read_varlong = decode_varlong
    pos = start
    record_start = start
    index = 0
    min_ts = _NO_MIN
    max_ts = _NO_MAX
    gap = -1
    null_key = -1
    runs = type(data) is bytes or type(data) is bytearray
    next_run = 1  # index of the first record a run may start at (backs off after failures)
    backoff = 1
    try:
        while index < count:
            record_start = pos
            if pos >= end:
                raise InvalidRecordCountError(
                    f"recordCount is {count} but the records section holds {index}", pos
                )
            # length (varint)
            b = data[pos]
            if b < 0x80:
                length = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    length = z2[(c << 7) + b]
                    pos += 2
                else:
                    length, pos = read_varint(data, pos)
            record_end = pos + length
            if record_end > end:
                raise InvalidRecordError(f"record length {length} overruns the batch", record_start)
            # attributes (int8, unused), then timestamp delta (varlong)
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = z1[b]
                pos += 2
            else:
                ts_delta, pos = read_varlong(data, pos + 1)
            if ts_delta > max_ts:
                max_ts = ts_delta
            if ts_delta < min_ts:
                min_ts = ts_delta
            # offset delta (varint)
            b = data[pos]
            if b < 0x80:
                offset_delta = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    offset_delta = z2[(c << 7) + b]
                    pos += 2
                else:
                    offset_delta, pos = read_varint(data, pos)
            if offset_delta != index and gap < 0:
                gap = index
            # key length (varint, negative = null), key bytes stepped over
            b = data[pos]
            if b < 0x80:
                size = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    size = z2[(c << 7) + b]
                    pos += 2
                else:
                    size, pos = read_varint(data, pos)
            if size >= 0:
                pos += size
            elif null_key < 0:
                null_key = index
            # value length, value bytes stepped over
            b = data[pos]
            if b < 0x80:
                size = z1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    size = z2[(c << 7) + b]
                    pos += 2
                else:
                    size, pos = read_varint(data, pos)
            if size > 0:
                pos += size
            # headers: nearly always none; otherwise parsed as the decoder does (UTF-8 keys)
            if data[pos] == 0:
                pos += 1
            else:
                _, pos = _read_headers(data, pos, record_end)  # type: ignore[arg-type]
            if pos != record_end:
                raise InvalidRecordError(
                    f"record length {length} disagrees with its fields ({pos - record_end + length} bytes)",
                    record_start,
                )
            index += 1
            if (
                runs
                and index >= next_run
                and index < count
                and pos < end
                and data[pos] == data[record_start]
                and offset_delta == index - 1
                and data[pos - 1] == 0
            ):
                # The next record may share this one's layout: check as many as match as columns.
                lay = _layout(data, record_start, pos - record_start)
                matched = 0
                if lay is not None:
                    size = lay.size
                    chunk = _FIRST_RUN
                    while True:
                        n = min(chunk, count - index, (end - pos) // size, lay.od_limit - index)
                        if n <= 0:
                            break
                        m = _matching_prefix(data, pos, n, index, lay)  # type: ignore[arg-type]
                        if m:
                            low, high = _run_timestamps(data, pos, m, lay)  # type: ignore[arg-type]
                            if high > max_ts:
                                max_ts = high
                            if low < min_ts:
                                min_ts = low
                            if lay.null_key and null_key < 0:
                                null_key = index
                            pos += m * size
                            index += m
                            matched += m
                        if m < n:
                            break
                        chunk *= 2
                backoff = 1 if matched >= _FIRST_RUN else min(backoff * 2, _MAX_BACKOFF)
                next_run = index + backoff
    except IndexError:
        if record_start >= end:
            raise InvalidRecordCountError(
                f"recordCount is {count} but the records section holds {index}", record_start
            ) from None
        raise InvalidRecordError(
            "record is cut off by the end of the records section", record_start
        ) from None
    except InvalidRecordCountError:
        raise
    except InvalidRecordError:
        # Past the section's end, whatever was misread belongs to the next batch: the count lied.
        if record_start >= end:
            raise InvalidRecordCountError(
                f"recordCount is {count} but the records section holds {index}", record_start
            ) from None
        raise
    if pos != end:
        raise InvalidRecordCountError(
            f"{end - pos} bytes remain after the {count} records of recordCount", pos
        )
    if count == 0:
        return RecordsWalk(0, None, None, -1, -1)
    return RecordsWalk(count, min_ts, max_ts, gap, null_key)


def walk_batch_records(buffer: BytesLike, position: int = 0) -> RecordsWalk:
    """:func:`walk_records` over the batch at ``position``, decompressing its records once.

    The batch's framing (magic, length, CRC) must already have been checked, e.g. by
    ``RecordBatch.validate``; this reads only the attributes, the record count and the records.
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
