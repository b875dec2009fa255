"""Index write-behind: new offset/time index entries reach the files in batches.

What must hold: the files are always a prefix of the in-memory entries; every path that lets the
files be trusted later (flush, roll, close) writes the rest first; a crash that loses the unwritten
tail still leaves correct lookups and a correct recovery; a rebuild never lets stale pending
entries reach the new file.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.index import WRITE_BEHIND_ENTRIES, OffsetIndex, TimeIndex
from reference_broker.log.segment import LogSegment, scan_batches
from sdk.records import iter_batches

# An index entry for every batch after the first, and room for a few hundred batches per segment.
EVERY_BATCH = LogConfig(index_interval_bytes=0, segment_bytes=200_000, retention_ms=-1)
SMALL = LogConfig(index_interval_bytes=0, segment_bytes=2_000, retention_ms=-1)


def fill(plog: PartitionLog, make_batch, n: int, *, first_tag: int = 0) -> None:
    for i in range(first_tag, first_tag + n):
        plog.append(make_batch(1 + i % 3, ts=10_000 + 7 * i, tag=i), now_ms=0)


def on_disk(index: OffsetIndex | TimeIndex) -> list[tuple[int, int]]:
    fmt = ">ii" if isinstance(index, OffsetIndex) else ">qi"
    return list(struct.iter_unpack(fmt, index.path.read_bytes()))


def in_memory(index: OffsetIndex | TimeIndex) -> list[tuple[int, int]]:
    if isinstance(index, OffsetIndex):
        return list(zip(index.relative_offsets, index.positions, strict=True))
    return list(zip(index.timestamps, index.relative_offsets, strict=True))


def assert_prefix(segment: LogSegment) -> None:
    for index in (segment.offset_index, segment.time_index):
        disk, memory = on_disk(index), in_memory(index)
        assert disk == memory[: len(disk)]
        assert len(memory) - len(disk) == index.pending


def assert_complete(segment: LogSegment) -> None:
    for index in (segment.offset_index, segment.time_index):
        assert on_disk(index) == in_memory(index)
        assert index.pending == 0


def crash_losing_pending(plog: PartitionLog) -> None:
    """A killed process: no flush, no clean marker, and the unwritten index entries are gone."""
    for segment in plog.segments:
        segment.offset_index.discard_pending()
        segment.time_index.discard_pending()
    plog._close_files()


def assert_lookups_match_scan(plog: PartitionLog) -> None:
    for segment in plog.segments:
        batches = [(pos, b.last_offset) for pos, b in scan_batches(segment.fd, 0, segment.size)]
        for offset in range(segment.base_offset, segment.next_offset):
            expected = next(pos for pos, last in batches if last >= offset)
            found = segment.find_batch(offset)
            assert found is not None and found[0] == expected, offset


def test_entries_wait_in_memory_and_are_written_in_batches(open_log, make_batch) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 10)
    segment = plog.active_segment
    assert len(segment.offset_index) == 9
    assert on_disk(segment.offset_index) == []  # nothing written per append
    fill(plog, make_batch, 2 * WRITE_BEHIND_ENTRIES, first_tag=10)
    assert len(on_disk(segment.offset_index)) >= WRITE_BEHIND_ENTRIES
    assert_prefix(segment)
    # Both files were written at the same moment: they end at the same batch (timestamps grow
    # with every batch here, so each time entry names the batch of its offset entry).
    assert on_disk(segment.time_index)[-1][1] == on_disk(segment.offset_index)[-1][0]


def test_flush_writes_pending_entries(open_log, make_batch) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 20)
    assert plog.active_segment.offset_index.pending
    plog.flush()
    assert_complete(plog.active_segment)


def test_roll_completes_the_old_segments_indexes(open_log, make_batch) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 60)
    assert len(plog.segments) > 3
    for segment in plog.segments[:-1]:
        assert_complete(segment)
        # The last time index entry is the segment maximum, readable without loading the file.
        last = TimeIndex.read_last_entry(segment.time_index.path)
        assert last == (segment.max_timestamp, segment.offset_of_max_timestamp - segment.base_offset)
    assert_prefix(plog.active_segment)


def test_close_writes_everything_and_reopening_trusts_it(open_log, make_batch, log_dir) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 30)
    segment = plog.active_segment
    entries = in_memory(segment.offset_index), in_memory(segment.time_index)
    assert segment.offset_index.pending
    plog.close()
    assert (log_dir / ".clean_shutdown").exists()
    assert on_disk(segment.offset_index) == entries[0]
    # close adds the final max-timestamp entry (here already present: timestamps only grow)
    assert on_disk(segment.time_index)[: len(entries[1])] == entries[1]
    plog = open_log(EVERY_BATCH)
    reopened = plog.active_segment
    reopened.ensure_indexes()
    assert in_memory(reopened.offset_index) == entries[0]
    assert_lookups_match_scan(plog)


@pytest.mark.parametrize("lost", ["both_tails", "offset_tail_only"])
def test_a_trusted_index_missing_its_unwritten_tail_still_gives_correct_lookups(
    open_log, make_batch, lost: str
) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 40)
    records = _records(plog)
    segment = plog.active_segment
    assert segment.offset_index.pending and segment.time_index.pending
    if lost == "offset_tail_only":  # killed between the two writes (time index goes first)
        segment.time_index.write_pending()
    crash_losing_pending(plog)
    plog = open_log(EVERY_BATCH, recover=False)  # trust the short files as they are
    segment = plog.active_segment
    segment.ensure_indexes()
    assert len(segment.offset_index) < 39
    assert _records(plog) == records
    assert_lookups_match_scan(plog)
    for target in range(9_990, 10_300, 11):
        expected = next(((o, t) for o, t in records if t >= target), None)
        assert plog.offset_for_timestamp(target) == expected, target
    best = max(t for _, t in records)
    assert plog.max_timestamp_offset() == next((o, t) for o, t in records if t == best)


def _records(plog: PartitionLog) -> list[tuple[int, int]]:
    data = bytes(plog.read(plog.log_start_offset, 10**9).data)
    return [(r.offset, r.timestamp) for b in iter_batches(data) for r in b]


def test_recovery_after_losing_pending_entries_rebuilds_complete_indexes(
    open_log, make_batch
) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 80)
    plog.maybe_flush(0)  # rolled segments fsynced: the recovery point is the active segment
    fill(plog, make_batch, 15, first_tag=80)
    before = _records(plog)
    expected_active = in_memory(plog.active_segment.offset_index)
    crash_losing_pending(plog)
    plog = open_log(SMALL)
    assert _records(plog) == before
    assert in_memory(plog.active_segment.offset_index) == expected_active
    for segment in plog.segments:
        segment.ensure_indexes()
        assert_complete(segment)
    assert_lookups_match_scan(plog)


def test_a_rebuild_drops_pending_entries(open_log, make_batch) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 20)
    segment = plog.active_segment
    expected = in_memory(segment.offset_index)
    assert segment.offset_index.pending
    segment.offset_index.reset(expected[:5])  # e.g. a rebuild that ends earlier
    assert segment.offset_index.pending == 0
    assert on_disk(segment.offset_index) == expected[:5]
    segment.offset_index.flush()
    assert on_disk(segment.offset_index) == expected[:5]
    segment.rebuild_indexes()
    assert_complete(segment)
    assert in_memory(segment.offset_index) == expected


def test_truncating_a_torn_tail_leaves_no_stale_entries(open_log, make_batch) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 30)
    segment = plog.active_segment
    cut = segment.offset_index.positions[-3] + 5  # inside the third-last indexed batch
    log_path = segment.log_path
    crash_losing_pending(plog)
    with log_path.open("r+b") as f:
        f.truncate(cut)
    plog = open_log(EVERY_BATCH)
    segment = plog.active_segment
    assert segment.size < cut
    assert_complete(segment)
    assert all(pos < segment.size for pos in segment.offset_index.positions)
    assert_lookups_match_scan(plog)
    fill(plog, make_batch, 70, first_tag=100)  # appending after the truncation keeps them right
    plog.flush()
    assert_complete(plog.active_segment)
    assert_lookups_match_scan(plog)


def test_deleting_a_segment_with_pending_entries_leaves_no_file(open_log, make_batch) -> None:
    plog = open_log(EVERY_BATCH)
    fill(plog, make_batch, 20)
    segment = plog.active_segment
    assert segment.offset_index.pending
    segment.delete()
    plog._close_files()  # closing again must not write (and so recreate) anything
    for path in (segment.log_path, segment.offset_index.path, segment.time_index.path):
        assert not path.exists()


def test_kill_minus_nine_with_unwritten_index_entries(log_dir: Path, killed_writer) -> None:
    # Held at 3 groups + 10 appends: 10 index entries are pending at the kill. (Left running, the
    # writer was sometimes killed just after a group was written, with too few entries pending.)
    acked = killed_writer(
        {"index_interval_bytes": 0, "retention_ms": -1}, WRITE_BEHIND_ENTRIES * 3 + 10, hold=True
    )
    written = len((log_dir / "00000000000000000000.index").read_bytes()) // 8
    assert written < len(acked) - 1  # some entries were still pending when killed
    plog = PartitionLog.open(log_dir, LogConfig(index_interval_bytes=0, retention_ms=-1))
    try:
        assert plog.log_end_offset >= acked[-1][1] + 1
        assert_complete(plog.active_segment)
        assert len(plog.active_segment.offset_index) >= len(acked) - 1
        assert_lookups_match_scan(plog)
        for base, last in acked:
            assert plog.read(base, 1).first_offset == base
            assert plog.read(last, 1).first_offset == base
    finally:
        plog.close()
