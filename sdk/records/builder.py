"""Build magic v2 record batches (what a producer sends and what the broker writes for markers).

The builder encodes each record into one ``bytearray`` as it is appended, so ``append`` knows the
exact batch size (a producer asks "does this record still fit?") and ``build`` only writes the
61-byte header, compresses and computes the CRC. Appending is the producer's hottest loop: it is
inherited from the record writer (``sdk.records.writer``), the C one when it is built, so
``builder.append(...)`` runs no Python code; ``sdk/records/_writer_py.py`` states its rules.
"""

from __future__ import annotations

import struct
import sys

import crc32c

from sdk.records._writer_py import encode_headers
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
from sdk.records.writer import RecordsWriter

__all__ = ["RecordBatchBuilder", "encode_headers"]

_CRC = struct.Struct(">I")


class RecordBatchBuilder(RecordsWriter):
    """Accumulates records into one v2 batch; :meth:`build` returns the wire bytes.

    ``batch_size`` bounds the *uncompressed* size (header included), like Kafka's
    ``batch.size``; compression can only shrink the result. The first record is always accepted
    so a single oversized record still gets a batch of its own.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_compression",
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
        # The writer's state is set up by its __new__; only the limit is ours to set. No limit is
        # an unreachable one, so the append path compares without a None test.
        self._limit = sys.maxsize if batch_size is None else batch_size

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
