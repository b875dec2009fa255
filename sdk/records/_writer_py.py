"""The record writer in Python: the rules of appending records to a batch, and the twin of
``sdk.records._writer`` (the same writer in C), which is used instead when it is built.

A ``RecordsWriter`` holds a batch's ``bytearray`` (the 61 header bytes, which
``RecordBatchBuilder.build`` writes, then the records), the record count, the first and the
largest timestamp and the size limit. It is the base class of ``RecordBatchBuilder``.

Rules, which the C writer follows:

* A record is its length, attributes (always 0), timestamp delta (from the first record's
  timestamp), offset delta (the record count so far), key, value and headers, each integer a
  zigzag varint (Kafka's ``DefaultRecord``); a null key, value or header value has length -1.
* ``append`` refuses a record (returns None, changes nothing) that would take the buffer past
  ``limit``; the first record is always taken, so an oversized record gets a batch of its own.
* Every input is checked before anything is written: ``timestamp_ms`` an int (``TypeError``) in
  int64 (``ValueError``, also for a delta outside int64) or None for now; key, value and header
  values None or C-contiguous bytes-like objects (``TypeError``); headers an iterable of
  ``(str, value)`` pairs (a pair of another size: ``ValueError``; a key not str: ``TypeError``).
  A failing append leaves no trace.

The append path here is the producer's hottest loop when the C writer is missing: it looks
varints up in a precomputed table and joins each record's parts in a single copy. It has two
paths with identical bytes. The fast one covers what a producer sends almost always (no headers,
bytes key and value and record shorter than the varint table, a timestamp delta of 0 to 1023 ms,
fewer than 8192 records): one branch on key/value nullness, one ``join`` of table entries.
Everything else takes the general path. tests/records/test_writer.py checks both paths and the C
writer against each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from time import time_ns as _time_ns
from typing import Any

from sdk.records.header import BATCH_HEADER_SIZE
from sdk.records.sizes import record_size_bound
from sdk.records.varint import ENCODED_CACHE_SIZE, SMALL_VARINTS, BytesLike, encode_varint

__all__ = ["RecordSizer", "RecordsWriter", "encode_headers"]

_NULL = b"\x01"  # zigzag varint of -1: a null key/value/header value
_NO_HEADERS = b"\x00"
_ATTRS = b"\x00"  # record attributes: unused by Kafka, always 0
_CACHED = ENCODED_CACHE_SIZE
# attributes byte + timestamp-delta varint, for the deltas a linger window produces
_ATTRS_TS_SIZE = 1024
_ATTRS_TS = [_ATTRS + SMALL_VARINTS[n] for n in range(_ATTRS_TS_SIZE)]
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _field(obj: Any, what: str) -> BytesLike:
    """A key or value that is not ``bytes``: its bytes, if it is a C-contiguous bytes-like object."""
    if type(obj) is bytearray:
        return obj
    try:
        return memoryview(obj).cast("B")
    except TypeError:
        raise TypeError(f"{what} must be a bytes-like object or None, not {type(obj).__name__}") from None


def encode_headers(headers: Iterable[tuple[str, BytesLike | None]]) -> bytes:
    """Encoded header section of a record: count varint, then each key and nullable value."""
    parts: list[BytesLike] = []
    count = 0
    for pair in headers:
        items = pair if type(pair) is tuple else tuple(pair)
        if len(items) != 2:
            raise ValueError(f"a header must be a (key, value) pair, not {len(items)} items")
        hkey, hvalue = items
        if not isinstance(hkey, str):
            raise TypeError(f"a header key must be a str, not {type(hkey).__name__}")
        kb = hkey.encode("utf-8")
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            if type(hvalue) is not bytes:
                hvalue = _field(hvalue, "a header value")
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
        count += 1
    parts.insert(0, encode_varint(count))
    return b"".join(parts)


def _check_timestamp(timestamp_ms: Any) -> None:
    if not isinstance(timestamp_ms, int):
        raise TypeError(f"timestamp_ms must be an int or None, not {type(timestamp_ms).__name__}")
    if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
        raise ValueError("timestamp_ms does not fit in an int64")


class RecordsWriter:
    """A batch's records, encoded as they are appended (``limit``: the batch size bound)."""

    __slots__ = ("_base_timestamp", "_buf", "_count", "_limit", "_max_timestamp")

    #: The 61 header bytes (written by ``RecordBatchBuilder.build``), then the records.
    _buf: bytearray
    _count: int
    #: The first record's timestamp and the largest one (-1 before the first record).
    _base_timestamp: int
    _max_timestamp: int
    #: A record that would take ``_buf`` past this many bytes is refused (not the first one).
    _limit: int

    def __new__(cls, *args: Any, **kwargs: Any) -> RecordsWriter:
        # The state is set up here, so a subclass's __init__ (with arguments of its own) need
        # not call this one's: it sets ``_limit`` itself.
        self = object.__new__(cls)
        self._limit = sys.maxsize
        self._buf = bytearray(BATCH_HEADER_SIZE)  # header written by RecordBatchBuilder.build
        self._count = 0
        self._base_timestamp = -1
        self._max_timestamp = -1
        return self

    def __init__(self, limit: int | None = None) -> None:
        # No limit is an unreachable one, so the hot path compares without a None test.
        self._limit = sys.maxsize if limit is None else limit

    def append(
        self,
        timestamp_ms: int | None,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Iterable[tuple[str, BytesLike | None]] | None = (),
        *,
        _enc: list[bytes] = SMALL_VARINTS,
        _attr_ts: list[bytes] = _ATTRS_TS,
        _join: Callable[[Iterable[BytesLike]], bytes] = b"".join,
    ) -> int | None:
        """Add a record; return its offset delta, or None (nothing added) if the batch is full.

        ``timestamp_ms`` None means now. Headers are ``(str, bytes | None)`` pairs (None: none). (The
        underscore keywords are constants bound as locals for speed, not part of the API.)
        """
        count = self._count
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
            _check_timestamp(timestamp_ms)
        delta = timestamp_ms - self._base_timestamp if count else 0
        if (
            headers
            or delta < 0
            or (key is not None and type(key) is not bytes)
            or (value is not None and type(value) is not bytes)
        ):
            return self._append_general(count, timestamp_ms, delta, key, value, headers)
        # The fast path: bytes or None fields and every varint a table entry. A delta, offset
        # delta, key, value or record too large for its table raises IndexError before anything
        # changed (only the negative delta, which would index from the end, needs a test), and
        # the general path takes over.
        try:
            if key is None:
                if value is None:
                    record = _attr_ts[delta] + _enc[count] + b"\x01\x01\x00"
                else:
                    record = _join((_attr_ts[delta], _enc[count], b"\x01", _enc[len(value)], value, b"\x00"))
            elif value is None:
                record = _join((_attr_ts[delta], _enc[count], _enc[len(key)], key, b"\x01\x00"))
            else:
                record = _join(
                    (_attr_ts[delta], _enc[count], _enc[len(key)], key, _enc[len(value)], value, b"\x00")
                )
            size = len(record)
            length = _enc[size]
        except IndexError:
            return self._append_general(count, timestamp_ms, delta, key, value, headers)
        buf = self._buf
        if count:
            if len(buf) + len(length) + size > self._limit:
                return None
            buf += length
            buf += record
            if timestamp_ms > self._max_timestamp:
                self._max_timestamp = timestamp_ms
        else:
            buf += length
            buf += record
            self._base_timestamp = self._max_timestamp = timestamp_ms
        self._count = count + 1
        return count

    def _append_general(
        self,
        count: int,
        timestamp_ms: int,
        delta: int,
        key: Any,
        value: Any,
        headers: Iterable[tuple[str, BytesLike | None]] | None,
    ) -> int | None:
        """``append`` for any record: headers, fields and deltas of any size (varints encoded as
        needed), any bytes-like key and value. Same contract and same bytes as the fast path
        where both apply."""
        enc = SMALL_VARINTS
        try:
            delta_bytes = _ATTRS_TS[delta] if 0 <= delta < _ATTRS_TS_SIZE else _ATTRS + encode_varint(delta)
        except ValueError:
            raise ValueError("the timestamp delta does not fit in a varlong") from None
        if key is None:
            key_len = _NULL
            key = b""
        else:
            if type(key) is not bytes:
                key = _field(key, "key")
            size = len(key)
            key_len = enc[size] if size < _CACHED else encode_varint(size)
        if value is None:
            value_len = _NULL
            value = b""
        else:
            if type(value) is not bytes:
                value = _field(value, "value")
            size = len(value)
            value_len = enc[size] if size < _CACHED else encode_varint(size)
        record = b"".join(
            (
                delta_bytes,
                enc[count] if count < _CACHED else encode_varint(count),
                key_len,
                key,
                value_len,
                value,
                encode_headers(headers) if headers else _NO_HEADERS,
            )
        )
        size = len(record)
        length = enc[size] if size < _CACHED else encode_varint(size)
        buf = self._buf
        if count and len(buf) + len(length) + size > self._limit:
            return None
        buf += length
        buf += record
        # State changes only once the record is in: a rejected append leaves no trace.
        if count:
            if timestamp_ms > self._max_timestamp:
                self._max_timestamp = timestamp_ms
        else:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        self._count = count + 1
        return count

    def append_run(
        self,
        records: list[tuple[Any, ...]],
        index: int,
        timestamp_ms: int | None,
        partition: int | None,
        keyless: bool,
        room: int,
        produced_room: int,
    ) -> tuple[int, int]:
        """Append ``send_many``'s prepared records ``(partition, key, value, headers, size)``
        from ``records[index]`` on while they take the same way: the same ``partition``, sizes
        adding up to at most ``room`` (free producer memory), and with ``keyless`` only keyless
        records while fewer than ``produced_room`` bytes were added (the sticky partition's
        share). Stops at the first record that does not, or does not fit in the batch. Returns
        the index after the last record appended and the sum of their sizes."""
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        index = max(index, 0)
        added = 0
        append = self.append
        while index < len(records):
            item = records[index]
            if type(item) is not tuple or len(item) != 5:
                raise TypeError("a prepared record must be a (partition, key, value, headers, size) tuple")
            record_partition, key, value, headers, size = item
            if record_partition != partition or added + size > room:
                break
            if keyless and (key is not None or added >= produced_room):
                break
            if append(timestamp_ms, key, value, headers) is None:
                break
            added += size
            index += 1
        return index, added


class RecordSizer:
    """``record_size_bound`` with a limit: ``size(key, value, headers)`` is the bound, and calls
    ``too_large(size)`` first (which is expected to raise) when it is over ``limit``. The producer
    sizes every record with it."""

    __slots__ = ("limit", "too_large")

    def __init__(self, limit: int, too_large: Callable[[int], object]) -> None:
        self.limit = limit
        self.too_large = too_large

    def size(self, key: Any, value: Any, headers: Any) -> int:
        size = record_size_bound(key, value, headers)
        if size > self.limit:
            self.too_large(size)
        return size
