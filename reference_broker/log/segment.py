"""One log segment: ``{base_offset:020d}.log`` plus its ``.index``, ``.timeindex``, ``.txnindex``.

The ``.log`` file is a plain concatenation of magic v2 record batches, written exactly as appended
(offsets already assigned by the partition log). Nothing here decodes records except
:meth:`LogSegment.find_offset_by_timestamp` / :meth:`LogSegment.record_with_timestamp`, which must
look inside one batch to find a record's exact offset (Kafka does the same).

Integrity model:

* :meth:`LogSegment.recover` validates every batch (framing, CRC-32C, offset continuity) and
  rebuilds the offset and time indexes; the partition log runs it on segments that may hold
  unflushed data after an unclean shutdown, and truncates a torn tail it reports.
* Segments trusted at open are checked lazily: an index that fails its sanity check is rebuilt
  from batch headers, and :meth:`LogSegment.read_batches` verifies the CRC of every batch it is
  about to serve that has not been verified since open (``verified_upto``).
* Anything invalid is recorded as a :class:`Corruption` (and logged once, naming file and
  position); the partition log refuses to serve offsets inside it.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from pathlib import Path

from reference_broker.log._checkpoint import CLEANER_CHECKPOINT_FILE
from reference_broker.log._deletion import DELETED_SUFFIX
from reference_broker.log._files import pread_exact, pwrite_all, read_mapped, remove_quietly
from reference_broker.log.config import LogConfig
from reference_broker.log.index import (
    WRITE_BEHIND_ENTRIES,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
)
from reference_broker.log.integrity import (
    Corruption,
    FramingError,
    SegmentCorrupt,
    content_problem,
    frame_problem,
    offset_mismatch,
    scan_batches,
)
from reference_broker.log.open_files import SEGMENT_FILES
from sdk.records import BATCH_HEADER_SIZE, CorruptRecordError, RecordBatch
from sdk.records.header import LOG_OVERHEAD

__all__ = [
    "INDEX_SUFFIXES",
    "LOG_SUFFIX",
    "Corruption",
    "FramingError",
    "LogSegment",
    "SegmentCorrupt",
    "scan_batches",
    "segment_stem",
]

log = logging.getLogger("reference_broker.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
_INT32_MAX = (1 << 31) - 1


def _rename_deleted(path: Path) -> Path:
    """Rename ``path`` to ``<path>.deleted`` (a missing file is fine); returns the new path."""
    target = path.with_name(path.name + DELETED_SUFFIX)
    try:
        os.replace(path, target)
    except FileNotFoundError:
        pass
    return target


def segment_stem(base_offset: int) -> str:
    """File name stem shared by a segment's files (Kafka's 20-digit zero-padded base offset)."""
    return f"{base_offset:020d}"


class LogSegment:
    """A segment's files and the in-memory facts the partition log needs about them.

    ``next_offset`` is the offset after the segment's last batch; ``max_timestamp`` and
    ``offset_of_max_timestamp`` (last offset of the batch holding it) drive retention and
    timestamp lookups. Use :meth:`create` for a new segment and :meth:`open_existing` for one
    found on disk.
    """

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, now_ms: int):
        stem = directory / segment_stem(base_offset)
        self.base_offset = base_offset
        self.config = config
        self.log_path = stem.with_name(stem.name + LOG_SUFFIX)
        self.offset_index = OffsetIndex(stem.with_name(stem.name + ".index"),
                                        config.segment_index_bytes)
        self.time_index = TimeIndex(stem.with_name(stem.name + ".timeindex"),
                                    config.segment_index_bytes)
        self.txn_index = TransactionIndex(stem.with_name(stem.name + ".txnindex"))
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.on_use = self._files_used
        self._fd: int | None = None
        #: the ``.log`` was written since its last fsync (its descriptor may be closed since)
        self._unsynced = False
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._first_batch_timestamp: int | None = None
        self.created_ms = now_ms
        self.bytes_since_last_index_entry = 0
        self.verified_upto = 0
        self.indexes_loaded = False
        self.corruptions: list[Corruption] = []
        #: the cleaner rewrote this segment (or one of its log): batches may skip offsets
        self.cleaned = False
        jitter = config.segment_jitter_ms
        self.jitter_ms = random.randrange(jitter) if jitter > 0 else 0

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """A new, empty segment with all four files created."""
        seg = cls(directory, base_offset, config, now_ms)
        seg._fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg._unsynced = True
        SEGMENT_FILES.opened(seg)
        try:
            for index in (seg.offset_index, seg.time_index, seg.txn_index):
                index.reset([])
        except OSError:
            seg.close_quietly()
            raise
        seg.indexes_loaded = True
        return seg

    def close_quietly(self) -> None:
        """Close every descriptor, ignoring errors (a creation being undone)."""
        try:
            self.close()
        except OSError:
            pass

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> LogSegment:
        """A segment found on disk; only its size is read, indexes load on demand."""
        seg = cls(directory, base_offset, config, now_ms)
        seg.size = seg.log_path.stat().st_size
        seg.cleaned = (directory / CLEANER_CHECKPOINT_FILE).exists()
        return seg

    @property
    def fd(self) -> int:
        """Read-write descriptor of the ``.log`` file (opened on first use, and again after the
        bounded registry of open segment files released it: see ``open_files``)."""
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        SEGMENT_FILES.opened(self)
        return self._fd

    def _files_used(self) -> None:
        SEGMENT_FILES.opened(self)

    def release_files(self) -> None:
        """Close every descriptor, writing pending index entries first; the next use reopens
        them and the next flush still fsyncs what was written (the registry's eviction, and
        the partition log once a rolled segment is fsynced)."""
        SEGMENT_FILES.forget(self)
        self._close_files()

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config (index sizes only matter for the next segments)."""
        self.config = config

    def write_index_entries(self) -> None:
        """Write the entries the offset and time index hold back (write-behind, see ``index``).

        The time index goes first: a crash between the two writes then leaves its file ending at
        the same batch as the offset index file or a later one, never an earlier one.
        """
        self.time_index.write_pending()
        self.offset_index.write_pending()

    def flush(self) -> None:
        """fsync the log and index files (writing the indexes' pending entries first)."""
        self.write_index_entries()
        if self._fd is not None or self._unsynced:
            os.fsync(self.fd)
            self._unsynced = False
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.flush()

    def close(self) -> None:
        """Close every descriptor (the files stay), writing the indexes' pending entries.

        Every descriptor is closed even if a write fails; the first error is raised after.
        """
        SEGMENT_FILES.forget(self)
        self._close_files()

    def _close_files(self) -> None:
        error: OSError | None = None
        try:
            self.write_index_entries()
        except OSError as exc:
            error = exc
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                error = exc
            self._fd = None
        for index in (self.offset_index, self.time_index, self.txn_index):
            try:
                index.close()
            except OSError as exc:
                error = error or exc
        if error is not None:
            raise error

    def delete(self) -> None:
        """Close and remove the files; the ``.log`` goes first so a crash leaves no half segment.

        After :meth:`rename_for_deletion` the files removed are the renamed ones."""
        self.offset_index.discard_pending()
        self.time_index.discard_pending()
        self.close()
        remove_quietly(self.log_path)
        for index in (self.offset_index, self.time_index, self.txn_index):
            remove_quietly(index.path)

    def rename_for_deletion(self) -> None:
        """Close the files and rename each ``<name>.deleted`` (Kafka's first step of deleting a
        segment); :meth:`delete` removes them later. The ``.log`` goes first, so a crash between
        the renames leaves index files without a log, which the loader removes. Descriptors,
        mappings and slices already handed out keep reading the data until the files are
        removed (and after, until closed); reopening by name finds the renamed files."""
        if self.log_path.name.endswith(DELETED_SUFFIX):
            return
        self.offset_index.discard_pending()
        self.time_index.discard_pending()
        self.close()
        self.log_path = _rename_deleted(self.log_path)
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = _rename_deleted(index.path)

    def on_become_inactive(self) -> None:
        """Called when the segment stops being the active one (roll/close).

        Writes the time index entry for the segment's maximum timestamp so that reopening can
        read the maximum from the index's last entry, as Kafka does, and the entries still held
        back by write-behind, so that a closed segment's index files are complete (only its
        fsync waits for the next flush).
        """
        if not self.indexes_loaded:
            return  # nothing was appended or looked up: the files are as they were loaded
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
        self.write_index_entries()

    @property
    def gaps_allowed(self) -> bool:
        """Whether a batch may start after the previous one's next offset: the log is compacted,
        or was cleaned once (a topic switched from ``compact`` to ``delete`` keeps its gaps)."""
        return self.cleaned or self.config.compacted

    # -- metadata ------------------------------------------------------------------------------

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's mtime when no batch has one (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return -1

    def load_trusted_metadata(self, next_offset: int) -> None:
        """Fill in facts for a closed segment trusted at open, without scanning it."""
        self.next_offset = next_offset
        last = TimeIndex.read_last_entry(self.time_index.path)
        if last is not None and 0 <= last[1] < next_offset - self.base_offset:
            self.max_timestamp = last[0]
            self.offset_of_max_timestamp = self.base_offset + last[1]
        elif self.size:
            # No usable last entry: load (validating) or rebuild the indexes to learn the maximum.
            self.ensure_indexes()
            if self.max_timestamp < 0 and len(self.time_index):
                rel = self.time_index.relative_offsets[-1]
                if 0 <= rel < next_offset - self.base_offset:
                    self.max_timestamp = self.time_index.timestamps[-1]
                    self.offset_of_max_timestamp = self.base_offset + rel
                else:
                    self.rebuild_indexes()

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (what segment.ms ageing measures from), -1 if none."""
        if self._first_batch_timestamp is None:
            if self.size < BATCH_HEADER_SIZE:
                return -1
            header = RecordBatch(pread_exact(self.fd, BATCH_HEADER_SIZE, 0))
            self._first_batch_timestamp = header.max_timestamp
        return self._first_batch_timestamp

    def should_roll(self, append_size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: full by size or index, too old, or offsets overflow."""
        config = self.config
        size = self.size
        if size:
            first_ts = self._first_batch_timestamp
            if first_ts is None:
                first_ts = self.first_batch_timestamp()
        else:
            first_ts = -1
        waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - self.created_ms
        if not self.indexes_loaded:
            self.ensure_indexes()
        return (
            size > config.segment_size - append_size
            or (size > 0 and waited > config.segment_ms - self.jitter_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or last_offset - self.base_offset > _INT32_MAX
        )

    # -- integrity -----------------------------------------------------------------------------

    def record_corruption(self, corruption: Corruption) -> Corruption:
        """Remember a damaged range (once per position) and log it as an error."""
        for known in self.corruptions:
            if known.position == corruption.position:
                return known
        self.corruptions.append(corruption)
        log.error("%s; these offsets will not be served", corruption)
        return corruption

    def corruption_covering(self, offset: int) -> Corruption | None:
        """The recorded corruption that contains ``offset``, if any."""
        for corruption in self.corruptions:
            if corruption.covers(offset):
                return corruption
        return None

    def recover(self, *, last_segment: bool) -> Corruption | None:
        """Validate every batch and rebuild the offset and time indexes from the valid ones.

        Damaged batches are skipped, scanning resumes at the next batch when the framing allows,
        and each damaged range is recorded in :attr:`corruptions`. Exception: in the last segment
        a damaged range that runs to the end of the file is a torn write (or damage that cannot be
        told from one); it is returned, not recorded, for the caller to truncate.
        """
        state = _IndexBuilder(self)
        expected: int | None = self.base_offset
        problems: list[Corruption] = []
        resyncing = False
        try:
            for pos, batch in scan_batches(self.fd, 0, self.size, with_data=True):
                if expected is None and batch.base_offset < state.next_offset:
                    reason: str | None = f"base offset {batch.base_offset} goes backwards"
                else:
                    reason = content_problem(batch, batch.base_offset if expected is None else expected,
                                             gaps=self.gaps_allowed)
                if reason is not None:
                    if not resyncing:
                        first = expected if expected is not None else state.next_offset
                        problems.append(Corruption(self.log_path, pos, first, None, reason))
                        resyncing = True
                    expected = None  # resynchronise on the next valid batch's own base offset
                    continue
                if resyncing:
                    problems[-1].last_offset = batch.base_offset - 1
                    resyncing = False
                state.add(pos, batch)
                expected = batch.next_offset
        except FramingError as exc:
            if not resyncing:
                first = expected if expected is not None else state.next_offset
                problems.append(Corruption(self.log_path, exc.position, first, None, exc.reason))
        state.finish()
        tail = None
        if last_segment and problems and problems[-1].last_offset is None:
            tail = problems.pop()
        for problem in problems:
            self.record_corruption(problem)
        self.verified_upto = problems[0].position if problems else state.valid_end
        return tail

    def truncate_to(self, position: int) -> None:
        """Cut the ``.log`` file at ``position`` (dropping a torn tail); indexes must be rebuilt."""
        os.ftruncate(self.fd, position)
        self._unsynced = True
        self.size = position
        self.verified_upto = min(self.verified_upto, position)
        self.corruptions = [c for c in self.corruptions if c.position < position]

    def ensure_indexes(self) -> None:
        """Load the offset and time index, rebuilding them from batch headers if unusable."""
        if self.indexes_loaded:
            return
        problem = self.offset_index.load(self.size) or self.time_index.load()
        if problem is None and len(self.offset_index) and self.size:
            # The last entry must point at a batch that ends at the entry's offset.
            rel, pos = self.offset_index.relative_offsets[-1], self.offset_index.positions[-1]
            header = pread_exact(self.fd, BATCH_HEADER_SIZE, pos)
            if len(header) < BATCH_HEADER_SIZE or RecordBatch(header).last_offset != self.base_offset + rel:
                problem = "last entry does not match the log"
        if problem is not None:
            if problem != "missing" or self.size:
                log.warning("rebuilding indexes of %s: %s", self.log_path, problem)
            self.rebuild_indexes()
        self.indexes_loaded = True

    def rebuild_indexes(self) -> None:
        """Recreate the offset and time index by walking batch headers (no CRC check)."""
        state = _IndexBuilder(self)
        complete = True
        expected = self.base_offset
        try:
            for pos, batch in scan_batches(self.fd, 0, self.size):
                damage = self._corruption_at(pos)
                if damage is None and offset_mismatch(batch.base_offset, expected, self.gaps_allowed):
                    damage = self.record_corruption(Corruption(
                        self.log_path, pos, expected,
                        self._damage_end(pos, batch.size_in_bytes, expected),
                        f"base offset {batch.base_offset}, expected {expected}"))
                if damage is not None:
                    if damage.last_offset is None:
                        complete = False
                        break
                    expected = damage.last_offset + 1
                    continue
                state.add(pos, batch)
                expected = batch.next_offset
        except FramingError as exc:
            complete = False
            self.record_corruption(
                Corruption(self.log_path, exc.position, expected, None, exc.reason)
            )
        state.finish(complete=complete)
        self.indexes_loaded = True

    # -- append --------------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, positions: Sequence[int], batches: Sequence[RecordBatch]
    ) -> None:
        """Write ``data`` (whole batches, offsets assigned) at the end; update the indexes.

        ``positions`` are the batch start positions within ``data`` and ``batches`` their headers
        as the caller already parsed them (after assigning offsets), so no header is parsed
        twice. Index entries follow Kafka: once more than ``index.interval.bytes`` were appended
        since the last entry, the next batch gets one. Entries reach the index files later
        (write-behind, see ``index``): a crash may lose them, never make them wrong.
        """
        if not self.indexes_loaded:
            self.ensure_indexes()
        start = self.size
        was_verified = self.verified_upto == start
        pwrite_all(self.fd, data, start)
        self._unsynced = True
        interval = self.config.index_interval_bytes
        since = self.bytes_since_last_index_entry
        base = self.base_offset
        batch = None
        indexed = False
        for rel, batch in zip(positions, batches, strict=True):
            pos = start + rel
            max_ts = batch.max_timestamp
            last_offset = batch.base_offset + batch.last_offset_delta
            if pos == 0:
                self._first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
            if since > interval:
                self.offset_index.append(last_offset - base, pos)
                self.time_index.maybe_append(
                    self.max_timestamp, self.offset_of_max_timestamp - base
                )
                since = 0
                indexed = True
            since += batch.batch_length + LOG_OVERHEAD
        self.bytes_since_last_index_entry = since
        self.size = start + len(data)
        if batch is not None:
            self.next_offset = batch.base_offset + batch.last_offset_delta + 1
        if was_verified:
            self.verified_upto = self.size
        if indexed and self.offset_index.pending >= WRITE_BEHIND_ENTRIES:
            self.write_index_entries()

    # -- lookups -------------------------------------------------------------------------------

    def find_batch(self, offset: int) -> tuple[int, RecordBatch] | None:
        """Position and header of the first batch whose last offset is >= ``offset``.

        Uses the sparse index then scans headers forward, checking that offsets continue and
        stepping over recorded corruptions. An index entry that disagrees with the log makes the
        index be rebuilt and the scan restart from the segment start. Raises
        :class:`SegmentCorrupt` when ``offset`` lies in (or behind unframeable) damage.
        """
        if offset >= self.next_offset:
            return None
        for attempt in (0, 1):
            self.ensure_indexes()
            entry = self.offset_index.floor(offset - self.base_offset) if attempt == 0 else None
            start = entry[1] if entry else 0
            expected_last = self.base_offset + entry[0] if entry else None
            expected: int | None = None if entry else self.base_offset
            try:
                for pos, batch in scan_batches(self.fd, start, self.size):
                    damage = self._corruption_at(pos)
                    if damage is None and expected is not None and offset_mismatch(
                            batch.base_offset, expected, self.gaps_allowed):
                        # The base offset is outside the CRC: never serve this batch, but keep
                        # walking past it by its length.
                        damage = self.record_corruption(Corruption(
                            self.log_path, pos, expected,
                            self._damage_end(pos, batch.size_in_bytes, expected),
                            f"base offset {batch.base_offset}, expected {expected}"))
                    if damage is not None:
                        if damage.last_offset is None or offset <= damage.last_offset:
                            raise SegmentCorrupt(damage)
                        expected = damage.last_offset + 1
                        continue
                    if pos == start and expected_last is not None and batch.last_offset != expected_last:
                        raise _IndexMismatch
                    if batch.last_offset >= offset:
                        return pos, batch
                    expected = batch.next_offset
            except _IndexMismatch:
                log.warning("offset index of %s disagrees with the log; rebuilding", self.log_path)
                self.rebuild_indexes()
                continue
            except FramingError as exc:
                first = expected if expected is not None else offset
                raise SegmentCorrupt(self.record_corruption(
                    Corruption(self.log_path, exc.position, first, None, exc.reason))) from None
            return None
        return None

    def _corruption_at(self, position: int) -> Corruption | None:
        for corruption in self.corruptions:
            if corruption.position == position:
                return corruption
        return None

    def _damage_end(self, position: int, size: int, first: int) -> int | None:
        """Last offset of a damaged but framed batch: just before the next batch's base offset
        (its header is read), or None when that cannot be told."""
        following = position + size
        if following == self.size:
            return self.next_offset - 1 if self.next_offset > first else None
        header = pread_exact(self.fd, BATCH_HEADER_SIZE, following)
        if len(header) < BATCH_HEADER_SIZE:
            return None
        batch = RecordBatch(header)
        if batch.magic == 2 and first < batch.base_offset < self.next_offset:
            return batch.base_offset - 1
        return None

    def read_batches(
        self,
        position: int,
        expected_base: int,
        max_bytes: int,
        max_offset: int | None,
        take_first: bool,
    ) -> tuple[bytes | memoryview, int, bool]:
        """Whole batches from ``position``: ``(data, next_offset, stopped_early)``.

        Stops before a batch whose last offset is >= ``max_offset`` or that would push the total
        over ``max_bytes`` (unless it is the first and ``take_first``). Every batch at or beyond
        ``verified_upto`` is checked (framing, CRC, offset continuity) before it is returned; a bad
        one is recorded and ends the read, or raises :class:`SegmentCorrupt` if it is the first.
        ``stopped_early`` is False when the read reached the end of the segment.
        """
        end = self.size
        buf = read_mapped(self.fd, min(end - position, max(max_bytes, BATCH_HEADER_SIZE)), position)
        p = 0
        expected = expected_base
        while position + p < end:
            abs_pos = position + p
            batch = RecordBatch(buf, p) if len(buf) - p >= BATCH_HEADER_SIZE else None
            if batch is None and p and end - abs_pos >= BATCH_HEADER_SIZE:
                return _view(buf, p), expected, True  # the window (max_bytes) is used up
            reason = frame_problem(batch, abs_pos, end)
            framed = reason is None
            if batch is not None and reason is None:
                size = batch.size_in_bytes
                beyond = max_offset is not None and batch.last_offset >= max_offset
                if beyond and batch.base_offset >= max_offset:
                    return _view(buf, p), expected, True
                if not beyond and p + size > max_bytes and not (p == 0 and take_first):
                    return _view(buf, p), expected, True
                # Offsets only straddle max_offset (always a batch boundary here) if damaged.
                if p + size > len(buf):
                    if p + size > max(max_bytes, len(buf)) and p:
                        return _view(buf, p), expected, True
                    buf = b"".join((buf[:p], pread_exact(self.fd, size, abs_pos)))
                    batch = RecordBatch(buf, p)
                gaps = self.gaps_allowed
                if (beyond or abs_pos >= self.verified_upto
                        or offset_mismatch(batch.base_offset, expected, gaps)):
                    reason = content_problem(batch, expected, gaps=gaps)
                if reason is None and beyond:
                    return _view(buf, p), expected, True
            if reason is not None:
                last = None
                if framed and batch is not None:
                    last = self._damage_end(abs_pos, batch.size_in_bytes, expected)
                corruption = self.record_corruption(
                    Corruption(self.log_path, abs_pos, expected, last, reason))
                if p == 0:
                    raise SegmentCorrupt(corruption)
                return _view(buf, p), expected, True
            assert batch is not None
            size = batch.size_in_bytes
            if abs_pos == self.verified_upto:
                self.verified_upto = abs_pos + size
            p += size
            expected = batch.next_offset
        return _view(buf, p), expected, False

    def read_whole_batch(self, position: int) -> RecordBatch:
        """The complete batch at ``position`` (for the rare lookups that decode records)."""
        header = RecordBatch(pread_exact(self.fd, BATCH_HEADER_SIZE, position))
        return RecordBatch(pread_exact(self.fd, header.size_in_bytes, position))

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset``.

        The time index narrows the scan; then batch headers are walked and only the first batch
        whose max timestamp qualifies is decoded. Returns ``(offset, record timestamp)``.
        """
        self.ensure_indexes()
        entry = self.time_index.floor(timestamp)
        start_offset = max(starting_offset, self.base_offset + entry[1] if entry else self.base_offset)
        found = self.find_batch(start_offset)
        if found is None:
            return None
        try:
            for pos, batch in scan_batches(self.fd, found[0], self.size):
                if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
                    hit = self.record_with_timestamp(pos, timestamp, starting_offset, at_least=True)
                    if hit is not None:
                        return hit
        except FramingError as exc:
            raise SegmentCorrupt(self.record_corruption(
                Corruption(self.log_path, exc.position, start_offset, None, exc.reason))) from None
        return None

    def record_with_timestamp(
        self, position: int, timestamp: int, starting_offset: int, *, at_least: bool
    ) -> tuple[int, int] | None:
        """Decode the batch at ``position``; first record with ts >= (or ==) ``timestamp``."""
        batch = self.read_whole_batch(position)
        try:
            for record in batch:
                if record.offset < starting_offset:
                    continue
                if record.timestamp == timestamp or (at_least and record.timestamp > timestamp):
                    return record.offset, record.timestamp
        except CorruptRecordError as exc:
            raise SegmentCorrupt(self.record_corruption(Corruption(
                self.log_path, position, batch.base_offset, batch.last_offset, str(exc)))) from None
        return None


class _IndexMismatch(Exception):
    pass


def _view(buf: bytes | memoryview, length: int) -> bytes | memoryview:
    return buf if length == len(buf) else memoryview(buf)[:length]


class _IndexBuilder:
    """Accumulates index entries and segment stats while batches are walked in order."""

    def __init__(self, segment: LogSegment):
        self.segment = segment
        self.entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []
        self.since = 0
        self.max_ts = -1
        self.offset_of_max = -1
        self.first_ts: int | None = None
        self.next_offset = segment.base_offset
        self.valid_end = 0

    def add(self, pos: int, batch: RecordBatch) -> None:
        base = self.segment.base_offset
        if self.first_ts is None:
            self.first_ts = batch.max_timestamp
        if batch.max_timestamp > self.max_ts:
            self.max_ts, self.offset_of_max = batch.max_timestamp, batch.last_offset
        if self.since > self.segment.config.index_interval_bytes and (
            not self.entries or batch.last_offset - base > self.entries[-1][0]
        ):
            self.entries.append((batch.last_offset - base, pos))
            if not self.time_entries or self.max_ts > self.time_entries[-1][0]:
                self.time_entries.append((self.max_ts, self.offset_of_max - base))
            self.since = 0
        self.since += batch.size_in_bytes
        self.next_offset = batch.next_offset
        self.valid_end = pos + batch.size_in_bytes

    def finish(self, *, complete: bool = True) -> None:
        """Write the indexes and the segment stats; ``complete=False`` means the walk stopped at
        damage, so a known larger ``next_offset`` (a trusted closed segment's) is kept."""
        seg = self.segment
        base = seg.base_offset
        if self.max_ts >= 0 and (not self.time_entries or self.max_ts > self.time_entries[-1][0]):
            # Same final entry a roll/close writes, so the index's last entry is the maximum.
            self.time_entries.append((self.max_ts, self.offset_of_max - base))
        seg.offset_index.reset(self.entries)
        seg.time_index.reset(self.time_entries)
        seg.bytes_since_last_index_entry = self.since
        seg.max_timestamp, seg.offset_of_max_timestamp = self.max_ts, self.offset_of_max
        seg._first_batch_timestamp = self.first_ts
        if complete or self.next_offset > seg.next_offset:
            seg.next_offset = self.next_offset
