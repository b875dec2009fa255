"""Log compaction on real files: what survives a cleaning pass, and crash safety of the swap."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.cleaner import (
    InThread,
    clean_log,
    cleanable,
    complete_interrupted_swaps,
    read_checkpoint,
    write_checkpoint,
)
from reference_broker.log.log_manager import LogManager
from sdk.protocol.errors import OutOfOrderSequenceNumberError
from sdk.records import ControlType, RecordBatch, RecordBatchBuilder, iter_batches

pytestmark = pytest.mark.unit

COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=600, index_interval_bytes=100,
                    delete_retention_ms=1_000)

Row = tuple[int, bytes | None, bytes | None]
_T = TypeVar("_T")


def _batch(records: list[tuple[bytes, bytes | None]], ts: int = 1_000, *, pid: int = -1,
           epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=txn)
    for key, value in records:
        builder.append(ts, key, value)
    return builder.build()


def _append(plog: PartitionLog, records: list[tuple[bytes, bytes | None]], **kwargs: object) -> int:
    return plog.append(_batch(records, **kwargs), now_ms=1_000).base_offset  # type: ignore[arg-type]


def _batches(plog: PartitionLog) -> list[RecordBatch]:
    out: list[RecordBatch] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20)
        got = list(iter_batches(bytes(result.data)))
        if not got:
            break
        out.extend(got)
        offset = result.next_offset
    return out


def _rows(plog: PartitionLog) -> list[Row]:
    """(offset, key, value) of every data record, read through the fetch path."""
    return [(r.offset, r.key, r.value) for b in _batches(plog) if not b.is_control for r in b]


def _compact(plog: PartitionLog, now_ms: int = 2_000) -> int:
    to_clean = cleanable(plog, read_checkpoint(plog.directory), now_ms)
    end = clean_log(plog, to_clean, now_ms)
    write_checkpoint(plog.directory, end)
    return end


def _latest(rows: list[Row], below: int) -> list[Row]:
    latest: dict[bytes | None, Row] = {}
    for row in rows:
        if row[0] < below:
            latest[row[1]] = row
    return sorted(latest.values())


def _fill(plog: PartitionLog, count: int, keys: int = 5) -> list[Row]:
    rows = []
    for i in range(count):
        key, value = b"k%d" % (i % keys), b"v%d" % i
        rows.append((_append(plog, [(key, value)]), key, value))
    return rows


def test_only_the_latest_record_per_key_survives_with_its_offset(open_log):
    plog = open_log(COMPACT)
    rows = _fill(plog, 60)
    assert len(plog.segments) > 3
    active_base = plog.active_segment.base_offset
    end = _compact(plog)
    assert end == active_base
    got = _rows(plog)
    # the map covers the cleaned range only: a key's newest record there survives even when the
    # active segment holds a newer one
    newest_cleaned = {r[1]: r[0] for r in rows if r[0] < active_base}
    assert [r for r in got if r[0] < active_base] == sorted(
        r for r in rows if r[0] < active_base and newest_cleaned[r[1]] == r[0])
    assert [r for r in got if r[0] >= active_base] == [r for r in rows if r[0] >= active_base]
    assert plog.log_start_offset == 0
    assert plog.log_end_offset == rows[-1][0] + 1


def test_fetch_at_a_removed_offset_returns_the_next_record(open_log):
    plog = open_log(COMPACT)
    rows = _fill(plog, 40)
    _compact(plog)
    surviving = [r[0] for r in _rows(plog)]
    removed = next(o for o in range(len(rows)) if o not in surviving)
    result = plog.read(removed, 1 << 20)
    first = next(iter(next(iter_batches(bytes(result.data)))))
    assert first.offset == min(o for o in surviving if o > removed)


def test_a_second_pass_also_removes_keys_superseded_in_the_new_dirty_range(open_log):
    plog = open_log(COMPACT)
    rows = _fill(plog, 40)
    _compact(plog)
    rows += _fill(plog, 40)
    plog.roll(3_000)
    _compact(plog)
    got = _rows(plog)
    assert got == _latest(rows, plog.log_end_offset)


def test_tombstones_stay_until_a_pass_after_delete_retention(open_log):
    plog = open_log(COMPACT)
    rows = _fill(plog, 30)
    gone = _append(plog, [(b"k1", None)])
    _fill(plog, 20, keys=1)  # other keys' records push the tombstone into a rolled segment
    plog.roll(3_000)
    _compact(plog, now_ms=10_000)
    keys = {r[1]: r for r in _rows(plog)}
    assert keys[b"k1"] == (gone, b"k1", None)  # the first pass keeps it, with a delete horizon
    _compact(plog, now_ms=10_500)  # horizon = 10_000 + 1_000: not yet
    assert b"k1" in {r[1] for r in _rows(plog)}
    _compact(plog, now_ms=11_000)
    assert b"k1" not in {r[1] for r in _rows(plog)}
    assert {r[1] for r in rows} - {b"k1"} <= {r[1] for r in _rows(plog)}


def test_aborted_records_go_and_markers_go_after_their_data_and_horizon(open_log):
    plog = open_log(COMPACT)
    _append(plog, [(b"a", b"aborted")], pid=7, epoch=0, seq=0, txn=True)
    plog.append_control(ControlType.ABORT, 7, 0, 0, now_ms=1_000)
    committed = _append(plog, [(b"c", b"committed")], pid=8, epoch=0, seq=0, txn=True)
    plog.append_control(ControlType.COMMIT, 8, 0, 0, now_ms=1_000)
    # producer 7 goes on, so the aborted batch no longer holds its last sequence
    _append(plog, [(b"c7", b"later")], pid=7, epoch=0, seq=1, txn=True)
    plog.append_control(ControlType.COMMIT, 7, 0, 0, now_ms=1_000)
    _fill(plog, 30)
    plog.roll(3_000)
    _compact(plog, now_ms=10_000)
    rows = _rows(plog)
    assert (committed, b"c", b"committed") in rows
    assert b"a" not in {r[1] for r in rows}

    def markers() -> list[ControlType]:
        return [b.control_record().type for b in _batches(plog) if b.is_control and b.record_count]

    assert markers() == [ControlType.ABORT, ControlType.COMMIT, ControlType.COMMIT]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(7, 0)]  # data seen this pass
    _compact(plog, now_ms=10_100)  # no data of the abort is left: the marker gets a horizon
    assert markers() == [ControlType.ABORT, ControlType.COMMIT, ControlType.COMMIT]
    _compact(plog, now_ms=20_000)  # past the horizon
    assert markers() == [ControlType.COMMIT, ControlType.COMMIT]  # their records are still there
    assert plog.aborted_transactions(0, plog.log_end_offset) == []


def test_an_aborted_batch_holding_a_producer_s_last_sequence_keeps_its_header(open_log):
    plog = open_log(COMPACT)
    _append(plog, [(b"a", b"aborted")], pid=7, epoch=0, seq=0, txn=True)
    plog.append_control(ControlType.ABORT, 7, 0, 0, now_ms=1_000)
    _fill(plog, 30)
    plog.roll(3_000)
    _compact(plog, now_ms=10_000)
    first = _batches(plog)[0]
    assert (first.base_offset, first.record_count, first.producer_id) == (0, 0, 7)
    assert b"a" not in {r[1] for r in _rows(plog)}


def test_the_last_batch_of_a_live_producer_keeps_its_header(open_log, log_dir):
    plog = open_log(COMPACT)
    _append(plog, [(b"p", b"old")], pid=3, epoch=1, seq=0)
    _fill(plog, 5)
    _append(plog, [(b"p", b"new")], ts=2_000)  # supersedes the producer's only record
    _fill(plog, 30)
    plog.roll(3_000)
    _compact(plog)
    headers = [b for b in _batches(plog) if b.producer_id == 3]
    assert [(b.record_count, b.base_sequence, b.producer_epoch) for b in headers] == [(0, 0, 1)]
    plog.close()
    for path in log_dir.glob("*.snapshot"):
        path.unlink()  # producer state must come from the log itself
    reopened = open_log(COMPACT)
    with pytest.raises(OutOfOrderSequenceNumberError):
        reopened.append(_batch([(b"p", b"x")], pid=3, epoch=1, seq=5), now_ms=4_000)
    reopened.append(_batch([(b"p", b"x")], pid=3, epoch=1, seq=1), now_ms=4_000)


def test_min_compaction_lag_keeps_recent_segments_dirty(open_log):
    config = LogConfig(**{**COMPACT.__dict__, "min_compaction_lag_ms": 5_000})
    plog = open_log(config)
    rows = _fill(plog, 40)
    plog.roll(3_000)
    assert cleanable(plog, None, now_ms=5_000).first_uncleanable == 0  # ts 1_000 is too recent
    to_clean = cleanable(plog, None, now_ms=7_000)
    assert to_clean.first_uncleanable == plog.active_segment.base_offset
    clean_log(plog, to_clean, 7_000)
    assert _rows(plog) == _latest(rows, plog.log_end_offset)


def test_dirty_ratio_and_max_compaction_lag_decide_when_a_log_is_cleaned(open_log):
    plog = open_log(LogConfig(**{**COMPACT.__dict__, "min_cleanable_dirty_ratio": 0.9}))
    _fill(plog, 40)
    plog.roll(3_000)
    end = _compact(plog)
    _fill(plog, 10)  # a little dirt after a clean range
    plog.roll(3_000)
    lazy = cleanable(plog, end, now_ms=3_000)
    assert 0 < lazy.cleanable_ratio < 0.9 and not lazy.should_clean
    forced = LogConfig(**{**plog.config.__dict__, "max_compaction_lag_ms": 1_000})
    plog.update_config(forced)
    assert cleanable(plog, end, now_ms=3_000).should_clean


def test_open_transactions_are_never_cleaned(open_log):
    plog = open_log(COMPACT)
    _fill(plog, 10)
    first_open = _append(plog, [(b"t", b"open")], pid=9, epoch=0, seq=0, txn=True)
    _fill(plog, 30)
    plog.roll(3_000)
    assert cleanable(plog, None, 2_000).first_uncleanable <= first_open


def test_a_cleaned_log_reopens_and_recovers_with_its_gaps(open_log, log_dir):
    plog = open_log(COMPACT)
    _fill(plog, 60)
    _compact(plog)
    before = _rows(plog)
    plog._close_files()  # no clean shutdown: every segment after the recovery point is validated
    (log_dir / "partition.checkpoint").unlink()
    reopened = open_log(COMPACT)
    assert reopened.corruptions == []
    assert _rows(reopened) == before


def test_log_manager_cleans_compacted_topics_and_keeps_their_checkpoint(tmp_path):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600))
    try:
        manager.create_topic("kept", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
        manager.create_topic("plain", 1, {}, now_ms=1_000)
        for name in ("kept", "plain"):
            plog = manager.get_log(name, 0)
            _fill(plog, 40)
        assert manager.run_cleaner(2_000) == "kept-0"
        assert manager.run_cleaner(2_000) is None  # nothing dirty left
        assert read_checkpoint(manager.get_log("kept", 0).directory) == (
            manager.get_log("kept", 0).active_segment.base_offset)
        assert len(_rows(manager.get_log("plain", 0))) == 40
    finally:
        manager.close()


# -- crash safety --------------------------------------------------------------------------------

_CLEANER = textwrap.dedent(
    """
    import sys
    from reference_broker.log import LogConfig, PartitionLog
    from reference_broker.log import cleaner
    from reference_broker.log.cleaner import clean_log, cleanable
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=600, index_interval_bytes=100)
    plog = PartitionLog.open(sys.argv[1], config, now_ms=1_000)
    stop = sys.argv[2]

    def pause(name, real):
        def wrapper(*args, **kwargs):
            if name == stop:
                print("paused", flush=True)
                sys.stdin.read()
            result = real(*args, **kwargs)
            if name + "-after" == stop:
                print("paused", flush=True)
                sys.stdin.read()
            return result
        return wrapper

    for name in ("pwrite_all", "atomic_write", "fsync_dir", "_finish_swap"):
        setattr(cleaner, name, pause(name, getattr(cleaner, name)))
    clean_log(plog, cleanable(plog, None, 2_000), 2_000)
    print("done", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.parametrize("stop", [
    "pwrite_all",          # writing the .cleaned file
    "atomic_write",        # .cleaned complete, not committed
    "fsync_dir",           # committed: .swap in place, old segments still there
    "_finish_swap",        # old segments deleted, .swap not renamed yet
    "_finish_swap-after",  # renamed, indexes not rebuilt
    "done",
])
def test_a_kill_during_cleaning_loses_no_latest_value(open_log, log_dir, stop):
    plog = open_log(COMPACT)
    rows = _fill(plog, 80, keys=7)
    plog.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLEANER, str(log_dir), stop], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line in ("paused", "done")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    reopened = open_log(COMPACT)
    got = _rows(reopened)
    assert reopened.corruptions == []
    assert set(got) <= set(rows)
    assert len({r[0] for r in got}) == len(got), "an offset is served twice"
    assert [r[0] for r in got] == sorted(r[0] for r in got)
    newest = {key: offset for offset, key, _ in rows}
    assert {r[1]: r[0] for r in got if newest[r[1]] == r[0]} == newest
    assert not list(log_dir.glob("*.cleaned")) and not list(log_dir.glob("*.swap"))
    _compact(reopened)
    assert _rows(reopened) == _latest(rows, reopened.active_segment.base_offset) + [
        r for r in rows if r[0] >= reopened.active_segment.base_offset]


