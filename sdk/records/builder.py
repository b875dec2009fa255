"""Build magic v2 record batches (what a producer sends and what the broker writes for markers).

The builder encodes each record into one ``bytearray`` as it is appended, so ``append`` knows the
exact batch size (a producer asks "does this record still fit?") and ``build`` only writes the
61-byte header, compresses and computes the CRC. The append path is the producer's hottest loop:
it looks varints up in a precomputed table and joins each record's parts in a single copy.

``append`` has two paths that produce identical bytes. The fast one covers what a producer sends
almost always (no headers, key, value and record shorter than the varint table, a timestamp delta
of 0 to 1023 ms, fewer than 8192 records): one branch on key/value nullness, one ``join`` of
table entries. Everything else (headers, long fields, negative or large deltas) takes the general
path. ``tests/records/test_builder_fast_path.py`` checks the two against each other.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterable
from time import time_ns as _time_ns

import crc32c

from sdk.records.compression import Compression, compress
from sdk.records.header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
)
from sdk.records.varint import ENCODED_CACHE_SIZE, SMALL_VARINTS, BytesLike, encode_varint

__all__ = ["RecordBatchBuilder", "encode_headers"]

_CRC = struct.Struct(">I")
_NULL = b"\x01"  # zigzag varint of -1: a null key/value/header value
_NO_HEADERS = b"\x00"
_ATTRS = b"\x00"  # record attributes: unused by Kafka, always 0
_CACHED = ENCODED_CACHE_SIZE
# attributes byte + timestamp-delta varint, for the deltas a linger window produces
_ATTRS_TS_SIZE = 1024
_ATTRS_TS = [_ATTRS + SMALL_VARINTS[n] for n in range(_ATTRS_TS_SIZE)]


def encode_headers(headers: Iterable[tuple[str, BytesLike | None]]) -> bytes:
    """Encoded header section of a record: count varint, then each key and nullable value."""
    parts: list[BytesLike] = []
    count = 0
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
        count += 1
    parts.insert(0, encode_varint(count))
    return b"".join(parts)


class RecordBatchBuilder:
    """Accumulates records into one v2 batch; :meth:`build` returns the wire bytes.

    ``batch_size`` bounds the *uncompressed* size (header included), like Kafka's
    ``batch.size``; compression can only shrink the result. The first record is always accepted
    so a single oversized record still gets a batch of its own.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_buf",
        "_compression",
        "_count",
        "_limit",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
    )

    def __init__(
        self,
        compression: Compression | int = Compression.NONE,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        timestamp_type: int = 0,
        batch_size: int | None = None,
    ) -> None:
        self._compression = Compression(compression)
        if timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 (create) or 1 (log append): {timestamp_type}")
        attributes = int(self._compression)
        if timestamp_type:
            attributes |= ATTR_TIMESTAMP_TYPE
        if is_transactional:
            attributes |= ATTR_TRANSACTIONAL
        if is_control:
            attributes |= ATTR_CONTROL
        self._attributes = attributes
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        # No limit is an unreachable one, so the hot path compares without a None test.
        self._limit = sys.maxsize if batch_size is None else batch_size
        self._buf = bytearray(BATCH_HEADER_SIZE)  # header written by build()
        self._count = 0
        self._base_timestamp = -1
        self._max_timestamp = -1

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def compression(self) -> Compression:
        """Codec the batch will be compressed with."""
        return self._compression

    def estimated_size(self) -> int:
        """Bytes of the batch if built now, before compression (exact when uncompressed)."""
        return len(self._buf)

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp idempotence fields late: the producer assigns sequences when the batch is drained."""
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def set_transactional(self) -> None:
        """Mark the batch transactional late, as the producer state is (when it is drained)."""
        self._attributes |= ATTR_TRANSACTIONAL

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
        delta = timestamp_ms - self._base_timestamp if count else 0
        if headers or delta < 0:
            return self._append_general(count, timestamp_ms, delta, key, value, headers)
        # The fast path: every varint is a table entry. A delta, offset delta, key, value or
        # record too large for its table raises IndexError before anything changed (only the
        # negative delta, which would index from the end, needs a test), and the general path
        # takes over. A key or value of the wrong type fails in join, also before the buffer is
        # touched.
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
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Iterable[tuple[str, BytesLike | None]] | None,
    ) -> int | None:
        """``append`` for any record: headers, fields and deltas of any size (varints encoded as
        needed). Same contract and same bytes as the fast path where both apply."""
        enc = SMALL_VARINTS
        if key is None:
            key_len = _NULL
            key = b""
        else:
            size = len(key)
            key_len = enc[size] if size < _CACHED else encode_varint(size)
        if value is None:
            value_len = _NULL
            value = b""
        else:
            size = len(value)
            value_len = enc[size] if size < _CACHED else encode_varint(size)
        record = b"".join(
            (
                _ATTRS_TS[delta] if 0 <= delta < _ATTRS_TS_SIZE else _ATTRS + encode_varint(delta),
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

    def build(self) -> bytes:
        """The finished batch: header, (compressed) records, CRC. May be called more than once."""
        buf = self._buf
        count = self._count
        attributes = self._attributes
        if self._compression != Compression.NONE:
            # A copy rather than a memoryview: a view kept alive by an exception's traceback
            # would stop this bytearray from growing on the next append.
            out = bytearray(BATCH_HEADER_SIZE)
            out += compress(self._compression, buf[BATCH_HEADER_SIZE:])
        else:
            out = buf
        try:
            BATCH_HEADER.pack_into(
                out,
                0,
                self._base_offset,
                len(out) - LOG_OVERHEAD,
                self._partition_leader_epoch,
                MAGIC,
                0,
                attributes,
                count - 1,
                self._base_timestamp,
                self._max_timestamp,
                self._producer_id,
                self._producer_epoch,
                self._base_sequence,
                count,
            )
        except struct.error as exc:
            raise ValueError(f"a header field is out of range for its type: {exc}") from exc
        _CRC.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)

    def __repr__(self) -> str:
        return (
            f"RecordBatchBuilder(compression={self._compression.name}, records={self._count},"
            f" size={len(self._buf)})"
        )
