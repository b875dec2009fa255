"""The three per-segment index files, in Kafka's on-disk formats (big-endian).

* ``.index`` (:class:`OffsetIndex`): sparse, 8-byte entries ``int32 relative offset, int32
  position``. An entry maps the *last* offset of a batch to the file position where that batch
  starts (Kafka 3.x), one entry per ``index.interval.bytes`` of appended data. A lookup takes the
  greatest entry <= the target and scans batch headers forward from there.
* ``.timeindex`` (:class:`TimeIndex`): 12-byte entries ``int64 timestamp, int32 relative offset``.
  Timestamps are the segment's running maximum, so entries strictly increase; the offset is the
  last offset of the batch that set the maximum. The final entry (written when the segment is
  rolled or closed) is therefore the segment's largest timestamp.
* ``.txnindex`` (:class:`TransactionIndex`): 34-byte aborted-transaction entries ``int16 version,
  int64 producer id, int64 first offset, int64 last offset, int64 last stable offset``, stored in
  the segment holding the ABORT marker.

Entries live in memory (``array`` for the two sparse indexes); loading returns a problem string
instead of raising when the file is damaged so the segment can rebuild the index from its log.

Write-behind (offset and time index): a produce request of one large batch creates an entry in
both indexes, and writing each through cost two ``pwrite`` system calls per append next to the one
for the data. So new entries stay in memory and :meth:`_SparseIndex.write_pending` appends the
unwritten ones in one write; the segment calls it once ``WRITE_BEHIND_ENTRIES`` have accumulated,
before every fsync, on close, and when the segment stops being the active one (roll/close). Why
losing the unwritten tail in a crash is safe:

* The file is always a prefix of the in-memory entries, and a sparse index missing its newest
  entries is still correct: a lookup takes the floor entry and scans batch headers forward, so it
  only scans further. (Entries are never read back from the file once in memory: the file is
  only loaded by a segment that has not loaded or created its indexes yet.)
* Recovery trusts an index file only for segments wholly below the recovery point. The recovery
  point passes a segment only after :meth:`LogSegment.flush` (which writes the pending entries
  before the fsync) ran once the segment stopped taking appends, so those files are complete,
  including the time index's final entry (the segment's maximum timestamp, which
  :meth:`TimeIndex.read_last_entry` reports for a closed segment). Every other segment, and always
  the last one, is validated after an unclean shutdown and its indexes are rebuilt from the log.
* A clean shutdown (``.clean_shutdown``) leaves complete files: closing writes the tail.
* Without recovery (``recover=False`` on a crashed log) the last segment's tail check takes the
  maximum timestamp from the time index's last entry plus a scan from the offset index's last
  entry. The segment writes the time index's pending entries before the offset index's, so the
  time index file never ends at an earlier batch than the offset index file and that scan misses
  no batch.
* Rebuilding (``reset``) replaces memory and file together; pending entries of the old content
  are dropped, never written over the new file.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from reference_broker.log._files import pwrite_all

__all__ = ["AbortedTxn", "OffsetIndex", "TimeIndex", "TransactionIndex"]

_BIG_ENDIAN = sys.byteorder == "big"


class _IndexFile:
    """Lazily opened read-write file descriptor for one index file of fixed-size entries."""

    ENTRY_SIZE: int

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None
        #: written since the last fsync (the descriptor may have been closed since)
        self._unsynced = False
        #: called whenever the descriptor is used, so the owner can count its open files
        self.on_use: Callable[[], None] | None = None

    def _read_entries(self) -> bytes | str:
        """The file's bytes, or why they cannot be entries (missing, torn)."""
        raw = _read(self.path)
        if raw is None:
            return "missing"
        if len(raw) % self.ENTRY_SIZE:
            return f"size {len(raw)} is not a multiple of {self.ENTRY_SIZE}"
        return raw

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if self.on_use is not None:
            self.on_use()
        return self._fd

    def _write_at(self, data: bytes, position: int) -> None:
        pwrite_all(self._file(), data, position)
        self._unsynced = True

    def _rewrite(self, data: bytes) -> None:
        fd = self._file()
        self._unsynced = True
        os.ftruncate(fd, 0)
        pwrite_all(fd, data, 0)

    def create_empty(self) -> None:
        """Create the file (empty) so a fresh segment has its full set of files."""
        self._file()

    def flush(self) -> None:
        """fsync the file if it was written through this object (reopening it if it was closed
        since)."""
        if self._fd is not None or self._unsynced:
            os.fsync(self._file())
            self._unsynced = False

    def close(self) -> None:
        """Close the descriptor; the object can still reopen it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _int_array(code: str, raw: bytes) -> array:
    values = array(code)
    values.frombytes(raw)
    if not _BIG_ENDIAN:
        values.byteswap()
    return values


def _strictly_increasing(values: array) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


#: Unwritten offset index entries at which the segment writes both indexes' tails (64 entries:
#: 512 bytes of ``.index``, at most 768 of ``.timeindex``).
WRITE_BEHIND_ENTRIES = 64


class _SparseIndex(_IndexFile):
    """An index file whose entries are two parallel arrays, written behind (module docstring).

    ``_written`` counts the leading entries already in the file; the file never holds more.
    """

    ENTRY_SIZE: int
    _ENTRY: struct.Struct
    _CODES: tuple[str, str]  # array type codes of the two fields

    def __init__(self, path: Path, max_bytes: int):
        super().__init__(path)
        self.max_entries = max(1, max_bytes // self.ENTRY_SIZE)
        self._written = 0
        first, second = self._CODES
        self._set_columns(array(first), array(second))

    def __len__(self) -> int:
        return len(self._columns()[0])

    def _loaded(self, first: array, second: array) -> None:
        """Take the entries read from the file (all of them are written, by definition)."""
        self._set_columns(first, second)
        self._written = len(first)

    def _columns(self) -> tuple[array, array]:
        """The two arrays, in the field order of an entry on disk."""
        raise NotImplementedError

    def _set_columns(self, first: array, second: array) -> None:
        raise NotImplementedError

    def floor(self, key: int) -> tuple[int, int] | None:
        """The entry with the greatest first field (relative offset, timestamp) <= ``key``."""
        first, second = self._columns()
        i = bisect.bisect_right(first, key) - 1
        if i < 0:
            return None
        return first[i], second[i]

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries, in memory and in the file (index rebuild)."""
        first, second = self._CODES
        self._set_columns(array(first, (e[0] for e in entries)), array(second, (e[1] for e in entries)))
        self._rewrite_all()

    @property
    def is_full(self) -> bool:
        """Kafka rolls the segment when its index cannot take another entry."""
        return len(self) >= self.max_entries

    @property
    def pending(self) -> int:
        """Entries not yet in the file."""
        return len(self) - self._written

    def write_pending(self) -> None:
        """Append the entries not yet in the file with one write."""
        written = self._written
        first, second = self._columns()
        if written == len(first):
            return
        data = b"".join(map(self._ENTRY.pack, first[written:], second[written:]))
        self._write_at(data, written * self.ENTRY_SIZE)
        self._written = len(first)

    def discard_pending(self) -> None:
        """Never write the unwritten entries (the files are about to be deleted)."""
        self._written = len(self)

    def _rewrite_all(self) -> None:
        # Nothing of the replaced entries may be written later, even if this rewrite fails.
        self._written = 0
        first, second = self._columns()
        self._rewrite(b"".join(map(self._ENTRY.pack, first, second)))
        self._written = len(first)

    def flush(self) -> None:
        """Write pending entries, then fsync the file if it was written through this object."""
        self.write_pending()
        super().flush()

    def close(self) -> None:
        """Write pending entries and close the descriptor (closed even if the write fails)."""
        try:
            self.write_pending()
        finally:
            super().close()