def test_leftover_swap_without_its_range_file_replaces_what_it_covers(open_log, log_dir):
    plog = open_log(COMPACT)
    rows = _fill(plog, 40)
    plog.close()
    first = sorted(log_dir.glob("*.log"))[0]
    (log_dir / (first.name + ".swap")).write_bytes(first.read_bytes())
    assert complete_interrupted_swaps(log_dir) == 0
    reopened = open_log(COMPACT)
    assert _rows(reopened) == rows


def test_a_cleaned_log_switched_to_delete_still_serves_its_gaps(open_log, log_dir):
    plog = open_log(COMPACT)
    _fill(plog, 60)
    _compact(plog)
    before = _rows(plog)
    delete = LogConfig(**{**COMPACT.__dict__, "cleanup_policy": ("delete",)})
    plog.update_config(delete)
    plog._close_files()
    (log_dir / "partition.checkpoint").unlink()
    reopened = open_log(delete)
    assert reopened.corruptions == []
    assert _rows(reopened) == before


def test_groups_are_bounded_by_segment_and_index_sizes(open_log):
    small_index = LogConfig(**{**COMPACT.__dict__, "segment_index_bytes": 24})
    plog = open_log(small_index)
    rows = _fill(plog, 120, keys=6)
    _compact(plog)
    rows += _fill(plog, 60, keys=6)
    plog.roll(3_000)
    before = len(plog.segments)
    _compact(plog)
    assert len(plog.segments) < before  # small cleaned segments were merged
    assert all(len(s.offset_index) * 8 <= 24 for s in plog.segments)
    active = plog.active_segment.base_offset
    newest = {key: offset for offset, key, _ in rows if offset < active}
    assert _rows(plog) == [r for r in rows if r[0] < active and newest[r[1]] == r[0]]


