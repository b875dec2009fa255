"""Opening a partition directory: find segments, recover what may be damaged, rebuild state.

Steps (Kafka's LogLoader, simplified for one node):

1. Remove leftovers of interrupted operations: ``*.tmp`` files, index files whose ``.log`` is
   gone (a segment deletion stops after unlinking the ``.log``), unfinished cleaner output
   (``.cleaned``); a cleaner swap that reached its commit point (``.swap``) is completed, and
   the swapped-in segment is validated like one after the recovery point (see ``cleaner``).
2. Trust closed segments below the recovery point (facts come from their index files); validate
   every segment at or after it unless the last shutdown was clean (``.clean_shutdown``). The last
   segment's tail is always checked; damage running to its end (a torn write) is truncated, other
   damage is recorded as a ``Corruption`` and never served.
3. Load every ``.txnindex``; those of validated segments (and any missing/damaged one) are rebuilt
   while producer state is replayed.
4. Producer state: newest usable snapshot at or below the first segment needing a rebuilt
   transaction index (or the log end), then replay of batch headers up to the log end (control
   batches have their single marker record decoded, nothing else is).
5. Leader epochs: ``leader-epoch-checkpoint`` is read and extended with the epochs of the
   validated segments' batches (an epoch newer than the last entry starts at its first batch); a
   missing or unreadable file is rebuilt from every segment's batch headers. Entries beyond the
   recovered log end are dropped, those before the log start collapse onto it.
6. fsync what was validated, write the checkpoint, remove the clean-shutdown marker.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from reference_broker.log._checkpoint import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, Checkpoint
from reference_broker.log._files import TMP_SUFFIX, fsync_dir, remove_quietly
from reference_broker.log.cleaner import complete_interrupted_swaps
from reference_broker.log.config import LogConfig
from reference_broker.log.index import AbortedTxn
from reference_broker.log.leader_epoch import CheckpointFormatError, LeaderEpochCache
from reference_broker.log.producer_state import AppendOrigin, ProducerAppendInfo, ProducerStateManager
from reference_broker.log.segment import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    Corruption,
    FramingError,
    LogSegment,
    scan_batches,
    segment_stem,
)
from sdk.records import CorruptRecordError, RecordBatch

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog

log = logging.getLogger("reference_broker.log")


def _segment_bases(directory: Path) -> list[int]:
    bases = []
    for path in directory.glob("*" + LOG_SUFFIX):
        stem = path.name[: -len(LOG_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _remove_leftovers(directory: Path, bases: list[int]) -> None:
    stems = {segment_stem(b) for b in bases}
    for path in directory.iterdir():
        name = path.name
        if name.endswith(TMP_SUFFIX) or name.endswith(".deleted"):
            remove_quietly(path)
            continue
        for suffix in INDEX_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] not in stems:
                log.info("removing orphan index file %s", path)
                remove_quietly(path)


def load_partition(
    cls: type[PartitionLog],
    directory: Path,
    config: LogConfig,
    *,
    recover: bool,
    now_ms: int,
    legacy_unknown_producer_id: bool,
) -> PartitionLog:
    """Open ``directory`` as a partition log (see module docstring)."""

    # A partition being created: its empty files need no fsync (a crash before the topic's
    # metadata is written forgets the topic; after it, a missing or empty file is recreated
    # empty), which makes creating many partitions several times faster.
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists() or not recover
    checkpoint = Checkpoint.read(directory)
    swapped_from = complete_interrupted_swaps(directory)
    if swapped_from is not None:  # a cleaned segment came in by recovery: validate it
        clean = False
        checkpoint = Checkpoint(checkpoint.log_start_offset,
                                min(checkpoint.recovery_point, swapped_from))
    bases = _segment_bases(directory)
    _remove_leftovers(directory, bases)
    if not bases:
        segments = [LogSegment.create(directory, checkpoint.log_start_offset, config, now_ms)]
    else:
        segments = [LogSegment.open_existing(directory, b, config, now_ms) for b in bases]
    for segment, following in itertools.pairwise(segments):
        segment.load_trusted_metadata(following.base_offset)

    recovered = _validate(segments, None if clean else checkpoint.recovery_point)
    log_end = segments[-1].next_offset
    log_start = max(checkpoint.log_start_offset, segments[0].base_offset)
    if log_start > log_end:
        log.warning("%s: log start offset %d is beyond the recovered log end %d; starting empty"
                    " at %d", directory.name, log_start, log_end, log_start)
        for segment in segments:
            segment.delete()
        segments = [LogSegment.create(directory, log_start, config, now_ms)]
        recovered = {log_start}
        log_end = log_start
    while len(segments) > 1 and segments[1].base_offset <= log_start:
        segments.pop(0).delete()  # a deletion interrupted by a crash

    rebuild = _load_txn_indexes(segments, recovered)
    producer_state = ProducerStateManager(
        directory, producer_id_expiration_ms=config.producer_id_expiration_ms,
        legacy_unknown_producer_id=legacy_unknown_producer_id,
    )
    for offset in producer_state.snapshot_offsets():
        if offset > log_end:
            remove_quietly(producer_state.snapshot_path(offset))
    replay_from = min(rebuild) if rebuild else log_end
    producer_state.load_snapshot(replay_from, now_ms)
    replay_producer_state(segments, producer_state, rebuild)
    producer_state.map_end_offset = log_end
    epochs = LeaderEpochCache(directory) if fresh else _load_leader_epochs(
        directory, segments, recovered, log_start, log_end)

    if recovered or clean:
        for segment in segments:
            if segment.base_offset in recovered and not fresh:
                segment.flush()
        recovery_point = log_end
    else:
        recovery_point = min(checkpoint.recovery_point, log_end)
    plog = cls(directory, config, segments, producer_state, log_start, recovery_point, now_ms,
               epochs)
    if checkpoint.high_watermark is not None:
        plog.checkpointed_high_watermark = min(max(checkpoint.high_watermark, log_start), log_end)
    if fresh:
        plog._checkpoint = Checkpoint(log_start, recovery_point)
        plog._checkpoint.write(directory, sync=False)
    else:
        plog._checkpoint = checkpoint if (directory / CHECKPOINT_FILE).exists() else None
        plog._write_checkpoint()
    if marker.exists():
        marker.unlink()
        fsync_dir(directory)
    return plog


def _validate(segments: list[LogSegment], recovery_point: int | None) -> set[int]:
    """Validate segments that may hold unflushed data; check the last one's tail. Returns the
    base offsets of fully validated segments."""
    recovered: set[int] = set()
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        is_last = i == last
        if recovery_point is None or (not is_last and segments[i + 1].base_offset <= recovery_point):
            continue
        tail = segment.recover(last_segment=is_last)
        recovered.add(segment.base_offset)
        if tail is not None:
            _truncate_tail(segment, tail)
        if not is_last:
            segment.next_offset = segments[i + 1].base_offset
    if segments[last].base_offset not in recovered:
        problem = _check_tail(segments[last])
        if problem is not None:
            log.warning("%s: tail check failed after a clean shutdown (%s); recovering the"
                        " segment", segments[last].log_path, problem)
            tail = segments[last].recover(last_segment=True)
            recovered.add(segments[last].base_offset)
            if tail is not None:
                _truncate_tail(segments[last], tail)
    return recovered


def _truncate_tail(segment: LogSegment, problem: Corruption) -> None:
    dropped = segment.size - problem.position
    log.warning("%s: truncating %d byte(s) from position %d (offset %d): %s",
                segment.log_path, dropped, problem.position, problem.first_offset, problem.reason)
    segment.truncate_to(problem.position)


def _check_tail(segment: LogSegment) -> str | None:
    """Walk (and CRC-check) the batches after the last index entry of a trusted last segment,
    establishing its log end offset and max timestamp. Returns a problem, if any."""
    segment.ensure_indexes()
    index = segment.offset_index
    if len(index):
        start, expected = index.positions[-1], None
        expected_last = segment.base_offset + index.relative_offsets[-1]
    else:
        start, expected, expected_last = 0, segment.base_offset, None
    if len(segment.time_index):
        segment.max_timestamp = segment.time_index.timestamps[-1]
        segment.offset_of_max_timestamp = segment.base_offset + segment.time_index.relative_offsets[-1]
    next_offset = segment.base_offset
    try:
        for pos, batch in scan_batches(segment.fd, start, segment.size, with_data=True):
            if pos == start and expected_last is not None and batch.last_offset != expected_last:
                return "last index entry does not match the log"
            if expected is not None and batch.base_offset != expected:
                return f"base offset {batch.base_offset} at position {pos}, expected {expected}"
            batch.validate()
            if batch.max_timestamp > segment.max_timestamp:
                segment.max_timestamp = batch.max_timestamp
                segment.offset_of_max_timestamp = batch.last_offset
            expected = next_offset = batch.next_offset
    except FramingError as exc:
        return str(exc)
    except CorruptRecordError as exc:
        return str(exc)
    segment.next_offset = next_offset if segment.size else segment.base_offset
    segment.bytes_since_last_index_entry = 0
    return None


def _load_txn_indexes(segments: list[LogSegment], recovered: set[int]) -> set[int]:
    """Load transaction indexes; return the bases of segments whose index must be rebuilt."""
    rebuild = set(recovered)
    for segment in segments:
        if segment.base_offset in rebuild:
            continue
        problem = segment.txn_index.load()
        if problem is not None and (problem != "missing" or segment.size):
            log.warning("rebuilding %s: %s", segment.txn_index.path, problem)
            rebuild.add(segment.base_offset)
    for segment in segments:
        if segment.base_offset in rebuild:
            segment.txn_index.reset([])
    return rebuild


def _load_leader_epochs(directory: Path, segments: list[LogSegment], recovered: set[int],
                        log_start: int, log_end: int) -> LeaderEpochCache:
    """The partition's leader epoch cache, checked against the recovered log (step 5)."""
    cache = LeaderEpochCache(directory)
    try:
        entries = LeaderEpochCache.read_file(cache.path)  # type: ignore[arg-type]  # has a directory
    except (CheckpointFormatError, OSError) as exc:
        log.warning("%s: rebuilding the leader epoch cache from the log: %s", directory.name, exc)
        entries = None
    if entries is None:
        scan = segments
    else:
        cache = LeaderEpochCache(directory, entries)
        scan = [s for s in segments if s.base_offset in recovered]
    changed = entries is None
    for segment in scan:
        if segment.size == 0:
            continue
        try:
            for _, batch in scan_batches(segment.fd, 0, segment.size):
                epoch = batch.partition_leader_epoch
                latest = cache.latest_epoch
                if epoch >= 0 and (latest is None or epoch > latest) and \
                        not segment.corruption_covering(batch.base_offset):
                    changed |= cache.assign_in_memory(epoch, batch.base_offset)
        except FramingError as exc:
            log.warning("%s: leader epoch scan stops at damaged data: %s", segment.log_path, exc)
    if changed:
        cache.write(sync=False)
    cache.truncate_from_end(log_end)
    cache.truncate_from_start(log_start)
    return cache


