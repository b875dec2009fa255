"""Result types of partition-log operations (what produce and fetch handlers consume)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

__all__ = ["AppendResult", "FileSlice", "ReadResult", "RecordError", "SliceReadResult", "record_errors_of"]


class RecordError(NamedTuple):
    """One record a produced batch was refused for (KIP-467): its index in the batch and why.

    Validation errors that name records (Kafka's ``RecordValidationException``) carry these in a
    ``record_errors`` attribute; the produce handler lists them in the partition's response, so a
    client can tell the records at fault from the good ones of the same batch.
    """

    batch_index: int
    message: str


def record_errors_of(exc: BaseException) -> tuple[RecordError, ...]:
    """The records ``exc`` names (see :class:`RecordError`); empty for errors about a whole batch."""
    return getattr(exc, "record_errors", ())


class AppendResult(NamedTuple):
    """Outcome of an append, as a ProduceResponse partition needs it.

    ``duplicate`` is True when an idempotent retry matched a cached batch: nothing was written
    and the offsets are those of the original append. ``log_append_time_ms`` is -1 unless the
    topic uses ``LogAppendTime``. ``record_count`` counts offsets taken.

    A named tuple (immutable like the frozen dataclass it replaces) because one is built per
    append, and a frozen dataclass's ``__init__`` cost about 2 us of the append's fixed cost.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass
class ReadResult:
    """Whole batches read from the log plus the partition state a FetchResponse reports.

    ``data`` is empty when nothing qualified. ``next_offset`` is the offset after the last batch
    returned (the fetch offset when empty). ``aborted_transactions`` is filled only when asked
    (``with_aborted=True``): ``(producer_id, first_offset)`` pairs for read_committed consumers.
    """

    data: bytes | memoryview
    first_offset: int
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(frozen=True)
class FileSlice:
    """A byte range of a segment file for ``os.sendfile``; ``fd`` is owned by the read result."""

    fd: int
    path: Path
    position: int
    length: int


@dataclass
class SliceReadResult:
    """Like :class:`ReadResult` but as file ranges; call :meth:`close` (or use ``with``) after.

    Each slice carries its own duplicated descriptor, so a segment deleted by retention while the
    network layer is still sending stays readable until :meth:`close`.
    """

    slices: list[FileSlice]
    first_offset: int
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None
    size: int = field(default=0)

    def close(self) -> None:
        """Close the duplicated descriptors."""
        for piece in self.slices:
            try:
                os.close(piece.fd)
            except OSError:
                pass
        self.slices = []

    def __enter__(self) -> SliceReadResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