def test_rewritten_segments_get_offset_and_time_indexes(open_log, log_dir):
    plog = open_log(COMPACT)
    rows = []
    for i in range(60):
        key, value = b"k%d" % (i % 5), b"v%d" % i
        rows.append((plog.append(_batch([(key, value)], ts=10_000 + i), now_ms=1_000).base_offset,
                     10_000 + i))
    _compact(plog)
    surviving = {r[0] for r in _rows(plog)}
    cleaned = [s for s in plog.segments[:-1] if s.size]
    assert cleaned and all(s.offset_index.path.exists() and s.time_index.path.exists()
                           for s in cleaned)
    for _, ts in rows:
        expected = min((o, t) for o, t in rows if t >= ts and o in surviving)
        assert plog.offset_for_timestamp(ts) == expected
    plog.close()
    reopened = open_log(COMPACT)
    assert reopened.offset_for_timestamp(10_000) == min((o, t) for o, t in rows if o in surviving)
    assert {r[0] for r in _rows(reopened)} == surviving


def test_compact_and_delete_both_apply(open_log):
    both = LogConfig(**{**COMPACT.__dict__, "cleanup_policy": ("compact", "delete"),
                        "retention_ms": 5_000})
    plog = open_log(both)
    old = [(plog.append(_batch([(b"k%d" % (i % 5), b"old%d" % i)], ts=1_000), now_ms=1_000)
            .base_offset) for i in range(30)]
    rows = [(plog.append(_batch([(b"k%d" % (i % 5), b"new%d" % i)], ts=8_000), now_ms=8_000)
             .base_offset, b"k%d" % (i % 5), b"new%d" % i) for i in range(30)]
    plog.roll(9_000)
    assert plog.apply_retention(9_000) > 0  # the segments holding only old records go
    start = plog.log_start_offset
    assert start > old[0]
    _compact(plog, now_ms=9_000)
    assert plog.log_start_offset == start
    assert _rows(plog) == _latest(rows, plog.log_end_offset)


