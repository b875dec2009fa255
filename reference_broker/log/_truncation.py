"""Cutting a partition log back: a follower removing what its leader never had (KIP-101/279).

Every step leaves a prefix of the old log on disk, so a crash between steps is recovered like
any crash (the loader re-validates from the recovery point, which is moved below the cut first):

1. the recovery point drops to the cut (the checkpoint says the segment being cut must be
   validated again after a crash);
2. leader epoch entries from the cut on are dropped; producer snapshots after it are deleted;
3. whole segments at or after the cut are renamed ``.deleted``, last first (their files go after
   ``file.delete.delay.ms``);
4. the segment holding the cut is truncated at the first batch ending at or after it (a batch is
   never split: the log end may land before the requested offset), its offset and time indexes
   rebuilt and its transaction index cut;
5. producer state is rebuilt from the newest snapshot at or below the new log end plus a replay
   of the batches after it, so sequence checks and the last stable offset match the new log.

:func:`truncate_fully` empties the log and restarts it at an offset (the follower is behind the
leader's log start, or must restart from scratch).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from reference_broker.log._files import os_error_text, remove_quietly
from reference_broker.log.segment import LogSegment, SegmentCorrupt

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog

log = logging.getLogger("reference_broker.log")


def truncate_to(plog: PartitionLog, offset: int) -> bool:
    """Remove every batch that ends at or after ``offset``; False if there was none."""
    if offset < 0:
        raise ValueError(f"cannot truncate {plog.name} to a negative offset {offset}")
    if offset >= plog.log_end_offset:
        # An epoch this replica recorded as leader without writing anything in it starts at the
        # log end: the new leader's log may not have it, so it goes (Kafka does the same).
        try:
            plog.leader_epoch_cache.truncate_from_end(plog.log_end_offset)
        except OSError as exc:
            raise plog._go_offline(f"truncation failed: {os_error_text(exc)}") from exc
        return False
    if offset < plog.log_start_offset:
        truncate_fully(plog, offset, None)
        return True
    old_end = plog.log_end_offset
    try:
        if plog.recovery_point > offset:
            plog.recovery_point = offset
            plog._write_checkpoint()
        plog.leader_epoch_cache.truncate_from_end(offset)
        state = plog.producer_state
        for snapshot in state.snapshot_offsets():
            if snapshot > offset:
                remove_quietly(state.snapshot_path(snapshot))
        segments = plog.segments
        doomed = []
        while len(segments) > 1 and segments[-1].base_offset >= offset:
            doomed.append(segments.pop())
            plog._bases.pop()
        plog.delete_segment_files(doomed)
        _cut_segment(plog, segments[-1], offset)
        plog.leader_epoch_cache.truncate_from_end(plog.log_end_offset)  # the cut may land lower
        plog._segments_with_aborts = [s for s in segments if s.txn_index.entries]
        _rebuild_producer_state(plog)
    except OSError as exc:
        raise plog._go_offline(f"truncation failed: {os_error_text(exc)}") from exc
    if plog._high_watermark is not None and plog._high_watermark > plog.log_end_offset:
        plog._high_watermark = plog.log_end_offset
    log.info("%s: truncated from log end %d to %d", plog.name, old_end, plog.log_end_offset)
    return True


def _cut_segment(plog: PartitionLog, segment: LogSegment, offset: int) -> None:
    try:
        found = segment.find_batch(offset)
    except SegmentCorrupt as exc:  # the damaged range is dropped with everything after it
        found = None
        position = exc.corruption.position
    else:
        position = segment.size if found is None else found[0]
    if found is None and position == segment.size:
        return
    segment.truncate_to(position)
    segment.rebuild_indexes()
    new_end = segment.next_offset
    kept = [t for t in segment.txn_index.entries if t.last_offset < new_end]
    if len(kept) != len(segment.txn_index.entries):
        segment.txn_index.reset(kept)
    if segment.max_timestamp < 0:
        segment.offset_of_max_timestamp = -1


def _rebuild_producer_state(plog: PartitionLog) -> None:
    from reference_broker.log._loader import replay_producer_state

    state = plog.producer_state
    log_end = plog.log_end_offset
    state.load_snapshot(log_end)
    replay_producer_state(plog.segments, state, set())
    state.map_end_offset = log_end


def truncate_fully(plog: PartitionLog, offset: int, now_ms: int | None) -> None:
    """Delete every segment and restart the log empty at ``offset`` (Kafka's
    ``truncateFullyAndStartAt``): log start, log end, recovery point and high watermark all become
    ``offset``; leader epochs and producer state are forgotten."""
    from reference_broker.log.partition_log import _now_ms

    if offset < 0:
        raise ValueError(f"cannot restart {plog.name} at a negative offset {offset}")
    now = _now_ms() if now_ms is None else now_ms
    try:
        plog.leader_epoch_cache.clear()
        state = plog.producer_state
        for snapshot in state.snapshot_offsets():
            remove_quietly(state.snapshot_path(snapshot))
        doomed = list(plog.segments)
        plog.segments.clear()
        plog._bases.clear()
        plog.delete_segment_files(doomed)
        segment = LogSegment.create(plog.directory, offset, plog.config, now)
        plog.segments.append(segment)
        plog._bases.append(offset)
        plog._segments_with_aborts = []
        plog._log_start_offset = offset
        plog.recovery_point = offset
        plog._write_checkpoint()
        state.producers.clear()
        state.ongoing_txns.clear()
        state.map_end_offset = offset
    except OSError as exc:
        raise plog._go_offline(f"truncation failed: {os_error_text(exc)}") from exc
    if plog._high_watermark is not None:
        plog._high_watermark = offset
    log.info("%s: emptied and restarted at offset %d", plog.name, offset)