class OffsetIndex(_SparseIndex):
    """Relative last offset of a batch -> byte position of that batch in the segment."""

    ENTRY_SIZE = 8
    _ENTRY = struct.Struct(">ii")
    _CODES = ("i", "i")

    relative_offsets: array
    positions: array

    def _columns(self) -> tuple[array, array]:
        return self.relative_offsets, self.positions

    def _set_columns(self, first: array, second: array) -> None:
        self.relative_offsets, self.positions = first, second

    def load(self, segment_size: int) -> str | None:
        """Read the file; return why it is unusable (missing, torn, not monotonic) or None."""
        raw = self._read_entries()
        if isinstance(raw, str):
            return raw
        both = _int_array("i", raw)
        rel, pos = both[0::2], both[1::2]
        if len(rel) and (rel[0] < 0 or pos[0] < 0 or pos[-1] >= segment_size):
            return "entry outside the segment"
        if not (_strictly_increasing(rel) and _strictly_increasing(pos)):
            return "entries are not increasing"
        self._loaded(rel, pos)
        return None

    def append(self, relative_offset: int, position: int) -> None:
        """Add an entry (must be beyond the last one); :meth:`write_pending` writes it."""
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)


class TimeIndex(_SparseIndex):
    """Running maximum timestamp -> relative offset of the batch that reached it."""

    ENTRY_SIZE = 12
    _ENTRY = struct.Struct(">qi")
    _CODES = ("q", "i")

    timestamps: array
    relative_offsets: array

    def _columns(self) -> tuple[array, array]:
        return self.timestamps, self.relative_offsets

    def _set_columns(self, first: array, second: array) -> None:
        self.timestamps, self.relative_offsets = first, second

    def load(self) -> str | None:
        """Read the file; return why it is unusable or None."""
        raw = self._read_entries()
        if isinstance(raw, str):
            return raw
        entries = list(self._ENTRY.iter_unpack(raw))
        ts = array("q", (e[0] for e in entries))
        rel = array("i", (e[1] for e in entries))
        if len(rel) and rel[0] < 0:
            return "negative relative offset"
        if not _strictly_increasing(ts) or any(a > b for a, b in itertools.pairwise(rel)):
            return "entries are not increasing"
        self._loaded(ts, rel)
        return None

    @classmethod
    def read_last_entry(cls, path: Path) -> tuple[int, int] | None:
        """The last (timestamp, relative offset) without loading the file (a segment's max).

        Reads the file as it is: only meaningful for a segment whose index was written completely
        (closed or flushed after becoming inactive, see the module docstring).
        """
        try:
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < cls.ENTRY_SIZE or size % cls.ENTRY_SIZE:
                    return None
                f.seek(size - cls.ENTRY_SIZE)
                ts, rel = cls._ENTRY.unpack(f.read(cls.ENTRY_SIZE))
                return ts, rel
        except FileNotFoundError:
            return None

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        """Append if ``timestamp`` is above the last entry's (entries stay strictly increasing);
        :meth:`write_pending` writes it."""
        timestamps = self.timestamps
        if timestamp < 0 or (timestamps and timestamp <= timestamps[-1]):
            return
        timestamps.append(timestamp)
        self.relative_offsets.append(relative_offset)