def test_a_log_with_damaged_data_is_left_uncleaned_and_skipped(tmp_path, caplog):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600))
    try:
        manager.create_topic("damaged", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
        plog = manager.get_log("damaged", 0)
        _fill(plog, 40)
        before = _rows(plog)
        first = plog.segments[0]
        with open(first.log_path, "r+b") as f:  # flip a byte inside the first batch's records
            f.seek(first.size - 5)
            byte = f.read(1)
            f.seek(first.size - 5)
            f.write(bytes([byte[0] ^ 0xFF]))
        assert manager.run_cleaner(2_000) is None
        assert manager.run_cleaner(2_000) is None
        stops = [r for r in caplog.records if "cleaning damaged-0 stopped" in r.getMessage()]
        assert len(stops) == 1  # not tried again
        assert [r for r in before if r[0] >= first.next_offset] == [
            r for r in _rows_from(plog, first.next_offset)]
    finally:
        manager.close()


def _rows_from(plog: PartitionLog, offset: int) -> list[Row]:
    out: list[Row] = []
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20)
        batches = list(iter_batches(bytes(result.data)))
        out += [(r.offset, r.key, r.value) for b in batches for r in b]
        offset = result.next_offset
    return out


# -- passes off the event loop ---------------------------------------------------------------------


def _worker_that(before_call: dict[int, Callable[[], object]]) -> InThread:
    """An ``in_thread`` running each phase in a thread, first doing ``before_call[n]`` (on the
    event loop) before its n-th phase: what clients do while a pass runs."""
    calls = 0

    async def in_thread(fn: Callable[[], _T]) -> _T:
        nonlocal calls
        calls += 1
        action = before_call.get(calls)
        if action is not None:
            action()
        return await asyncio.to_thread(fn)

    return in_thread  # type: ignore[return-value]


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".swaprange")))


