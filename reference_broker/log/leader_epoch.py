"""The leader epoch cache of one partition: which leader epoch began at which offset.

Kafka's ``LeaderEpochFileCache`` (KIP-101, KIP-279). Each entry ``(epoch, start_offset)`` says that
records from ``start_offset`` on were written by the leader of ``epoch`` (until the next entry's
start offset). A follower asks the leader (OffsetForLeaderEpoch, or the Fetch response's
``diverging_epoch``) where its last epoch ends there and truncates its log to that offset, which
removes exactly the records the new leader never had.

Invariants: epochs and start offsets both strictly increase along the entries. :meth:`assign` keeps
them by dropping entries an assignment contradicts (Kafka's ``maybeTruncateNonMonotonicEntries``).

File ``leader-epoch-checkpoint`` in the partition directory, Kafka's text format::

    0             <- version
    2             <- number of entries
    0 0           <- "epoch start_offset", one line per entry
    3 1500

replaced atomically whenever the entries change (rarely: once per leader change).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import NamedTuple

from reference_broker.log._files import atomic_write

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET",
           "CheckpointFormatError", "EpochEntry", "LeaderEpochCache"]

log = logging.getLogger("reference_broker.log")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
#: what OffsetForLeaderEpoch answers for an epoch the cache cannot place
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class CheckpointFormatError(ValueError):
    """The ``leader-epoch-checkpoint`` file is not in Kafka's format (names the line at fault)."""


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The entries of one partition, kept in memory and written through to the checkpoint file.

    ``directory=None`` keeps them in memory only (for tests and tools).
    """

    def __init__(self, directory: Path | None, entries: list[EpochEntry] | None = None):
        self.directory = directory
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        #: the epoch of the last entry (None without entries); an attribute, not a property,
        #: because every append compares it with the leader's epoch
        self.latest_epoch: int | None = None
        for entry in entries or ():
            self.assign_in_memory(entry.epoch, entry.start_offset)

    # -- file ----------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / LEADER_EPOCH_CHECKPOINT_FILE

    @staticmethod
    def read_file(path: Path) -> list[EpochEntry] | None:
        """The entries of a checkpoint file; None if there is none. Raises
        :class:`CheckpointFormatError` for a malformed file."""
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError as exc:
            raise CheckpointFormatError(f"{path}: not ASCII text: {exc}") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) < 2:
            raise CheckpointFormatError(f"{path}: expected a version line and a count line")
        try:
            version, count = int(lines[0]), int(lines[1])
        except ValueError:
            raise CheckpointFormatError(f"{path}: version/count lines are not integers") from None
        if version != _VERSION:
            raise CheckpointFormatError(f"{path}: unknown version {version}")
        if count != len(lines) - 2:
            raise CheckpointFormatError(f"{path}: count {count} but {len(lines) - 2} entry lines")
        entries = []
        for number, line in enumerate(lines[2:], start=3):
            fields = line.split(" ")
            if len(fields) != 2:
                raise CheckpointFormatError(f"{path} line {number}: expected 'epoch offset': {line!r}")
            try:
                epoch, offset = int(fields[0]), int(fields[1])
            except ValueError:
                raise CheckpointFormatError(f"{path} line {number}: not integers: {line!r}") from None
            if epoch < 0 or offset < 0:
                raise CheckpointFormatError(f"{path} line {number}: negative epoch or offset")
            entries.append(EpochEntry(epoch, offset))
        return entries

    def write(self, *, sync: bool = True) -> None:
        """Replace the checkpoint file with the current entries (no-op without a directory).

        ``sync=False`` skips the fsyncs, for a file rebuilt from the log (losing it costs a
        rebuild at the next open, nothing else)."""
        path = self.path
        if path is None:
            return
        lines = [str(_VERSION), str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        atomic_write(path, ("\n".join(lines) + "\n").encode("ascii"), sync=sync)

    # -- queries -------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    def previous_epoch(self) -> int | None:
        """The epoch before the latest one (None if fewer than two entries)."""
        return self._epochs[-2] if len(self._epochs) > 1 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote ``offset`` (None before the first entry)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` where ``epoch`` is the largest known
        epoch <= ``requested_epoch`` and the end offset is the start offset of the first epoch
        after it (the log end offset when it is the latest epoch).

        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` for an undefined request or one beyond the
        latest epoch; ``(requested_epoch, first start offset)`` for one older than every entry.
        """
        epochs = self._epochs
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return epochs[higher - 1], self._offsets[higher]

    # -- changes -------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` begins at ``start_offset``; True (and the file rewritten) if that
        changed anything. Entries it contradicts (an epoch at or above ``epoch``, or a start offset
        at or after ``start_offset``) are dropped first."""
        changed = self.assign_in_memory(epoch, start_offset)
        if changed:
            self.write()
        return changed

    def assign_in_memory(self, epoch: int, start_offset: int) -> bool:
        """:meth:`assign` without writing the file (a caller assigning several writes once)."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        epochs, offsets = self._epochs, self._offsets
        if epochs and epoch == epochs[-1] and start_offset >= offsets[-1]:
            return False
        removed = []
        while epochs and (epochs[-1] >= epoch or offsets[-1] >= start_offset):
            removed.append((epochs.pop(), offsets.pop()))
        if removed:
            log.debug("leader epoch entry (%d, %d) replaces %s", epoch, start_offset, removed)
        epochs.append(epoch)
        offsets.append(start_offset)
        self.latest_epoch = epoch
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated to it)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._offsets, end_offset)
        del self._epochs[keep:]
        del self._offsets[keep:]
        self.latest_epoch = self._epochs[-1] if self._epochs else None
        self.write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: entries starting at or before it collapse into
        one, the latest of them, moved to ``start_offset``."""
        offsets = self._offsets
        upto = bisect.bisect_right(offsets, start_offset)
        if upto == 0 or (upto == 1 and offsets[0] == start_offset):
            return
        epoch = self._epochs[upto - 1]
        del self._epochs[:upto]
        del offsets[:upto]
        self._epochs.insert(0, epoch)
        offsets.insert(0, start_offset)
        self.write()

    def clear(self) -> None:
        """Forget every entry (the log was emptied and restarts at a new offset)."""
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self.latest_epoch = None
            self.write()
