"""Log compaction (``cleanup.policy=compact``), with Kafka's LogCleaner semantics.

Choosing a log (Kafka's ``LogCleanerManager``): a compacted log's *dirty* range starts at its
cleaner checkpoint (``cleaner-offset-checkpoint`` in the partition directory; the log start offset
when missing or out of range) and ends at the first *uncleanable* offset: the lowest of the last
stable offset (no open transaction, nothing beyond the high watermark is touched), the active
segment's base offset and, with ``min.compaction.lag.ms``, the first segment holding a record newer
than the lag; rounded down to a segment boundary. A log is cleaned when its dirty bytes / (clean
+ dirty bytes) exceeds ``min.cleanable.dirty.ratio``, or when ``max.compaction.lag.ms`` has passed
for the first batch of a dirty segment; of those, the dirtiest one goes first, one log per pass.

Cleaning (Kafka's ``Cleaner.doClean``): the key map records, for each key of the dirty range, the
offset of its latest record (records of aborted transactions are not mapped). The map has a fixed
size (``log.cleaner.dedupe.buffer.size`` / ``log.cleaner.threads``, see ``offset_map``): when it
fills before the end of the dirty range, mapping stops at the record that did not fit, wherever it
lies in its segment, and the pass cleans only up to the last mapped offset; the cleaner checkpoint
moves to the offset after it, where the next pass goes on (Kafka's ``buildOffsetMapForSegment``).
Then every segment holding offsets below that end is rewritten, in groups fitting
``segment.bytes``; a record survives when it is the latest of its key, or lies after the mapped
range. Offsets never change (a consumer fetching a removed offset gets the next one). Batches:

* records of aborted transactions are removed; an ABORT marker stays while a batch of its
  transaction was seen in this pass, a COMMIT marker while a batch of its transaction was seen;
  a marker none of whose data is left gets a delete horizon (now + ``delete.retention.ms``) and
  is removed by a pass after the horizon (the two-pass rule);
* a tombstone (null value) stays until the pass after its batch's delete horizon, which the first
  pass that keeps it sets (KIP-534);
* an emptied batch is dropped unless it is the last batch of a producer still known to the
  producer state (its header keeps the sequence and epoch idempotence needs) or the last batch
  before the first uncleanable offset; then its header is kept without records.

Crash safety (Kafka's ``.cleaned``/``.swap`` protocol): a group is written to
``<base>.log.cleaned`` and fsynced; ``<base>.swaprange`` records the end of the offset range it
replaces; renaming it to ``<base>.log.swap`` is the commit point. Then the replaced segments are
deleted and the swap file renamed to ``<base>.log``, and its indexes rebuilt.
:func:`complete_interrupted_swaps` (called when a log is opened) discards ``.cleaned`` files and
finishes any swap found, so after a crash a log holds either the old or the new segments, never
both or neither.

Concurrency (Kafka's cleaner threads and ``LogCleanerManager``): a :class:`CleaningPass` is
prepared on the event loop (the range, the groups, the aborted transactions and producers are read
there), builds its key map and writes each group's ``.cleaned`` file in a worker thread, and swaps
each group in on the event loop. So appends (to the active segment, never cleaned), fetches,
retention and topic deletion carry on during a pass. The worker reads segment files through
descriptors of its own and never touches a :class:`LogSegment` object (their descriptors and the
open-file registry belong to the event loop). A pass is aborted (:meth:`CleaningPass.abort`) when
its log is deleted or the broker stops: the worker stops at its next batch, and after the abort it
creates no file (creation and the abort share a lock), so a deleted directory is removed whole.
A swap first checks that the pass was not aborted, that the log is open and that the group's
segments are still the log's (retention or DeleteRecords may have deleted some meanwhile); if not,
the pass ends there, its output is removed and the checkpoint is left where it was.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from reference_broker.log._checkpoint import CLEANER_CHECKPOINT_FILE
from reference_broker.log._cleaned_batches import empty_batch, filtered_batch
from reference_broker.log._files import atomic_write, fsync_dir, pwrite_all, remove_quietly
from reference_broker.log.index import AbortedTxn, OffsetIndex, TimeIndex
from reference_broker.log.offset_map import ENTRY_BYTES, KeyOffsetMap
from reference_broker.log.segment import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    FramingError,
    LogSegment,
    _IndexBuilder,
    scan_batches,
    segment_stem,
)
from sdk.protocol.errors import KafkaStorageError
from sdk.records import ControlType, CorruptRecordError, Record, RecordBatch

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog

__all__ = [
    "CHECKPOINT_FILE",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanerError",
    "CleaningAborted",
    "CleaningPass",
    "InThread",
    "LogToClean",
    "clean_log",
    "cleanable",
    "complete_interrupted_swaps",
    "read_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger("reference_broker.log.cleaner")

CHECKPOINT_FILE = CLEANER_CHECKPOINT_FILE
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_RANGE_SUFFIX = ".swaprange"
_INT32_MAX = (1 << 31) - 1


# -- checkpoint ------------------------------------------------------------------------------------


def read_checkpoint(directory: Path) -> int | None:
    """The first dirty offset recorded by the last cleaning of this log, or None."""
    try:
        return int((directory / CHECKPOINT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_checkpoint(directory: Path, offset: int) -> None:
    """Record that everything below ``offset`` has been cleaned."""
    atomic_write(directory / CHECKPOINT_FILE, f"{offset}\n".encode())


# -- choosing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogToClean:
    """A log's cleanable range ``[first_dirty, first_uncleanable)`` and its dirtiness."""

    plog: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def should_clean(self) -> bool:
        """Kafka's rule: forced by ``max.compaction.lag.ms`` or dirtier than the ratio."""
        if self.needs_compaction_now and self.cleanable_bytes > 0:
            return True
        return self.cleanable_ratio > self.plog.config.min_cleanable_dirty_ratio