def test_a_pass_in_a_worker_cleans_as_one_in_this_thread(tmp_path):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600))
    try:
        manager.create_topic("kept", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
        plog = manager.get_log("kept", 0)
        rows = _fill(plog, 60, keys=7)
        assert asyncio.run(manager.run_cleaner_in(_worker_that({}), 2_000)) == "kept-0"
        active = plog.active_segment.base_offset
        assert read_checkpoint(plog.directory) == active
        assert _rows(plog) == _latest(rows, active) + [r for r in rows if r[0] >= active]
        assert _leftovers(plog.directory) == []
    finally:
        manager.close()


def test_a_pass_whose_segments_were_deleted_meanwhile_ends_without_a_swap(tmp_path, caplog):
    caplog.set_level(logging.INFO, "reference_broker.log")
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600))
    try:
        manager.create_topic("kept", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
        plog = manager.get_log("kept", 0)
        rows = _fill(plog, 60, keys=7)
        start = plog.segments[2].base_offset
        in_thread = _worker_that({2: lambda: plog.delete_records_before(start)})  # DeleteRecords
        assert asyncio.run(manager.run_cleaner_in(in_thread, 2_000)) is None
        assert "cleaning kept-0 aborted" in caplog.text
        assert plog.offline_reason is None and _leftovers(plog.directory) == []
        assert read_checkpoint(plog.directory) == 0  # not advanced: the next pass starts over
        assert _rows(plog) == [r for r in rows if r[0] >= start]
        assert asyncio.run(manager.run_cleaner_in(_worker_that({}), 2_000)) == "kept-0"
    finally:
        manager.close()


def test_deleting_a_log_during_a_pass_aborts_it_and_removes_everything(tmp_path, caplog):
    caplog.set_level(logging.INFO, "reference_broker.log")
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600, file_delete_delay_ms=0))
    try:
        manager.create_topic("gone", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
        plog = manager.get_log("gone", 0)
        _fill(plog, 60, keys=7)
        in_thread = _worker_that({2: lambda: manager.delete_topic("gone")})  # before the first write
        assert asyncio.run(manager.run_cleaner_in(in_thread, 2_000)) is None
        assert "cleaning gone-0 aborted" in caplog.text
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("gone")]
    finally:
        manager.close()


