"""The log of one topic-partition: a directory of segments with append, read, retention, recovery.

Directory ``<data>/<topic>-<partition>/`` holds the segments (see ``segment``), producer
snapshots (``{offset:020d}.snapshot``), ``partition.checkpoint`` (log start offset and recovery
point, JSON, replaced atomically) and, after a clean close, ``.clean_shutdown``.

Offsets: ``log_start_offset`` <= ``last_stable_offset`` <= ``high_watermark`` <=
``log_end_offset``. On a single node the high watermark follows the log end offset (everything
appended is committed); a replicated partition sets it (:meth:`PartitionLog.set_high_watermark`)
and reads without a ``max_offset`` stop at it, so consumers never see uncommitted records
(a follower's fetch passes ``max_offset=log_end_offset``). ``last_stable_offset`` is the first
offset of the oldest open transaction, or the high watermark.

Leader epochs: every append made here as leader stamps :attr:`PartitionLog.leader_epoch` (0 on a
single node) in each batch's ``partition_leader_epoch`` and records where each epoch began in the
:class:`~reference_broker.log.leader_epoch.LeaderEpochCache` (``leader-epoch-checkpoint``). A
follower's :meth:`PartitionLog.append_as_follower` keeps the leader's batches, offsets and epochs;
:meth:`PartitionLog.truncate_to` cuts the log back to where it diverged from the leader's.

Errors (all from ``sdk.protocol.errors``, so a handler can answer with ``exc.code``):

* append: the validation errors listed in ``_validation``; ``OutOfOrderSequenceNumberError``,
  ``InvalidProducerEpochError``, ``InvalidTxnStateError``, ``TransactionCoordinatorFencedError``
  (and ``UnknownProducerIdError`` in legacy mode) from ``producer_state``. A rejected append
  writes nothing.
* read/offset lookups: ``OffsetOutOfRangeError`` outside ``[log_start_offset, log_end_offset]``.
* ``KafkaStorageError``: a read that would have to cross corrupt data (reads that end before it
  still succeed), or any operation after an I/O error took the log offline (``offline_reason``).

Durability: ``append`` returns after ``pwrite`` put the bytes in the OS page cache. That survives
``kill -9`` of the broker (the kernel owns the pages), which is Kafka's default contract too
(``flush.messages``/``flush.ms`` default to never; replication, not fsync, protects against power
loss). Set ``flush_interval_messages=1`` to fsync before every acknowledgement. Segments that
were rolled are fsynced by :meth:`PartitionLog.maybe_flush` (called periodically by the log
manager), which also advances the recovery point.

Recovery at open: with ``.clean_shutdown`` present the files are trusted (the active segment's
tail is still checked). Otherwise every segment at or after the recovery point is validated
(framing, CRC-32C, offset continuity) and its indexes rebuilt. Damage that runs to the end of the
*last* segment is a torn write (a killed or crashed append that was never acknowledged, or damage
that cannot be told from one) and is truncated, with a warning. Any other damaged batch, in any
segment, is logged as an error naming file and position, kept on disk and never served: reads
that would return it raise ``KafkaStorageError`` (reads ending before it still succeed, offsets
after it stay readable when the batch framing allows stepping over it; see
:attr:`PartitionLog.corruptions`). Trusted segments are verified lazily: every batch is
CRC-checked the first time it is served after open. Producer state is loaded from the newest
usable snapshot and rebuilt by replaying batch headers after it.

All methods are synchronous and short (bounded by the bytes they touch); the broker calls them
from its event loop.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import os
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from reference_broker.log._checkpoint import CLEAN_SHUTDOWN_FILE, Checkpoint
from reference_broker.log._deletion import DELETED_SUFFIX, DelayedDeletions
from reference_broker.log._files import atomic_write, fsync_dir, os_error_text, remove_quietly
from reference_broker.log._validation import validate_append
from reference_broker.log.config import LogConfig
from reference_broker.log.index import AbortedTxn
from reference_broker.log.leader_epoch import LeaderEpochCache
from reference_broker.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from reference_broker.log.results import AppendResult, FileSlice, ReadResult, SliceReadResult
from reference_broker.log.segment import Corruption, LogSegment, SegmentCorrupt
from sdk.protocol.errors import InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError
from sdk.records import (
    ControlType,
    CorruptRecordError,
    RecordBatch,
    build_control_batch,
    set_log_append_time,
)
from sdk.records.header import ATTR_CONTROL, ATTR_TRANSACTIONAL

__all__ = ["AppendResult", "FileSlice", "PartitionLog", "ReadResult", "SliceReadResult"]

log = logging.getLogger("reference_broker.log")

_BASE_OFFSET = struct.Struct(">q")  # the first field of a batch header
_LEADER_EPOCH = struct.Struct(">i")  # partition_leader_epoch, after base offset and length
_LEADER_EPOCH_POSITION = 12
_CLIENT = AppendOrigin.CLIENT  # Enum class attribute access is slow; the append path tests it
_REPLICATION = AppendOrigin.REPLICATION


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """One partition's log. Create with :meth:`open`; see the module docstring for semantics."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment],
                 producer_state: ProducerStateManager, log_start_offset: int,
                 recovery_point: int, now_ms: int,
                 leader_epoch_cache: LeaderEpochCache | None = None):
        self.directory = directory
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        # The segments whose transaction index has entries, in log order: a read_committed fetch
        # searches them only (there are usually few), not every segment after its offset.
        self._segments_with_aborts = [s for s in segments if s.txn_index.entries]
        self.producer_state = producer_state
        self._log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._last_flush_ms = now_ms
        self._checkpoint: Checkpoint | None = None  # last written, to skip identical rewrites
        self._closed = False
        self.offline_reason: str | None = None
        self.leader_epoch_cache = leader_epoch_cache or LeaderEpochCache(directory)
        #: stamped into the batches this log appends as leader
        latest_epoch = self.leader_epoch_cache.latest_epoch
        self.leader_epoch = 0 if latest_epoch is None else latest_epoch
        #: None: the high watermark follows the log end offset (a single node)
        self._high_watermark: int | None = None
        #: the high watermark a replicated partition had checkpointed (None if it never was)
        self.checkpointed_high_watermark: int | None = None
        #: where removed segments wait out ``file.delete.delay.ms`` (the log manager's, shared)
        self.deletions = DelayedDeletions()

    # -- open ----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        recover: bool = True,
        now_ms: int | None = None,
        legacy_unknown_producer_id: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, recovering it if needed.

        ``recover=False`` trusts the files as if the last shutdown had been clean (for tools).
        ``legacy_unknown_producer_id`` selects pre-KIP-360 behaviour (see ``producer_state``).
        """
        from reference_broker.log._loader import load_partition

        return load_partition(
            cls, Path(directory), config or LogConfig(), recover=recover,
            now_ms=_now_ms() if now_ms is None else now_ms,
            legacy_unknown_producer_id=legacy_unknown_producer_id,
        )

    # -- offsets -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``topic-partition``, the directory name, for messages."""
        return self.directory.name

    @property
    def active_segment(self) -> LogSegment:
        """The segment appends go to (always the last)."""
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        """First offset a consumer may read (advanced by retention and DeleteRecords)."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record will get."""
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Last committed offset + 1: the log end offset unless replication set it."""
        hw = self._high_watermark
        return self.segments[-1].next_offset if hw is None else hw

    @property
    def replicated(self) -> bool:
        """Whether the high watermark is set by replication rather than following the log end."""
        return self._high_watermark is not None

    def set_high_watermark(self, offset: int | None) -> None:
        """Set the high watermark (clamped to ``[log_start_offset, log_end_offset]``);
        None makes it follow the log end offset again (a partition no longer replicated)."""
        if offset is not None:
            offset = min(max(offset, self._log_start_offset), self.log_end_offset)
        self._high_watermark = offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset
        if first_unstable is None:
            return self.high_watermark
        return min(max(first_unstable, self._log_start_offset), self.high_watermark)

    @property
    def size_in_bytes(self) -> int:
        """Total bytes of all segment files (what retention.bytes limits)."""
        return sum(s.size for s in self.segments)

    @property
    def corruptions(self) -> list[Corruption]:
        """Damaged ranges found so far (each is also logged as an error)."""
        return [c for s in self.segments for c in s.corruptions]

    def earliest_offset(self) -> int:
        """ListOffsets EARLIEST (-2): the log start offset."""
        self._check_open()
        return self._log_start_offset

    def latest_offset(self) -> int:
        """ListOffsets LATEST (-1): the high watermark (the log end offset on a single node; use
        ``last_stable_offset`` for read_committed)."""
        self._check_open()
        return self.high_watermark

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch's ``(epoch, end offset)`` for ``epoch`` (Kafka's
        ``endOffsetForEpoch``; ``(-1, -1)`` when unknown). The current :attr:`leader_epoch`
        counts as begun at the log end offset when none of its batches is written yet, as it
        does in Kafka, whose leader records its epoch when it takes over."""
        self._check_open()
        if epoch < 0:
            return -1, -1
        cache = self.leader_epoch_cache
        log_end = self.log_end_offset
        current = self.leader_epoch
        latest = cache.latest_epoch
        if latest is None or latest < current:
            if epoch == current:
                return current, log_end
            if epoch > current:
                return -1, -1
            if latest is None:
                return epoch, log_end  # older than every entry: the virtual entry's start
            if epoch >= latest:
                return latest, log_end  # the latest written epoch ended where the current began
        return cache.end_offset_for(epoch, log_end)

    # -- append --------------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        in_place: bool = False,
    ) -> AppendResult:
        """Validate, assign offsets and append one produce request's batches for this partition.

        The input is not modified (a copy gets the offsets, the leader epoch and, for
        ``LogAppendTime`` topics, the broker timestamp) unless ``in_place`` says the caller gives
        it up: then a writable input gets them itself and is written as it is. Control batches
        are refused unless ``origin`` is COORDINATOR.
        """
        if self._closed or self.offline_reason is not None:
            self._check_open()
        if origin is _REPLICATION:
            raise ValueError("a follower appends with append_as_follower")
        config = self.config
        buf, positions = validate_append(records, config, origin, now_ms, in_place=in_place)
        base = next_offset = self.segments[-1].next_offset
        log_append_time = config.log_append_time
        epoch = self.leader_epoch
        # One header object per batch, parsed once offsets (and LogAppendTime) are in place and
        # shared by the producer checks and the segment's index bookkeeping.
        batches = []
        for pos in positions:
            # validate_append checked the framing that assign_offsets would check again.
            _BASE_OFFSET.pack_into(buf, pos, next_offset)
            _LEADER_EPOCH.pack_into(buf, pos + _LEADER_EPOCH_POSITION, epoch)
            if log_append_time:
                set_log_append_time(buf, pos, now_ms)
            batch = RecordBatch(buf, pos)
            batches.append(batch)
            next_offset += batch.last_offset_delta + 1
        plan = self._analyze_producers(batches, origin)
        if isinstance(plan, BatchMetadata):
            return AppendResult(
                plan.first_offset, plan.last_offset,
                plan.timestamp if log_append_time else -1,
                self._log_start_offset, plan.last_offset - plan.first_offset + 1, duplicate=True,
            )
        if self.leader_epoch_cache.latest_epoch != epoch:
            self._assign_epoch(epoch, base)
        self._write(buf, positions, batches, plan, next_offset, now_ms)
        return AppendResult(
            base, next_offset - 1, now_ms if log_append_time else -1,
            self._log_start_offset, next_offset - base,
        )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int
    ) -> AppendResult:
        """Append batches fetched from the leader as they are: offsets, leader epochs and
        timestamps stay the leader's (Kafka's ``appendAsFollower``).

        Checked: framing and CRC (``CorruptMessageError``), and that the batches continue this
        log: the first starts at the log end offset and each follows the previous one
        (``InvalidRecordError`` otherwise; a compacted log's batches may skip offsets). Producer
        state and the transaction index are updated as for a leader's append; each batch's epoch
        is recorded in the leader epoch cache. The high watermark is not moved (the leader says
        where it is).
        """
        self._check_open()
        buf, positions = validate_append(records, self.config, _REPLICATION, now_ms)
        batches = [RecordBatch(buf, pos) for pos in positions]
        base = expected = self.log_end_offset
        gaps = self.active_segment.gaps_allowed
        for batch in batches:
            first = batch.base_offset
            if first < expected or (first > expected and not gaps) or batch.last_offset < first:
                raise InvalidRecordError(
                    f"{self.name}: a replicated batch at offset {first} does not continue the log"
                    f" at {expected}"
                )
            expected = batch.last_offset + 1
        plan = self._analyze_producers(batches, _REPLICATION)
        if isinstance(plan, BatchMetadata):  # never: duplicates are searched for clients only
            raise AssertionError("a replicated append was taken for a duplicate")
        cache = self.leader_epoch_cache
        for batch in batches:
            epoch = batch.partition_leader_epoch
            if epoch >= 0 and epoch != cache.latest_epoch:
                self._assign_epoch(epoch, batch.base_offset)
        self._write(buf, positions, batches, plan, expected, now_ms)
        first = batches[0]
        return AppendResult(first.base_offset, expected - 1, -1, self._log_start_offset,
                            expected - base)

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        try:
            self.leader_epoch_cache.assign(epoch, start_offset)
        except OSError as exc:
            raise self._go_offline(f"leader epoch checkpoint write failed: {os_error_text(exc)}") from exc

    def _write(
        self,
        buf: bytearray | memoryview,
        positions: list[int],
        batches: list[RecordBatch],
        plan: tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]],
        next_offset: int,
        now_ms: int,
    ) -> None:
        """Write validated batches (offsets final) to the active segment, rolling first if due,
        then commit the producer updates the batches were checked against."""
        infos, completed = plan
        max_ts = batches[0].max_timestamp if len(batches) == 1 else max(
            b.max_timestamp for b in batches)
        try:
            segment = self._maybe_roll(len(buf), max_ts, next_offset - 1, now_ms)
            segment.append(buf, positions, batches)
        except OSError as exc:
            raise self._go_offline(f"append failed: {os_error_text(exc)}") from exc
        if infos:
            self._commit_producers(infos, completed, segment)
        self.producer_state.map_end_offset = next_offset
        self._flush_if_due(now_ms)

    def append_control(
        self,
        control_type: ControlType | int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        now_ms: int,
    ) -> AppendResult:
        """Write a COMMIT/ABORT marker for ``producer_id`` (WriteTxnMarkers).

        Ends the producer's open transaction (if any); an ABORT is recorded in the aborted
        transaction index. Raises ``InvalidProducerEpochError`` for an older producer epoch and
        ``TransactionCoordinatorFencedError`` for an older coordinator epoch.
        """
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            raise InvalidRecordError(f"control type {control_type} is not a transaction marker")
        batch = build_control_batch(control_type, producer_id, producer_epoch,
                                    coordinator_epoch, timestamp_ms=now_ms)
        return self.append(batch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)

    def _analyze_producers(
        self, batches: list[RecordBatch], origin: AppendOrigin
    ) -> BatchMetadata | tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]]:
        """Validate producer epochs/sequences; a duplicate's metadata, or the staged update."""
        state = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        client = origin is _CLIENT
        for batch in batches:
            pid = batch.producer_id
            if pid < 0:
                continue
            epoch = batch.producer_epoch
            first_seq = batch.base_sequence
            last_seq = batch.last_sequence
            if client:
                duplicate = state.find_duplicate(pid, epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = state.prepare(pid, origin)
            attributes = batch.attributes
            if attributes & ATTR_CONTROL:
                marker = _txn_marker(batch)
                txn = info.append_end_txn_marker(
                    marker[0], marker[1], epoch, batch.base_offset, batch.max_timestamp,
                )
                if txn is not None:
                    completed.append(txn)
            else:
                first_offset = batch.base_offset
                info.append_data_batch(
                    epoch, first_seq, last_seq, batch.max_timestamp, first_offset,
                    first_offset + batch.last_offset_delta, bool(attributes & ATTR_TRANSACTIONAL),
                )
        return infos, completed

    def _commit_producers(self, infos: dict[int, ProducerAppendInfo],
                          completed: list[CompletedTxn], segment: LogSegment) -> None:
        state = self.producer_state
        for info in infos.values():
            state.update(info)
        for txn in completed:
            lso = state.last_stable_offset_after(txn)
            if txn.is_aborted:
                try:
                    segment.txn_index.append(
                        AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                except OSError as exc:
                    raise self._go_offline(f"transaction index write failed: {os_error_text(exc)}") from exc
                with_aborts = self._segments_with_aborts
                if not with_aborts or with_aborts[-1] is not segment:
                    with_aborts.append(segment)  # the active segment: the last of the log
            state.complete_txn(txn)

    # -- roll / flush --------------------------------------------------------------------------

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now_ms: int) -> LogSegment:
        active = self.active_segment
        if active.should_roll(size, max_ts, last_offset, now_ms):
            return self.roll(now_ms)
        return active

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty).

        Takes a producer-state snapshot at the new base offset; the old segment is fsynced by the
        next :meth:`maybe_flush` or :meth:`flush`.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        active = self.active_segment
        if active.size == 0:
            return active
        active.on_become_inactive()
        segment = LogSegment.create(self.directory, self.log_end_offset, self.config, now_ms)
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot()
        self._cleanup_snapshots()
        return segment

    def _flush_if_due(self, now_ms: int) -> None:
        config = self.config
        if (
            self.log_end_offset - self.recovery_point >= config.flush_interval_messages
            or now_ms - self._last_flush_ms >= config.flush_interval_ms
        ):
            self.flush(now_ms=now_ms)

    def maybe_flush(self, now_ms: int) -> None:
        """Periodic durability work: fsync rolled segments and honour ``flush.ms``; checkpoint a
        replicated partition's high watermark when it moved."""
        self._check_open()
        hw = self._high_watermark
        if hw is not None and self._checkpoint is not None and self._checkpoint.high_watermark != hw:
            try:
                self._write_checkpoint()
            except OSError as exc:
                raise self._go_offline(f"checkpoint write failed: {os_error_text(exc)}") from exc
        if now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
            self.flush(now_ms=now_ms)
        elif self.recovery_point < self.active_segment.base_offset:
            self.flush(self.active_segment.base_offset, now_ms=now_ms)

    def flush(self, upto: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync everything below ``upto`` (default: the log end) and advance the recovery point."""
        self._check_open()
        upto = self.log_end_offset if upto is None else upto
        if upto > self.recovery_point:
            first = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            active = self.active_segment
            try:
                for segment in self.segments[first:]:
                    if segment.base_offset >= upto:
                        break
                    segment.flush()
                    if segment is not active:
                        segment.release_files()  # inactive: reopened lazily by the next read
                self.recovery_point = upto
                self._write_checkpoint()
            except OSError as exc:
                raise self._go_offline(f"flush failed: {os_error_text(exc)}") from exc
        if upto == self.log_end_offset:
            self._last_flush_ms = _now_ms() if now_ms is None else now_ms

    def _write_checkpoint(self) -> None:
        hw = self._high_watermark
        checkpoint = Checkpoint(self._log_start_offset, self.recovery_point,
                                self.checkpointed_high_watermark if hw is None else hw)
        if checkpoint != self._checkpoint:
            checkpoint.write(self.directory)
            self._checkpoint = checkpoint

    def _cleanup_snapshots(self) -> None:
        """Keep snapshots recovery may need: those at/after the recovery point's segment, plus
        the newest one before it."""
        offsets = self.producer_state.snapshot_offsets()
        floor = self._bases[max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)]
        keep = {o for o in offsets if o >= floor}
        older = [o for o in offsets if o < floor]
        if older:
            keep.add(older[-1])
        self.producer_state.delete_snapshots(keep)

    # -- read ----------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        with_aborted: bool = False,
    ) -> ReadResult:
        """Whole batches starting with the one containing ``offset``, at most ``max_bytes``.

        With ``min_one_batch`` the first batch is returned even if larger than ``max_bytes``
        (Kafka's rule, so a consumer can always progress). Batches whose last offset is >=
        ``max_offset`` (default: the high watermark) are excluded (pass ``last_stable_offset``
        for read_committed, ``log_end_offset`` for a follower). May span segments. Never decodes
        records; verifies the CRC of batches not yet verified.
        """
        pieces, first, next_offset = self._collect(offset, max_bytes, max_offset, min_one_batch)
        if len(pieces) == 1:
            data: bytes | memoryview = pieces[0][2]
        else:
            data = b"".join(p[2] for p in pieces)
        return ReadResult(
            data, first, next_offset, self.high_watermark, self.last_stable_offset,
            self._log_start_offset,
            self.aborted_transactions(offset, next_offset) if with_aborted else None,
        )

    def read_slices(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        with_aborted: bool = False,
    ) -> SliceReadResult:
        """Same selection as :meth:`read`, returned as ``(fd, position, length)`` file ranges.

        For ``os.sendfile``/``loop.sendfile``: the descriptors are duplicates owned by the
        result; close it when sent. The bytes are still verified (read once) unless already
        verified since open.
        """
        pieces, first, next_offset = self._collect(offset, max_bytes, max_offset, min_one_batch)
        slices = [FileSlice(os.dup(seg.fd), seg.log_path, pos, len(data))
                  for seg, pos, data in pieces]
        return SliceReadResult(
            slices, first, next_offset, self.high_watermark, self.last_stable_offset,
            self._log_start_offset,
            self.aborted_transactions(offset, next_offset) if with_aborted else None,
            size=sum(s.length for s in slices),
        )

    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {self.log_end_offset}]"
                f" of {self.name}"
            )

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def _collect(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[list[tuple[LogSegment, int, bytes | memoryview]], int, int]:
        self._check_open()
        self._check_offset(offset)
        upper = self.high_watermark if max_offset is None else min(max_offset, self.log_end_offset)
        pieces: list[tuple[LogSegment, int, bytes | memoryview]] = []
        first = -1
        next_offset = offset
        remaining = max_bytes
        if offset >= upper:
            return pieces, offset, offset
        for segment in self.segments[self._segment_index(offset):]:
            try:
                corruption = segment.corruption_covering(next_offset)
                if corruption is not None:
                    raise SegmentCorrupt(corruption)
                found = segment.find_batch(next_offset)
                if found is None:
                    continue
                pos, header = found
                take_first = min_one_batch and not pieces
                data, after, stopped = segment.read_batches(
                    pos, header.base_offset, remaining, upper, take_first)
            except SegmentCorrupt as exc:
                if pieces:
                    break
                raise KafkaStorageError(
                    f"{self.name}: offset {next_offset} cannot be served: {exc.corruption.client_text()}"
                ) from None
            except OSError as exc:
                raise self._go_offline(f"read failed: {os_error_text(exc)}") from exc
            if data:
                if first < 0:
                    first = header.base_offset
                pieces.append((segment, pos, data))
                remaining -= len(data)
                next_offset = after
            if stopped or remaining <= 0 or next_offset >= upper:
                break
        return pieces, (first if pieces else offset), next_offset

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of aborted transactions overlapping
        ``[fetch_offset, upper_bound_offset)``, for a read_committed FetchResponse.

        A transaction is indexed in the segment of its ABORT marker, which may lie any number of
        segments beyond the range (a transaction can span segment rolls). So the search starts
        at the segment holding ``fetch_offset`` (no overlapping marker can precede it) and goes
        on through later segments until an entry's last stable offset reaches
        ``upper_bound_offset``: every transaction begun before the bound had ended by then, so
        no later marker can belong to one overlapping the range (Kafka's
        ``collectAbortedTransactions``). Without such an entry the search runs to the log end.
        An empty range has no aborted transactions.
        """
        self._check_open()
        found: list[tuple[int, int]] = []
        if upper_bound_offset <= fetch_offset:
            return found
        with_aborts = self._segments_with_aborts
        first_base = self._bases[self._segment_index(fetch_offset)]
        start = bisect.bisect_left(with_aborts, first_base, key=_base_offset)
        for segment in itertools.islice(with_aborts, start, None):
            txns, done = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found.extend((t.producer_id, t.first_offset) for t in txns)
            if done:
                break
        return found

    # -- timestamps ----------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: ``(offset, timestamp)`` of the first record at or after
        ``timestamp`` (>= log start offset), or None if every record is older."""
        self._check_open()
        if timestamp < 0:
            raise ValueError("use earliest_offset/latest_offset/max_timestamp_offset for specials")
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self._log_start_offset:
                continue
            find = functools.partial(segment.find_offset_by_timestamp, timestamp, self._log_start_offset)
            hit = self._guard(find)
            if hit is not None:
                return hit
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): ``(offset, timestamp)`` of the first record with
        the largest timestamp, or None when no record has a timestamp."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        segment = best

        def lookup() -> tuple[int, int] | None:
            found = segment.find_batch(segment.offset_of_max_timestamp)
            if found is None:
                return None
            return segment.record_with_timestamp(found[0], segment.max_timestamp, 0, at_least=False)

        return self._guard(lookup)

    def _guard(self, fn: Callable[[], tuple[int, int] | None]) -> tuple[int, int] | None:
        try:
            return fn()
        except SegmentCorrupt as exc:
            raise KafkaStorageError(f"{self.name}: {exc.corruption.client_text()}") from None
        except OSError as exc:
            raise self._go_offline(f"read failed: {os_error_text(exc)}") from exc

    # -- deletion ------------------------------------------------------------------------------

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords: make ``offset`` the log start offset (-1 = high watermark).

        Whole segments below it leave the log at once (their files go after
        ``file.delete.delay.ms``). Raises ``OffsetOutOfRangeError`` beyond the high watermark; a
        smaller offset than the current start is a no-op. Returns the new log start offset (the
        response's low watermark).
        """
        self._check_open()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the high watermark of {self.name} is"
                f" {self.high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._write_checkpoint()
            self._epochs_start_at(offset)
            self._delete_segments(self._deletable(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= offset), now_ms)
        return self._log_start_offset

    def _epochs_start_at(self, offset: int) -> None:
        try:
            self.leader_epoch_cache.truncate_from_start(offset)
        except OSError as exc:
            raise self._go_offline(f"leader epoch checkpoint write failed: {os_error_text(exc)}") from exc

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch ending at or after ``offset`` (a follower whose log diverged from
        its leader's); segments, indexes, producer state, leader epochs and the high watermark
        follow. False if nothing was removed. See ``_truncation`` for the crash-safe order."""
        from reference_broker.log._truncation import truncate_to

        self._check_open()
        return truncate_to(self, offset)

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Empty the log and restart it at ``offset`` (a follower behind its leader's log
        start)."""
        from reference_broker.log._truncation import truncate_fully

        self._check_open()
        truncate_fully(self, offset, now_ms)

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole segments past ``retention.ms`` (by largest timestamp) or
        ``retention.bytes``, and those below the log start offset; returns how many.

        The active segment is deleted too when it qualifies (a new empty one is rolled first, as
        Kafka does); the log start offset advances to the first remaining segment.
        """
        self._check_open()
        start = self._log_start_offset
        deleted = self._delete_segments(self._deletable(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= start), now_ms)
        if not self.config.delete_enabled:
            return deleted
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            if excess > 0:
                deleted += self._delete_segments(self._deletable(over_size), now_ms)
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(self._deletable(
                lambda seg, nxt: now_ms - seg.largest_timestamp > retention_ms), now_ms)
        return deleted

    def _deletable(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        """The leading segments ``predicate`` accepts, stopping at the first segment not wholly
        below the high watermark (Kafka's ``deletableSegments``): the log start offset never
        passes the high watermark, so a replica never drops records its followers lack."""
        out = []
        high_watermark = self.high_watermark
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            if nxt is None and segment.size == 0:
                break
            if (nxt.base_offset if nxt is not None else self.log_end_offset) > high_watermark:
                break
            if not predicate(segment, nxt):
                break
            out.append(segment)
        return out

    def _delete_segments(self, doomed: list[LogSegment], now_ms: int | None) -> int:
        if not doomed:
            return 0
        try:
            if len(doomed) == len(self.segments):
                self.roll(now_ms)
            del self.segments[: len(doomed)]
            del self._bases[: len(doomed)]
            gone = {id(segment) for segment in doomed}
            self._segments_with_aborts = [s for s in self._segments_with_aborts if id(s) not in gone]
            if self.segments[0].base_offset > self._log_start_offset:
                self._log_start_offset = self.segments[0].base_offset
            self.recovery_point = max(self.recovery_point, self._log_start_offset)
            self._write_checkpoint()
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self.delete_segment_files(doomed)
            self._cleanup_snapshots()
        except OSError as exc:
            raise self._go_offline(f"segment deletion failed: {os_error_text(exc)}") from exc
        log.info("%s: deleted %d segment(s); log start offset is now %d",
                 self.name, len(doomed), self._log_start_offset)
        return len(doomed)

    def delete_segment_files(self, segments: Sequence[LogSegment], *,
                             replaced_at: int | None = None) -> None:
        """Delete the files of ``segments``, already taken out of the log, as Kafka does: renamed
        ``.deleted`` now (with the producer snapshot at each one's base offset, except
        ``replaced_at``, where a cleaner swap's new segment starts), removed after
        ``file.delete.delay.ms`` (see ``_deletion``). Raises OSError if a rename fails.

        The cleaner's swap calls it between putting the ``.swap`` file in place and renaming it
        to ``.log`` (Kafka's LocalLog.replaceSegments), so a crash leaves the swap to finish."""
        snapshots = []
        for segment in segments:
            segment.rename_for_deletion()
            if segment.base_offset == replaced_at:
                continue
            snapshot = self.producer_state.snapshot_path(segment.base_offset)
            target = snapshot.with_name(snapshot.name + DELETED_SUFFIX)
            try:
                os.replace(snapshot, target)
                snapshots.append(target)
            except FileNotFoundError:
                pass
        doomed = list(segments)

        def remove() -> None:
            for segment in doomed:
                segment.delete()
            for path in snapshots:
                remove_quietly(path)

        what = f"{self.name} segment(s) at {', '.join(str(s.base_offset) for s in doomed)}"
        delay_ms = self.config.file_delete_delay_ms
        log.info("%s renamed .deleted; their files go in %d ms", what, delay_ms)
        self.deletions.schedule(delay_ms, what, remove)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put the cleaner's rewrite ``new`` in place of the consecutive inactive segments ``old``
        (whose files the cleaner has already replaced; see ``cleaner``)."""
        first = self.segments.index(old[0])
        self.segments[first: first + len(old)] = [new]
        self._bases = [s.base_offset for s in self.segments]
        self._segments_with_aborts = [s for s in self.segments if s.txn_index.entries]

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle longer than ``producer.id.expiration.ms``."""
        return self.producer_state.remove_expired(now_ms)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (AlterConfigs); takes effect for the next operations."""
        self.config = config
        self.producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms
        for segment in self.segments:
            segment.update_config(config)

    # -- shutdown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, snapshot producer state and mark the shutdown clean; then close the files."""
        if self._closed:
            return
        try:
            if self.offline_reason is None:
                self.active_segment.on_become_inactive()
                self.flush()
                self.producer_state.map_end_offset = self.log_end_offset
                self.producer_state.take_snapshot()
                self._cleanup_snapshots()
                atomic_write(self.directory / CLEAN_SHUTDOWN_FILE, b"")
        finally:
            self._close_files()

    def _close_files(self) -> None:
        self._closed = True
        for segment in self.segments:
            try:
                segment.close()
            except OSError:
                pass

    def delete(self) -> None:
        """Close and remove the whole partition directory (DeleteTopics).

        The directory is first renamed ``<name>.<random>-delete`` (atomic), so a crash halfway
        never leaves a partially deleted log that looks live, and removed after
        ``file.delete.delay.ms``; the log manager removes leftovers.
        """
        self._close_files()
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
        try:
            self.directory.rename(doomed)
        except FileNotFoundError:
            return
        fsync_dir(doomed.parent)
        self.deletions.schedule(self.config.file_delete_delay_ms, str(doomed),
                                functools.partial(shutil.rmtree, doomed, ignore_errors=True))

    # -- state checks --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.name} is closed")
        if self.offline_reason is not None:
            raise KafkaStorageError(f"log {self.name} is offline: {self.offline_reason}")

    def _go_offline(self, reason: str) -> KafkaStorageError:
        log.error("%s: taking the log offline: %s", self.name, reason)
        self.offline_reason = reason
        return KafkaStorageError(f"{self.name}: {reason}")


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset


def _txn_marker(batch: RecordBatch) -> tuple[int, int]:
    """(control type, coordinator epoch) of a COMMIT/ABORT batch; other control types refused."""
    try:
        record = batch.control_record()
    except CorruptRecordError as exc:
        raise InvalidRecordError(f"invalid control batch: {exc}") from None
    if record.type not in (ControlType.ABORT, ControlType.COMMIT):
        raise InvalidRecordError(f"control record type {record.type} is not a transaction marker")
    return int(record.type), record.coordinator_epoch