def cleanable(plog: PartitionLog, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The cleanable range of ``plog`` given its cleaner checkpoint (Kafka's cleanableOffsets)."""
    config = plog.config
    start = plog.log_start_offset
    first_dirty = checkpoint if checkpoint is not None else start
    if first_dirty < start or first_dirty > plog.log_end_offset:
        first_dirty = start
    segments = plog.segments
    active = segments[-1]
    inactive_dirty = segments[_floor(segments, first_dirty):-1]
    bounds = [plog.last_stable_offset, active.base_offset]
    if config.min_compaction_lag_ms > 0:
        for segment in inactive_dirty:
            if segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                bounds.append(segment.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    # Round down to the segment holding it (the active segment when past the inactive ones).
    holder = segments[_floor(segments, uncleanable)]
    first_uncleanable = holder.base_offset
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(
        s.size for s in segments[_floor(segments, low):] if s.base_offset < first_uncleanable)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    earliest = min((ts for s in inactive_dirty if (ts := s.first_batch_timestamp()) > 0), default=None)
    max_lag = max(config.max_compaction_lag_ms, 0)
    needs_now = earliest is not None and earliest < now_ms - max_lag
    return LogToClean(plog, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now)


def _floor(segments: list[LogSegment], offset: int) -> int:
    """Index of the segment holding ``offset`` (the first one for offsets below it)."""
    return max(0, bisect.bisect_right([s.base_offset for s in segments], offset) - 1)


# -- transactions ----------------------------------------------------------------------------------


class _Transactions:
    """Kafka's ``CleanedTransactionMetadata``: which transaction each batch of a pass belongs to,
    and whether a marker may go."""

    def __init__(self) -> None:
        self._pending: list[AbortedTxn] = []  # aborted transactions not reached yet, by first offset
        self._aborted: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (txn, a batch was seen)
        self._committed: set[int] = set()
        self.kept_aborts: list[AbortedTxn] = []  # for the cleaned segment's transaction index

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        known = set(self._pending)
        self._pending.extend(t for t in txns if t not in known)
        self._pending.sort(key=lambda t: t.first_offset)

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.pop(0)
            self._aborted.setdefault(txn.producer_id, (txn, False))

    def on_data(self, batch: RecordBatch) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction."""
        self._reach(batch.last_offset)
        if not batch.is_transactional:
            return False
        found = self._aborted.get(batch.producer_id)
        if found is not None:
            self._aborted[batch.producer_id] = (found[0], True)
            return True
        self._committed.add(batch.producer_id)
        return False

    def on_marker(self, batch: RecordBatch) -> bool:
        """A control batch was read; True when no batch of its transaction was seen (it may go)."""
        self._reach(batch.last_offset)
        if batch.record_count == 0:
            return True  # a marker emptied by an earlier pass
        try:
            marker = batch.control_record()
        except (CorruptRecordError, ValueError):
            return False
        pid = batch.producer_id
        if marker.type == ControlType.ABORT:
            found = self._aborted.pop(pid, None)
            if found is not None and found[1]:
                self.kept_aborts.append(found[0])
                return False
            return True
        if marker.type == ControlType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


def _aborted_txns(plog: PartitionLog, start: int, end: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, end)`` (Kafka's collectAbortedTransactions)."""
    found: list[AbortedTxn] = []
    if end <= start:
        return found
    for segment in plog.segments[_floor(plog.segments, start):]:
        txns, done = segment.txn_index.collect(start, end)
        found.extend(txns)
        if done:
            break
    return found


# -- cleaning --------------------------------------------------------------------------------------


class CleanerError(Exception):
    """A segment could not be read for cleaning (the log is left as it was)."""


class CleaningAborted(Exception):
    """A pass was abandoned: its log was deleted, closed or changed under it (nothing is lost)."""


_T = TypeVar("_T")


class InThread(Protocol):
    """Runs a function in a worker thread and hands its result to the event loop."""

    def __call__(self, fn: Callable[[], _T], /) -> Awaitable[_T]: ...


@dataclass(frozen=True)
class _Source:
    """A segment as a worker reads it: its file, its size when the pass began (an inactive
    segment never grows) and the aborted transactions from its base offset to the next one's."""

    path: Path
    size: int
    aborted: list[AbortedTxn]


@dataclass
class _Group:
    """Consecutive segments rewritten into one, and the facts the swap checks and keeps."""

    segments: list[LogSegment]  # only the event loop looks at these
    sources: list[_Source]
    ends: list[int]  # of each segment: the base offset of the segment after it
    mtimes: list[float]  # of each segment's file

    @property
    def base(self) -> int:
        return self.segments[0].base_offset

    @property
    def end(self) -> int:
        """Base offset of the segment after the group."""
        return self.ends[-1]

    @property
    def mtime(self) -> float:
        """Of its last segment's file, which the cleaned file keeps."""
        return self.mtimes[-1]


@dataclass
class _Output:
    """A group's ``.cleaned`` file, written and fsynced, with what its segment will need."""

    path: Path
    segment: LogSegment  # not opened yet: it becomes the segment once swapped in
    index: _IndexBuilder
    kept_aborts: list[AbortedTxn]


@dataclass
class _Pass:
    """What one cleaning pass needs to judge each batch."""

    offsets: KeyOffsetMap
    txns: _Transactions
    now_ms: int
    delete_retention_ms: int
    last_of_producers: dict[int, tuple[int | None, int]]  # pid -> (last data offset, epoch)
    round_end: int

    def keep(self, source: _Source, batch: RecordBatch) -> bytes | None:
        """The bytes that replace ``batch`` in the cleaned segment (None: nothing)."""
        control = batch.is_control
        can_discard = self.txns.on_marker(batch) if control else self.txns.on_data(batch)
        if control:
            discard_records = (can_discard and batch.has_delete_horizon
                               and batch.base_timestamp <= self.now_ms)
        else:
            discard_records = can_discard
        retain_empty = (batch.producer_id >= 0 and self._last_of_producer(batch)) or (
            batch.next_offset == self.round_end)
        if discard_records and not retain_empty:
            return None
        records = [] if discard_records else _records(source, batch)
        kept = records if control else [r for r in records if self._retain(batch, r)]
        if kept:
            tombstones = any(r.value is None for r in kept)
            set_horizon = (tombstones or (can_discard and control)) and not batch.has_delete_horizon
            if len(kept) == len(records) and not set_horizon:
                return bytes(batch.raw)
            if set_horizon:
                horizon: int | None = self.now_ms + self.delete_retention_ms
            else:
                horizon = batch.base_timestamp if batch.has_delete_horizon else None
            return filtered_batch(batch, kept, horizon)
        return empty_batch(batch) if retain_empty else None

    def _last_of_producer(self, batch: RecordBatch) -> bool:
        last = self.last_of_producers.get(batch.producer_id)
        if last is None:
            return False
        data_offset, epoch = last
        if data_offset is not None:
            return batch.last_offset == data_offset
        return batch.is_control and batch.producer_epoch == epoch

    def _retain(self, batch: RecordBatch, record: Record) -> bool:
        if record.offset > self.offsets.latest_offset:
            return True
        if record.key is None:
            return False
        if record.offset < self.offsets.get(bytes(record.key)):
            return False
        if record.value is not None:
            return True
        return not batch.has_delete_horizon or self.now_ms < batch.base_timestamp


def _records(source: _Source, batch: RecordBatch) -> list[Record]:
    try:
        return list(batch)
    except CorruptRecordError as exc:
        raise CleanerError(f"{source.path}: batch at offset {batch.base_offset}: {exc}") from None


class CleaningPass:
    """One pass over ``plog`` up to ``to_clean.first_uncleanable``, or less when the key map fills
    (then up to :attr:`end_offset`); see the module docstring.

    Build it on the event loop; :meth:`build_map` and :meth:`write_group` may run in a worker
    thread (one at a time), :meth:`swap` and :meth:`discard_outputs` run on the event loop.
    :meth:`run` drives the phases with a worker, :meth:`run_inline` in the calling thread.
    """

    def __init__(self, plog: PartitionLog, to_clean: LogToClean, now_ms: int):
        self.plog = plog
        self.to_clean = to_clean
        self.now_ms = now_ms
        #: why the pass was abandoned, once it was
        self.aborted: str | None = None
        self._started = time.monotonic()
        self._lock = threading.Lock()  # the abort against the worker's file creation
        self._directory_gone = False
        self._outputs: set[Path] = set()  # .cleaned files made and not swapped in yet
        self._swapped = 0  # groups swapped in so far
        end = self.first_uncleanable
        if read_checkpoint(plog.directory) is None:  # before any gap exists: see LogSegment.cleaned
            write_checkpoint(plog.directory, to_clean.first_dirty)
        self.directory = plog.directory
        self.config = plog.config
        segments = plog.segments
        first = _floor(segments, to_clean.first_dirty)
        self._map_sources = [(self._source(i, aborted=False), segments[i + 1].base_offset)
                             for i in range(first, len(segments) - 1) if segments[i].base_offset < end]
        #: the offset after the last one the pass cleans, once the key map is built
        self.end_offset = end
        self._map_aborted = _aborted_txns(plog, to_clean.first_dirty, end)
        producers = {
            pid: (entry.last_data_offset if entry.last_data_offset >= 0 else None, entry.producer_epoch)
            for pid, entry in plog.producer_state.producers.items()
        }
        self._map_memory = self.config.cleaner_dedupe_buffer_bytes_per_thread
        # An empty map until build_map makes the pass's own.
        self._pass = _Pass(KeyOffsetMap(2 * ENTRY_BYTES, max_keys=0), _Transactions(), now_ms,
                           self.config.delete_retention_ms, producers, end)
        position = {id(s): i for i, s in enumerate(segments)}
        self.groups: list[_Group] = []
        for group in _groups([s for s in segments[:-1] if s.base_offset < end],
                             self.config.segment_size, self.config.segment_index_bytes, end):
            self.groups.append(_Group(
                group, [self._source(position[id(s)], aborted=True) for s in group],
                [segments[position[id(s)] + 1].base_offset for s in group],
                [s.log_path.stat().st_mtime for s in group]))
        log.info("%s: cleaning offsets [%d, %d) (dirty from offset %d)", plog.name,
                 plog.log_start_offset, end, to_clean.first_dirty)

    def _source(self, i: int, *, aborted: bool) -> _Source:
        segments = self.plog.segments
        segment = segments[i]
        txns = _aborted_txns(self.plog, segment.base_offset, segments[i + 1].base_offset) if aborted else []
        return _Source(segment.log_path, segment.size, txns)

    @property
    def first_uncleanable(self) -> int:
        return self.to_clean.first_uncleanable

    # -- abort ---------------------------------------------------------------------------------

    def abort(self, reason: str, *, directory_gone: bool = False) -> None:
        """Abandon the pass (the worker stops at its next batch and creates no file after this
        returns). ``directory_gone``: the log's directory is being removed, whose owner then
        removes the pass's output too."""
        with self._lock:
            if self.aborted is None:
                self.aborted = reason
            self._directory_gone = self._directory_gone or directory_gone

    def _check_aborted(self) -> None:
        if self.aborted is not None:
            raise CleaningAborted(self.aborted)

    def log_changed(self) -> bool:
        """Whether a segment the pass reads has left the log (retention, DeleteRecords, a
        follower's truncation) or changed size (truncated)."""
        present = {id(s) for s in self.plog.segments}
        return any(id(s) not in present or s.size != source.size
                   for g in self.groups[self._swapped:]
                   for s, source in zip(g.segments, g.sources, strict=True))

    # -- worker phases -------------------------------------------------------------------------

    def _batches(self, source: _Source) -> Iterator[tuple[int, RecordBatch]]:
        """The segment's batches, read a window at a time through a descriptor of the pass's own;
        stops with :class:`CleaningAborted` once the pass is aborted."""
        fd = os.open(source.path, os.O_RDONLY)
        try:
            for item in scan_batches(fd, 0, source.size, with_data=True):
                self._check_aborted()
                yield item
        except FramingError as exc:
            raise CleanerError(f"{source.path}: {exc}") from None
        finally:
            os.close(fd)

    def build_map(self) -> None:
        """Map each key of the dirty range to the offset of its latest record, until the map is
        full (Kafka's ``buildOffsetMap``); sets :attr:`end_offset` to the offset after the last
        one mapped."""
        first_dirty, end = self.to_clean.first_dirty, self.first_uncleanable
        offsets = KeyOffsetMap(self._map_memory, self.config.cleaner_dedupe_buffer_load_factor,
                               max_keys=end - first_dirty)
        txns = _Transactions()
        txns.add_aborted(self._map_aborted)
        if self._map_segments(offsets, txns, first_dirty):
            log.info("%s: the cleaner's key map is full (%d keys): cleaning up to offset %d, the"
                     " rest of the dirty range is left to the next pass", self.plog.name,
                     len(offsets), offsets.latest_offset + 1)
        else:
            offsets.update_latest_offset(end - 1)
        self._pass.offsets = offsets
        self.end_offset = offsets.latest_offset + 1

    def _map_segments(self, offsets: KeyOffsetMap, txns: _Transactions, first_dirty: int) -> bool:
        """Put the dirty segments' keys in ``offsets``; True when it filled first (then it covers
        the records up to the last one put, and the batches before it)."""
        for source, next_base in self._map_sources:
            for _, batch in self._batches(source):
                if batch.is_control:
                    txns.on_marker(batch)
                elif not txns.on_data(batch):
                    for record in _records(source, batch):
                        if record.key is not None and record.offset >= first_dirty:
                            if offsets.full:
                                return True
                            offsets.put(bytes(record.key), record.offset)
                if batch.last_offset >= first_dirty:
                    offsets.update_latest_offset(batch.last_offset)
            offsets.update_latest_offset(next_base - 1)  # past an offset gap at the segment's end
        return False

    def _keep_groups_below(self, end: int) -> None:
        """Rewrite only the segments holding offsets below ``end`` (Kafka's
        ``logSegments(0, endOffset)``): later groups are dropped, the last one cut short."""
        kept: list[_Group] = []
        for group in self.groups:
            count = sum(1 for s in group.segments if s.base_offset < end)
            if count == 0:
                break
            kept.append(_Group(group.segments[:count], group.sources[:count],
                               group.ends[:count], group.mtimes[:count]))
        self.groups = kept

    def write_group(self, group: _Group) -> _Output:
        """Write and fsync ``<base>.log.cleaned``: the batches of ``group`` the pass keeps."""
        cleaning = self._pass
        cleaning.txns.kept_aborts = []
        path = self.directory / (segment_stem(group.base) + LOG_SUFFIX + CLEANED_SUFFIX)
        segment = LogSegment(self.directory, group.base, self.config, self.now_ms)
        index = _IndexBuilder(segment)
        with self._lock:
            self._check_aborted()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self._outputs.add(path)
        try:
            position = 0
            for source in group.sources:
                cleaning.txns.add_aborted(source.aborted)
                for _, batch in self._batches(source):
                    data = cleaning.keep(source, batch)
                    if data:
                        pwrite_all(fd, data, position)
                        index.add(position, RecordBatch(data))
                        position += len(data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._remove_output(path)
            raise
        os.close(fd)
        with self._lock:
            self._check_aborted()
            os.utime(path, (group.mtime, group.mtime))
        return _Output(path, segment, index, cleaning.txns.kept_aborts)

    def _remove_output(self, path: Path) -> None:
        with self._lock:
            self._outputs.discard(path)
            if not self._directory_gone:
                remove_quietly(path)

    def discard_outputs(self) -> None:
        """Remove the ``.cleaned`` files not swapped in (call once no worker phase runs)."""
        for path in list(self._outputs):
            self._remove_output(path)

    # -- event-loop phases ---------------------------------------------------------------------

    def swap(self, group: _Group, output: _Output) -> None:
        """Put ``output`` in place of ``group``'s segments, atomically on disk (see the module
        docstring); :class:`CleaningAborted` if the pass or its log no longer allows it."""
        self._check_aborted()
        plog = self.plog
        try:
            plog._check_open()
        except KafkaStorageError as exc:
            raise CleaningAborted(str(exc)) from None
        segments = plog.segments
        first = next((i for i, s in enumerate(segments) if s is group.segments[0]), None)
        after = None if first is None else first + len(group.segments)
        if (first is None or after is None or after >= len(segments)
                or any(a is not b or a.size != source.size for a, b, source in
                       zip(segments[first:after], group.segments, group.sources, strict=False))
                or len(segments[first:after]) != len(group.segments)
                or segments[after].base_offset != group.end):
            raise CleaningAborted(f"segments of {plog.name} were deleted or truncated during the pass")
        directory, base = self.directory, group.base
        atomic_write(directory / (segment_stem(base) + SWAP_RANGE_SUFFIX), f"{group.end}\n".encode())
        swap_path = directory / (segment_stem(base) + LOG_SUFFIX + SWAP_SUFFIX)
        os.replace(output.path, swap_path)  # the commit point
        self._outputs.discard(output.path)
        fsync_dir(directory)
        # The replaced files wait as ``.deleted`` for file.delete.delay.ms (readers holding them
        # read on), as Kafka's replaceSegments; a crash before the rename below finishes the swap.
        plog.delete_segment_files(group.segments, replaced_at=base)
        _finish_swap(directory, base)
        segment = output.segment
        segment.size = segment.log_path.stat().st_size
        segment.cleaned = True
        output.index.finish()
        segment.indexes_loaded = True
        segment.next_offset = group.end
        segment.txn_index.reset(output.kept_aborts)
        segment.flush()
        plog.replace_segments(group.segments, segment)
        self._swapped += 1

    def _done(self) -> int:
        log.info("%s: cleaned offsets [%d, %d) (%d keys mapped from offset %d) in %.3f s",
                 self.plog.name, self.plog.log_start_offset, self.end_offset,
                 len(self._pass.offsets), self.to_clean.first_dirty, time.monotonic() - self._started)
        return self.end_offset

    # -- drivers -------------------------------------------------------------------------------

    def run_inline(self) -> int:
        """The whole pass in the calling thread; returns the new checkpoint offset."""
        try:
            self.build_map()
            self._keep_groups_below(self.end_offset)
            for group in self.groups:
                self.swap(group, self.write_group(group))
        except BaseException:
            self.discard_outputs()
            raise
        return self._done()

    async def run(self, in_thread: InThread) -> int:
        """The pass with its heavy phases in a worker thread; returns the new checkpoint offset.

        Cancelled, it aborts: the worker still running creates nothing more, and what it made
        so far is removed."""
        try:
            await in_thread(self.build_map)
            self._keep_groups_below(self.end_offset)
            for group in self.groups:
                self.swap(group, await in_thread(functools.partial(self.write_group, group)))
        except BaseException:
            self.abort("the pass was stopped")
            self.discard_outputs()
            raise
        return self._done()


def clean_log(plog: PartitionLog, to_clean: LogToClean, now_ms: int) -> int:
    """Clean ``plog`` up to ``to_clean.first_uncleanable`` (or as far as the key map reaches) in
    this thread; returns the new checkpoint offset."""
    return CleaningPass(plog, to_clean, now_ms).run_inline()


def _groups(segments: list[LogSegment], max_size: int, index_bytes: int,
            end: int) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits ``segment.bytes``, whose index entries fit one
    index of ``segment.index.bytes`` and whose offsets fit 32-bit deltas (Kafka's
    groupSegmentsBySize)."""
    for segment in segments:
        segment.ensure_indexes()
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        offset_entries, time_entries = len(segments[i].offset_index), len(segments[i].time_index)
        i += 1
        while i < len(segments) and size + segments[i].size <= max_size:
            nxt = segments[i]
            following = segments[i + 1].base_offset if i + 1 < len(segments) else end
            if nxt.size and following - 1 - group[0].base_offset > _INT32_MAX:
                break
            if ((offset_entries + len(nxt.offset_index)) * OffsetIndex.ENTRY_SIZE > index_bytes
                    or (time_entries + len(nxt.time_index)) * TimeIndex.ENTRY_SIZE > index_bytes):
                break
            group.append(nxt)
            size += nxt.size
            offset_entries += len(nxt.offset_index)
            time_entries += len(nxt.time_index)
            i += 1
        groups.append(group)
    return groups


def _finish_swap(directory: Path, base: int) -> None:
    """Rename ``<base>.log.swap`` to ``<base>.log`` and drop the range file (both fsynced)."""
    stem = segment_stem(base)
    os.replace(directory / (stem + LOG_SUFFIX + SWAP_SUFFIX), directory / (stem + LOG_SUFFIX))
    fsync_dir(directory)
    remove_quietly(directory / (stem + SWAP_RANGE_SUFFIX))


# -- recovery --------------------------------------------------------------------------------------


def complete_interrupted_swaps(directory: Path) -> int | None:
    """Discard unfinished ``.cleaned`` files and finish swaps a crash interrupted; returns the
    lowest base offset of a swapped-in segment (whose indexes must be rebuilt), or None."""
    lowest: int | None = None
    for path in sorted(directory.glob("*" + CLEANED_SUFFIX)):
        log.info("removing unfinished cleaner output %s", path)
        remove_quietly(path)
    for path in sorted(directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
        stem = path.name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
        if len(stem) != 20 or not stem.isdigit():
            continue
        base = int(stem)
        end = _swap_end(directory, path, base)
        bases = sorted(int(p.name[:20]) for p in directory.glob("*" + LOG_SUFFIX)
                       if p.name[:20].isdigit() and len(p.name) == 20 + len(LOG_SUFFIX))
        for old in bases:
            if base <= old < end:
                old_stem = segment_stem(old)
                for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
                    remove_quietly(directory / (old_stem + suffix))
        for suffix in INDEX_SUFFIXES:
            remove_quietly(directory / (stem + suffix))
        _finish_swap(directory, base)
        log.warning("%s: completed the swap of a cleaned segment at offset %d interrupted by a"
                    " crash (replacing offsets [%d, %d))", directory.name, base, base, end)
        lowest = base if lowest is None else min(lowest, base)
    for path in directory.glob("*" + SWAP_RANGE_SUFFIX):
        if not (directory / (path.name[:20] + LOG_SUFFIX + SWAP_SUFFIX)).exists():
            remove_quietly(path)
    return lowest


def _swap_end(directory: Path, swap: Path, base: int) -> int:
    """End of the offset range a swap file replaces: from its range file, else (Kafka's rule)
    the offset after its last batch."""
    try:
        return int((directory / (segment_stem(base) + SWAP_RANGE_SUFFIX)).read_text().strip())
    except (FileNotFoundError, ValueError):
        pass
    end = base
    fd = os.open(swap, os.O_RDONLY)
    try:
        for _, batch in scan_batches(fd, 0, os.fstat(fd).st_size):
            end = batch.next_offset
    except FramingError:
        pass
    finally:
        os.close(fd)
    return end