class AbortedTxn(NamedTuple):
    """One aborted transaction: the consumer drops ``producer_id``'s data in [first, last]."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex(_IndexFile):
    """Aborted transactions whose ABORT marker lies in this segment, in marker order."""

    ENTRY_SIZE = 34
    _ENTRY = struct.Struct(">hqqqq")

    def __init__(self, path: Path):
        super().__init__(path)
        self.entries: list[AbortedTxn] = []

    def load(self) -> str | None:
        """Read the file; return why it is unusable or None."""
        raw = self._read_entries()
        if isinstance(raw, str):
            return raw
        entries = []
        for version, *fields in self._ENTRY.iter_unpack(raw):
            if version != 0:
                return f"unknown entry version {version}"
            entries.append(AbortedTxn(*fields))
        self.entries = entries
        return None

    def append(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction (written through to the file)."""
        self._write_at(self._ENTRY.pack(0, *txn), len(self.entries) * self.ENTRY_SIZE)
        self.entries.append(txn)

    def reset(self, entries: list[AbortedTxn] | None = None) -> None:
        """Replace all entries (rebuild during recovery)."""
        self.entries = list(entries or ())
        self._rewrite(b"".join(self._ENTRY.pack(0, *e) for e in self.entries))

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is done.

        Kafka's rule: an entry whose last stable offset reaches the upper bound proves no later
        segment can hold another overlapping abort, so the caller can stop.
        """
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False
