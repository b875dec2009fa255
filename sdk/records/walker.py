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
record is walked normally. A failed check also says where it failed, so one check finds how far
a run reaches. The first check covers twice what the previous run reached (everything, at first:
a producer's batch usually matches to its end), the next one the rest; attempts that match little
back off, so irregular batches cost little more than the plain walk. Where offset deltas grow a
byte (records 64 and 8192), the run goes on with the layout widened to match.

:func:`walk_records` first asks ``sdk.records._walk``, the same walk compiled from C (built when
the package is installed, where a compiler is present): it returns this module's answer for
well-formed records at a few nanoseconds per record, and declines everything else (every error,
unusual encodings), which this module then walks and reports as described here. That made the
walk the cheapest part of a produce request's validation instead of its largest.
:func:`walk_records_python` is the pure-Python walk on its own, which the tests hold the C walk to.

The Python walk raises exactly what iterating the batch raises for the same bytes (the same
:class:`~sdk.records.errors.CorruptRecordError` subclasses in the same situations; the tests check
this on generated and mutated batches), so a buffer it accepts also decodes, and the facts it
returns (:class:`RecordsWalk`) are those decoding would have shown.
"""

from __future__ import annotations

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
from sdk.records.varint import BytesLike, decode_varint, decode_varlong, encode_varint

try:
    from sdk.records._walk import walk_records as _compiled_walk  # type: ignore[import-not-found]  # C, no stub
except ImportError:  # built without a compiler: the Python walk alone
    _compiled_walk = None

__all__ = ["RecordsWalk", "walk_batch_records", "walk_records", "walk_records_python"]

#: Whether the C walk is in use (``sdk.records._walk`` was built).
COMPILED = _compiled_walk is not None

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
#: Translation tables mapping the bytes above to 0 and every other byte to 1 (to find the first
#: record whose timestamp delta does not fit a run).
_TS1_FLAGS = bytes(0 if b in _TS1_BYTES else 1 for b in range(256))
_TS2_FIRST_FLAGS = bytes(0 if b in _TS2_FIRST else 1 for b in range(256))
_TS2_SECOND_FLAGS = bytes(0 if b in _TS2_SECOND else 1 for b in range(256))
#: ``_UPTO[b]`` is every byte up to ``b``, ``_FROM[b]`` every byte from ``b`` (deletion sets).
_UPTO = [bytes(range(b + 1)) for b in range(256)]
_FROM = [bytes(range(b, 256)) for b in range(256)]
#: Translation tables: ``_EQUAL_MASK[b]`` maps ``b`` to 0xFF and every other byte to 0x00,
#: ``_OTHER_MASK[b]`` the reverse (only high bytes of two-byte timestamp deltas, < 0x80, are used).
_EQUAL_MASK = [bytes(b) + b"\xff" + bytes(255 - b) for b in range(0x80)]
_OTHER_MASK = [b"\xff" * b + b"\x00" + b"\xff" * (255 - b) for b in range(0x80)]
#: Records the first check after a miss covers; a run at least this long ends the backoff.
_FIRST_RUN = 16
_MAX_BACKOFF = 1024
#: Records one column check covers at most: the length of the :func:`_repeated` columns, which bounds
#: their memory (8 KiB for each byte value that occurs as a constant).
_MAX_RUN = 8192
_NO_RUN = (0, 0, 0)

_od_columns: dict[int, list[bytes]] = {}
_repeats: list[bytes | None] = [None] * 256


def _repeated(byte: int) -> bytes:
    """``byte`` repeated ``_MAX_RUN`` times: what a constant column must equal (a prefix of).

    Comparing with ``==`` is a ``memcmp``, cheaper than counting the byte in the column.
    """
    repeated = _repeats[byte]
    if repeated is None:
        repeated = _repeats[byte] = bytes((byte,)) * _MAX_RUN
    return repeated


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
    """Where the fields of a walked record are (or of one :func:`_widened` from it), for checking
    later records against it."""

    size: int
    constant: tuple[tuple[int, bytes], ...]  # (offset in record, _repeated(byte it must have))
    ts_offset: int
    ts_width: int
    od_offset: int
    od_columns: list[bytes]
    od_limit: int


def _length_field(data: BytesLike, pos: int, constant: list[int]) -> int:
    """Step over a key or value (length varint, then that many bytes) at ``pos``, adding the
    length varint's positions to ``constant``; where it ends."""
    b = data[pos]
    if b < 0x80:
        size = _Z1[b]
        constant.append(pos)
        pos += 1
    else:
        c = data[pos + 1]
        if c < 0x80:
            size = _Z2[(c << 7) + b]
            constant += (pos, pos + 1)
            pos += 2
        else:
            size, after = decode_varint(data, pos)
            constant += range(pos, after)
            pos = after
    return pos + size if size > 0 else pos


def _layout(data: BytesLike, start: int, size: int) -> _Layout | None:
    """The layout of the (already validated) record at ``start``, or None when it has headers or
    its timestamp or offset delta is too wide for the column checks."""
    pos = start
    while data[pos] >= 0x80:
        pos += 1
    pos += 2  # past the attributes byte
    constant = list(range(start, pos - 1))
    ts = pos
    while data[pos] >= 0x80:
        pos += 1
    pos += 1
    od = pos
    while data[pos] >= 0x80:
        pos += 1
    pos += 1
    if od - ts > 2 or pos - od > 3:
        return None
    od_width = pos - od
    pos = _length_field(data, pos, constant)  # key
    pos = _length_field(data, pos, constant)  # value
    if pos != start + size - 1 or data[pos] != 0:
        return None  # the record has headers: they are walked, never taken as a layout
    constant.append(pos)  # the header count, 0
    repeats = _repeats
    return _Layout(
        size,
        tuple([(k - start, repeats[data[k]] or _repeated(data[k])) for k in constant]),
        ts - start,
        od - ts,
        od - start,
        _offset_delta_columns(od_width),
        min(_OD_LIMIT[od_width], _OD_TABLE_SIZE),
    )


def _widened(lay: _Layout) -> _Layout | None:
    """``lay`` with an offset delta one byte wider: the layout a run that stopped at
    ``lay.od_limit`` most likely continues with (record 64, 8192), derived instead of walking that
    record. Only a run can confirm it, which checks every byte this layout fixes."""
    s, constant, ts, ts_width, od, od_columns, _ = lay
    od_width = len(od_columns) + 1
    if od_width > 3:
        return None
    lw = ts - 1
    length = encode_varint(s - lw + 1)
    shift = len(length) - lw  # for the fields before the offset delta; one more for those after
    return _Layout(
        s + shift + 1,
        tuple(
            [(k, _repeats[b] or _repeated(b)) for k, b in enumerate(length)]
            + [(k + shift + 1, repeated) for k, repeated in constant if k >= lw]
        ),
        ts + shift,
        ts_width,
        od + shift,
        _offset_delta_columns(od_width),
        min(_OD_LIMIT[od_width], _OD_TABLE_SIZE),
    )


def _agreeing(got: bytes | bytearray, want: bytes) -> int:
    """How many leading bytes of two equally long, different columns agree.

    Halving by slice comparison (``memcmp``) narrows a long column to a window holding the first
    difference; within it, the highest set bit of the XOR, read big-endian, is that difference
    (``int.from_bytes`` is too slow to convert a whole long column).
    """
    good, bad = 0, len(got)
    while bad - good > 512:
        mid = (good + bad) >> 1
        if got[good:mid] == want[good:mid]:
            good = mid
        else:
            bad = mid
    differ = int.from_bytes(got[good:bad], "big") ^ int.from_bytes(want[good:bad], "big")
    return bad - ((differ.bit_length() + 7) >> 3)


def _first_bad(column: bytes | bytearray, flags: bytes) -> int:
    """Index of the first byte of ``column`` that ``flags`` maps to 1; its length if none does."""
    bad = column.translate(flags).find(1)
    return len(column) if bad < 0 else bad


def _smallest(column: bytes | bytearray) -> int:
    """``min(column)``, cheaply when the first byte is the minimum (rising timestamps).

    ``min`` costs a Python int per byte; deleting every byte from the first one's value up is one
    C-level pass, and only the bytes below it, if any, are iterated.
    """
    guess = column[0]
    below = column.translate(None, _FROM[guess])
    return min(below) if below else guess


def _largest(column: bytes | bytearray) -> int:
    """``max(column)``, cheaply when the last byte is the maximum (as :func:`_smallest`)."""
    guess = column[-1]
    above = column.translate(None, _UPTO[guess])
    return max(above) if above else guess


def _run(data: bytes | bytearray, first: int, n: int, index: int, lay: _Layout) -> tuple[int, int, int]:
    """How many of the ``n`` records from ``first`` (record ``index`` of the batch) have ``lay``
    before the first that does not, and their smallest and largest timestamp delta.

    Each check is one strided slice: every constant byte, the exact offset-delta bytes for
    indexes ``index .. index + n - 1``, and timestamp-delta bytes of the same width, non-negative.
    Records that pass parse exactly like the layout's record, so they are valid and fill ``s``.
    A check that fails tells where (:func:`_agreeing`, :func:`_first_bad`), and later checks
    cover only the records before that, so one call finds the matching prefix.
    """
    s, constant, ts, ts_width, od, od_columns, _ = lay
    stop = first + n * s
    for k, repeated in constant:
        got = data[first + k : stop : s]
        if got != repeated[:n]:
            n = _agreeing(got, repeated[:n])
            if not n:
                return _NO_RUN
            stop = first + n * s
    od += first
    for column in od_columns:
        got = data[od:stop:s]
        want = column[index : index + n]
        if got != want:
            n = _agreeing(got, want)
            if not n:
                return _NO_RUN
            stop = first + n * s
        od += 1
    ts += first
    low = data[ts:stop:s]
    if ts_width == 1:
        if low.translate(None, _TS1_BYTES):
            n = _first_bad(low, _TS1_FLAGS)
            if not n:
                return _NO_RUN
            low = low[:n]
        return n, _smallest(low) >> 1, _largest(low) >> 1
    high = data[ts + 1 : stop : s]
    if low.translate(None, _TS2_FIRST) or high.translate(None, _TS2_SECOND):
        n = min(_first_bad(low, _TS2_FIRST_FLAGS), _first_bad(high, _TS2_SECOND_FLAGS))
        if not n:
            return _NO_RUN
        low = low[:n]
        high = high[:n]
    # Two bytes: the second (high) byte orders first; the first byte only among equal high bytes.
    bottom = _smallest(high)
    top = _largest(high)
    if bottom == top:
        lows = highs = low
    else:
        # Rising timestamps put the records with the largest high byte last and those with the
        # smallest first: then their first bytes are a slice. Otherwise mask the first bytes of
        # the other records, 0xFF for the minimum and 0x00 for the maximum (real first bytes are
        # 0x80..0xFE, so neither can win).
        last = high.rfind(bottom) + 1
        if high.count(bottom, 0, last) == last:
            lows = low[:last]
        else:
            mask = int.from_bytes(high.translate(_OTHER_MASK[bottom]), "big")
            lows = (int.from_bytes(low, "big") | mask).to_bytes(n, "big")
        since = high.find(top)
        if high.count(top, since) == n - since:
            highs = low[since:]
        else:
            mask = int.from_bytes(high.translate(_EQUAL_MASK[top]), "big")
            highs = (int.from_bytes(low, "big") & mask).to_bytes(n, "big")
    return (
        n,
        ((bottom << 7) | (_smallest(lows) & 0x7F)) >> 1,
        ((top << 7) | (_largest(highs) & 0x7F)) >> 1,
    )


class RecordsWalk(NamedTuple):
    """What one pass over a batch's records found.

    Timestamps are deltas from the batch's ``base_timestamp`` (``None`` when there are no
    records). ``first_offset_gap`` is the index of the first record whose offset delta is not its
    index (-1 when they run 0..n-1, as a producer must write them; compaction leaves gaps in
    batches read from a log). ``first_null_key`` is the index of the first record without a key
    (-1 when all have one; compacted topics require keys).
    """

    count: int  # type: ignore[assignment]  # a field named count shadows tuple.count, by design
    min_timestamp_delta: int | None
    max_timestamp_delta: int | None
    first_offset_gap: int
    first_null_key: int


def walk_records(data: BytesLike, start: int, end: int, count: int) -> RecordsWalk:
    """Walk the ``count`` records that must fill ``data[start:end]`` exactly (see
    :func:`walk_records_python` for what is checked and raised): the C walk's answer when it
    gives one, else the Python walk's."""
    if _compiled_walk is not None:
        found = _compiled_walk(data, start, end, count)
        if found is not None:
            return RecordsWalk._make(found)
    return walk_records_python(data, start, end, count)


def walk_records_python(data: BytesLike, start: int, end: int, count: int) -> RecordsWalk:
    """Walk the ``count`` records that must fill ``data[start:end]`` exactly, in Python.

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
    reach = count  # records the last run matched
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
                _, pos = _read_headers(data, pos, record_end)  # type: ignore[arg-type]  # any BytesLike indexes alike
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
                # (Their keys are null only if this one's is, so the first null key is known.)
                lay = _layout(data, record_start, pos - record_start)
                matched = 0
                # Twice the last run (everything at first): where runs are short, columns much
                # longer than a run would cost more to slice than the run saves.
                n = max(_FIRST_RUN, 2 * reach)
                while lay is not None:
                    size = lay.size
                    limit = min(count, index + (end - pos) // size, lay.od_limit)
                    m = 0
                    while index < limit:
                        n = min(n, limit - index, _MAX_RUN)
                        m, low, high = _run(data, pos, n, index, lay)  # type: ignore[arg-type]  # BytesLike slices alike
                        if m:
                            if high > max_ts:
                                max_ts = high
                            if low < min_ts:
                                min_ts = low
                            pos += m * size
                            index += m
                            matched += m
                        if m < n:
                            break
                        n = count  # the rest
                    if index != lay.od_limit or m == 0 or index >= count:
                        break
                    lay = _widened(lay)
                    n = count
                reach = matched
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