def test_closing_the_manager_during_a_pass_aborts_it_and_leaves_the_log_whole(tmp_path, caplog):
    caplog.set_level(logging.INFO, "reference_broker.log")
    manager = LogManager(tmp_path, LogConfig(segment_bytes=600))
    manager.create_topic("kept", 1, {"cleanup.policy": "compact"}, now_ms=1_000)
    plog = manager.get_log("kept", 0)
    rows = _fill(plog, 60, keys=7)
    directory = plog.directory
    assert asyncio.run(manager.run_cleaner_in(_worker_that({3: manager.close}), 2_000)) is None
    assert "cleaning kept-0 aborted" in caplog.text
    assert _leftovers(directory) == []
    reopened = LogManager(tmp_path, LogConfig(segment_bytes=600))
    try:
        got = _rows(reopened.get_log("kept", 0))
        assert set(_latest(rows, rows[-1][0] + 1)) <= set(got) <= set(rows)
    finally:
        reopened.close()


def test_segments_replaced_by_a_pass_wait_as_deleted_files_while_a_reader_holds_them(open_log, log_dir):
    """As Kafka's replaceSegments: the old files are renamed ``.deleted`` and removed after
    ``file.delete.delay.ms``; a fetch that took them before the swap still reads them whole."""
    plog = open_log(dataclasses.replace(COMPACT, file_delete_delay_ms=60_000))
    _fill(plog, 60)
    replaced = [s.base_offset for s in plog.segments[:-1]]
    before = bytes(plog.read(0, 100_000).data)
    held = plog.read_slices(0, 100_000)  # a reader holding the old segments' files
    try:
        _compact(plog)
        got = b"".join(os.pread(s.fd, s.length, s.position) for s in held.slices)
    finally:
        held.close()
    assert got == before
    waiting = {p.name for p in log_dir.iterdir() if p.name.endswith(".log.deleted")}
    assert waiting == {f"{base:020d}.log.deleted" for base in replaced}
    assert sorted(p.name for p in log_dir.glob("*.log")) == [
        f"{s.base_offset:020d}.log" for s in plog.segments
    ]
