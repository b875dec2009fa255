"""Errors raised while reading record batches.

Every defect in record bytes raises a subclass of :class:`CorruptRecordError`, itself a
``sdk.protocol.errors.DecodeError``: the broker and the consumer catch one type for "these bytes are
bad" and never see ``IndexError``/``struct.error`` leaking from the parser. The subclasses exist so
that tests, logs and the broker's error mapping can tell *which* defect was found (a CRC mismatch is
retried by Kafka clients; a bad magic byte means the peer speaks another format).

``offset`` is a byte position: inside the caller's buffer for batch-level defects; for
record-level ones, inside the caller's buffer when an uncompressed batch was given as ``bytes``,
otherwise inside the (decompressed) copy of the records section.
"""

from __future__ import annotations

from sdk.protocol.errors import DecodeError

__all__ = [
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionLimitError",
    "InvalidBatchLengthError",
    "InvalidControlRecordError",
    "InvalidMagicError",
    "InvalidRecordCountError",
    "InvalidRecordError",
    "InvalidVarintError",
    "TruncatedBatchError",
    "UnsupportedCompressionError",
]


class CorruptRecordError(DecodeError):
    """Record-batch bytes that are not a valid magic v2 batch; ``.reason`` and ``.offset`` say why."""

    def __init__(self, reason: str, offset: int | None = None) -> None:
        super().__init__(reason, offset)


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends before the batch header or before ``batchLength`` bytes."""


class InvalidBatchLengthError(CorruptRecordError):
    """``batchLength`` is smaller than a v2 header, so the batch cannot be framed at all."""


class InvalidMagicError(CorruptRecordError):
    """The magic byte is not 2; legacy message sets (v0/v1) are not supported."""


class CrcMismatchError(CorruptRecordError):
    """The CRC-32C stored in the header does not match the bytes it covers."""


class UnsupportedCompressionError(CorruptRecordError):
    """The attributes name a compression codec id that Kafka does not define (5-7)."""


class DecompressionError(CorruptRecordError):
    """The codec library rejected the compressed records section (garbage or truncated stream)."""


class DecompressionLimitError(DecompressionError):
    """Decompressing would exceed the size limit: a bomb, or a batch too big to hold in memory."""


class InvalidRecordCountError(CorruptRecordError):
    """``recordCount`` is negative or disagrees with the records actually present."""


class InvalidRecordError(CorruptRecordError):
    """A record inside the batch is malformed (lengths overrun, bad header, size mismatch)."""


class InvalidVarintError(InvalidRecordError):
    """A varint/varlong is longer than its type allows or is cut off by the end of the data."""


class InvalidControlRecordError(CorruptRecordError):
    """A control batch whose record is not a well-formed control key/value."""