def replay_producer_state(segments: list[LogSegment], state: ProducerStateManager,
                          rebuild: set[int]) -> None:
    """Apply every batch from ``state.map_end_offset`` on to the producer state (headers only,
    plus the marker record of control batches), re-adding aborts to rebuilt transaction indexes."""
    start = max(state.map_end_offset, segments[0].base_offset)
    bases = [s.base_offset for s in segments]
    for segment in segments[max(0, bisect.bisect_right(bases, start) - 1):]:
        if segment.next_offset <= start or segment.size == 0:
            continue
        found = None
        try:
            found = segment.find_batch(start)
        except Exception as exc:  # corrupt data was recorded by the segment; skip it
            log.warning("%s: producer state replay skips damaged data: %s", segment.log_path, exc)
        position = found[0] if found else 0
        try:
            for pos, batch in scan_batches(segment.fd, position, segment.size):
                if batch.producer_id < 0 or segment.corruption_covering(batch.base_offset):
                    continue
                _replay_batch(segment, pos, batch, state, segment.base_offset in rebuild)
        except FramingError as exc:
            log.warning("%s: producer state replay stops at damaged data: %s",
                        segment.log_path, exc)


def _replay_batch(segment: LogSegment, pos: int, batch: RecordBatch, state: ProducerStateManager,
                  rebuild_txn_index: bool) -> None:
    info = ProducerAppendInfo(batch.producer_id, state.last_entry(batch.producer_id),
                              AppendOrigin.REPLICATION)
    completed = None
    if batch.is_control:
        try:
            marker = segment.read_whole_batch(pos).control_record()
        except (CorruptRecordError, ValueError) as exc:
            log.warning("%s: unreadable control batch at %d: %s", segment.log_path, pos, exc)
            return
        completed = info.append_end_txn_marker(
            int(marker.type), marker.coordinator_epoch, batch.producer_epoch, batch.base_offset,
            batch.max_timestamp)
    else:
        info.append_data_batch(
            batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
            batch.base_offset, batch.last_offset, batch.is_transactional)
    state.update(info)
    if completed is not None:
        lso = state.last_stable_offset_after(completed)
        if completed.is_aborted and rebuild_txn_index:
            segment.txn_index.append(AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset, lso))
        state.complete_txn(completed)
