"""Read magic v2 record batches: a header view plus the records, read by the one record reader.

``RecordBatch`` parses only the 61-byte header on construction, so a broker or consumer can route,
filter and validate batches without touching records. Iterating reads the records through
:mod:`sdk.records.reader` (after decompressing the records section once).

Every defect raises a specific :class:`~sdk.records.errors.CorruptRecordError`; the reader bounds
all reads by the records section, so lying length fields cannot cause big allocations or long
loops.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c

from sdk.records import reader
from sdk.records.compression import Compression, decompress
from sdk.records.control import ControlRecord, parse_control_record
from sdk.records.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidBatchLengthError,
    InvalidControlRecordError,
    InvalidMagicError,
    InvalidRecordCountError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)
from sdk.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
)
from sdk.records.varint import BytesLike

__all__ = ["Record", "RecordBatch", "iter_batches"]

_INT32 = struct.Struct(">i")
_INT32_MAX = 0x7FFFFFFF


class Record:
    """One record of a batch, with its absolute offset and effective timestamp."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
    ) -> None:
        self.offset, self.timestamp = offset, timestamp
        self.key, self.value, self.headers = key, value, headers

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp == other.timestamp
            and self.key == other.key
            and self.value == other.value
            and self.headers == other.headers
        )

    __hash__ = None  # type: ignore[assignment]  # mutable headers list

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r},"
            f" value={self.value!r}, headers={self.headers!r})"
        )


def _then_raise(records: list[Record], error: CorruptRecordError | None) -> Iterator[Record]:
    """Yield ``records``, then raise ``error`` if there is one: records before a defect are
    handed out before it is reported."""
    yield from records
    if error is not None:
        raise error


