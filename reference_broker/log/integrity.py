"""Detecting damaged batches in segment files, and describing the damage.

``scan_batches`` walks a file's batch framing (never the records); ``frame_problem`` and
``content_problem`` are the checks a batch must pass before it is served: magic 2, a sane length
inside the file, CRC-32C, and the base offset the previous batch implies (the base offset is not
covered by the CRC, so continuity is its only protection). Damage found anywhere becomes a
:class:`Corruption` on its segment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reference_broker.log._files import pread_exact
from sdk.records import BATCH_HEADER_SIZE, CorruptRecordError, RecordBatch

__all__ = [
    "Corruption",
    "FramingError",
    "SegmentCorrupt",
    "content_problem",
    "frame_problem",
    "offset_mismatch",
    "scan_batches",
]

_LOG_OVERHEAD = 12
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LOG_OVERHEAD
_WINDOW = 64 * 1024


class FramingError(Exception):
    """The bytes at ``position`` cannot be framed as a v2 batch (torn write or corruption)."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"{reason} at position {position}")
        self.position = position
        self.reason = reason


@dataclass
class Corruption:
    """A damaged byte range of a segment that must never be served.

    ``last_offset`` is None when the damage runs to the end of the segment (the batch framing is
    broken, so nothing after it can be located).
    """

    file: Path
    position: int
    first_offset: int
    last_offset: int | None
    reason: str

    def covers(self, offset: int) -> bool:
        """Whether ``offset`` lies in the damaged range."""
        return offset >= self.first_offset and (self.last_offset is None or offset <= self.last_offset)

    def __str__(self) -> str:
        return self._describe(str(self.file))

    def client_text(self) -> str:
        """The description without the data directory's location (for error messages)."""
        return self._describe(self.file.name)

    def _describe(self, file: str) -> str:
        last = "end of segment" if self.last_offset is None else str(self.last_offset)
        return (f"corrupt data in {file} at position {self.position}"
                f" (offsets {self.first_offset}..{last}): {self.reason}")


def scan_batches(
    fd: int, start: int, end: int, *, with_data: bool = False
) -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(position, batch)`` for each batch in ``[start, end)`` of a file.

    Without ``with_data`` only the header fields of the yielded batches are usable (the view may
    cut the records off); with it the whole batch is in the view and may be validated. Raises
    :class:`FramingError` where a batch cannot be framed; CRC is not checked here.
    """
    pos = start
    buf = b""
    buf_start = start
    while pos < end:
        rel = pos - buf_start
        if rel + BATCH_HEADER_SIZE > len(buf):
            if end - pos < BATCH_HEADER_SIZE:
                raise FramingError(pos, f"truncated batch header ({end - pos} bytes)")
            buf = pread_exact(fd, min(_WINDOW, end - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < BATCH_HEADER_SIZE:
                raise FramingError(pos, "file shorter than expected")
        batch = RecordBatch(buf, rel)
        if batch.magic != 2:
            raise FramingError(pos, f"magic byte {batch.magic} is not 2")
        if batch.batch_length < _MIN_BATCH_LENGTH:
            raise FramingError(pos, f"batch length {batch.batch_length} is too small")
        size = batch.size_in_bytes
        if pos + size > end:
            raise FramingError(pos, f"batch of {size} bytes runs past the end ({end})")
        if with_data and rel + size > len(buf):
            buf = pread_exact(fd, max(_WINDOW, size) if pos + _WINDOW <= end else end - pos, pos)
            buf_start, rel = pos, 0
            if len(buf) < size:
                raise FramingError(pos, "file shorter than expected")
            batch = RecordBatch(buf, 0)
        yield pos, batch
        pos += size


class SegmentCorrupt(Exception):
    """Raised by segment reads that hit a recorded :class:`Corruption`."""

    def __init__(self, corruption: Corruption):
        super().__init__(str(corruption))
        self.corruption = corruption


def offset_mismatch(base_offset: int, expected: int, gaps: bool) -> bool:
    """Whether a batch's base offset breaks offset continuity (forward gaps allowed with ``gaps``)."""
    return base_offset < expected if gaps else base_offset != expected


def frame_problem(batch: RecordBatch | None, position: int, end: int) -> str | None:
    if batch is None:
        return "truncated batch header"
    if batch.magic != 2:
        return f"magic byte {batch.magic} is not 2"
    if batch.batch_length < _MIN_BATCH_LENGTH:
        return f"batch length {batch.batch_length} is too small"
    if position + batch.size_in_bytes > end:
        return f"batch of {batch.size_in_bytes} bytes runs past the end of the file"
    return None


def content_problem(batch: RecordBatch, expected: int, *, gaps: bool = False) -> str | None:
    """Why ``batch`` must not be served, or None. ``gaps``: the log is compacted, so a batch may
    start after ``expected`` (the cleaner removed the batches between), never before it."""
    if offset_mismatch(batch.base_offset, expected, gaps):
        return f"base offset {batch.base_offset}, expected {expected}"
    try:
        batch.validate()
    except CorruptRecordError as exc:
        return str(exc)
    return None