class RecordBatch:
    """A view of the v2 batch at ``position`` in ``buffer``; records decode on iteration.

    Header fields are plain attributes. Construction only needs the 61 header bytes;
    :meth:`validate` checks magic, length, completeness and CRC, and iteration does the same
    (CRC once per object) before decoding. The buffer is not copied unless the batch is
    compressed or the buffer is not ``bytes`` (records are then read from one copy of the section).
    """

    __slots__ = (
        "_buffer",
        "_crc_ok",
        "_decoded",
        "_position",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    def __init__(self, buffer: BytesLike, position: int = 0) -> None:
        if position < 0 or len(buffer) - position < BATCH_HEADER_SIZE:
            raise TruncatedBatchError(
                f"need {BATCH_HEADER_SIZE} bytes for a batch header, have {max(0, len(buffer) - position)}",
                position,
            )
        self._buffer = buffer
        self._position = position
        self._crc_ok = False
        self._decoded: tuple[bytes, int, int] | None = None
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = BATCH_HEADER.unpack_from(buffer, position)

    # -- derived header values ---------------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        """Bytes the whole batch occupies: ``batchLength`` plus offset and length fields."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> Compression:
        """Codec of the records section; ids 5-7 raise ``UnsupportedCompressionError``."""
        codec = self.attributes & ATTR_COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise UnsupportedCompressionError(
                f"unknown compression codec id {codec}", self._position + CRC_START
            ) from None

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime (producer's clock), 1 = LogAppendTime (broker's clock)."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        """Written by a transactional producer; consumers may need to skip it if aborted."""
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Holds a control record (transaction marker), never shown to applications."""
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        """Compaction stored a delete horizon in ``base_timestamp`` (KIP-534)."""
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record (also valid after compaction removed records)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Where the next batch starts: a consumer's fetch position after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at int32 max like Java), or -1 if none."""
        if self.base_sequence < 0:
            return -1
        increment = self.last_offset_delta
        if self.base_sequence > _INT32_MAX - increment:
            return increment - (_INT32_MAX - self.base_sequence) - 1
        return self.base_sequence + increment

    @property
    def raw(self) -> memoryview:
        """The batch's bytes in the buffer (what a broker appends to its log), not copied."""
        start = self._position
        return memoryview(self._buffer)[start : start + LOG_OVERHEAD + self.batch_length]

    # -- validation ---------------------------------------------------------------------------

    def _check_frame(self) -> None:
        pos = self._position
        if self.magic != MAGIC:
            raise InvalidMagicError(f"magic {self.magic} is not 2", pos + MAGIC_OFFSET)
        if self.batch_length < MIN_BATCH_LENGTH:
            raise InvalidBatchLengthError(
                f"batchLength {self.batch_length} is below the minimum {MIN_BATCH_LENGTH}", pos + 8
            )
        missing = pos + LOG_OVERHEAD + self.batch_length - len(self._buffer)
        if missing > 0:
            raise TruncatedBatchError(
                f"batchLength {self.batch_length} needs {missing} more bytes than the buffer has",
                pos,
            )

    def _check_crc(self) -> None:
        if self._crc_ok:
            return
        start = self._position + CRC_START
        end = self._position + LOG_OVERHEAD + self.batch_length
        actual = crc32c.crc32c(memoryview(self._buffer)[start:end])
        if actual != self.crc:
            raise CrcMismatchError(
                f"CRC-32C is {actual:#010x}, header says {self.crc:#010x}", self._position + 17
            )
        self._crc_ok = True

    def validate(self) -> None:
        """Raise a ``CorruptRecordError`` subclass unless magic, lengths, CRC and codec are sound.

        Records themselves are checked as they are iterated.
        """
        self._check_frame()
        self._check_crc()
        if self.record_count < 0:
            raise InvalidRecordCountError(f"negative recordCount {self.record_count}", self._position + 57)
        self.compression  # noqa: B018  # raises for codec ids 5-7

    # -- records ------------------------------------------------------------------------------

    def _records_section(self) -> tuple[bytes, int, int]:
        decoded = self._decoded
        if decoded is not None:
            return decoded
        buffer = self._buffer
        start = self._position + BATCH_HEADER_SIZE
        end = self._position + LOG_OVERHEAD + self.batch_length
        codec = self.compression
        if codec == Compression.NONE:
            if type(buffer) is bytes:
                decoded = (buffer, start, end)
            else:
                data = bytes(memoryview(buffer)[start:end])
                decoded = (data, 0, len(data))
        elif start == end and self.record_count == 0:
            decoded = (b"", 0, 0)
        else:
            data = decompress(codec, memoryview(buffer)[start:end])
            decoded = (data, 0, len(data))
        self._decoded = decoded
        return decoded

    def records_section(self, *, check_crc: bool = True) -> tuple[bytes, int, int]:
        """Validate the batch (CRC optional) and return its records section as ``(data, start,
        end)``: ``bytes`` holding the (decompressed) records at ``data[start:end]``."""
        self._check_frame()
        if check_crc:
            self._check_crc()
        if self.record_count < 0:
            raise InvalidRecordCountError(f"negative recordCount {self.record_count}", self._position + 57)
        return self._records_section()

    def iter_records(self, *, check_crc: bool = True) -> Iterator[Record]:
        """Validate the batch (CRC optional) at once and yield its records; a defect in the
        records is raised after the records before it.

        Offsets are ``base_offset + offsetDelta``; timestamps are ``base_timestamp + delta``, or
        ``max_timestamp`` for every record when the batch uses LogAppendTime.
        """
        data, start, end = self.records_section(check_crc=check_crc)
        log_append_time = self.max_timestamp if self.attributes & ATTR_TIMESTAMP_TYPE else None
        base_offset, base_timestamp = self.base_offset, self.base_timestamp
        records, error = reader.core.read_records(
            data, start, end, self.record_count, base_offset, base_timestamp, log_append_time, Record
        )
        return _then_raise(records, error)

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def control_record(self) -> ControlRecord:
        """The marker of a control batch (its first record's key and value, parsed)."""
        if not self.is_control:
            raise ValueError("not a control batch")
        for record in self:
            return parse_control_record(record.key, record.value)
        raise InvalidControlRecordError("control batch has no records", self._position)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, records={self.record_count},"
            f" size={self.size_in_bytes}, compression={self.attributes & ATTR_COMPRESSION_MASK},"
            f" transactional={self.is_transactional}, control={self.is_control})"
        )


def iter_batches(buffer: BytesLike, position: int = 0) -> Iterator[RecordBatch]:
    """Walk the batches concatenated in ``buffer`` (a fetch response's records, a log segment).

    Stops silently at an incomplete last batch, because brokers cut fetch responses at a byte
    limit; a batch whose length field is below the v2 minimum, or whose magic is not 2, is an
    error since no amount of further bytes would make it valid.
    """
    size = len(buffer)
    pos = position
    while size - pos >= LOG_OVERHEAD:
        (length,) = _INT32.unpack_from(buffer, pos + 8)
        has_magic = size - pos > MAGIC_OFFSET
        if has_magic and buffer[pos + MAGIC_OFFSET] != MAGIC:
            raise InvalidMagicError(f"magic {buffer[pos + MAGIC_OFFSET]} is not 2", pos + MAGIC_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise InvalidBatchLengthError(
                f"batchLength {length} is below the minimum {MIN_BATCH_LENGTH}", pos + 8
            )
        end = pos + LOG_OVERHEAD + length
        if end > size:
            return
        yield RecordBatch(buffer, pos)
        pos = end
