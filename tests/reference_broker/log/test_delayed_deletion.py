"""Segments taken out of a log keep their files, renamed ``.deleted``, for ``file.delete.delay.ms``
(Kafka's LocalLog.deleteSegmentFiles): on real files, with the deletion clock in the test's hands."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path

import pytest

from reference_broker.log import LogConfig
from reference_broker.log._deletion import DelayedDeletions
from reference_broker.log.segment import segment_stem

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=100, retention_ms=-1,
                  file_delete_delay_ms=60_000)
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _deleted_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.endswith(".deleted")}


def _filled(open_log, make_batch, config: LogConfig = SMALL):  # type: ignore[no-untyped-def]
    plog = open_log(config)
    for i in range(60):
        plog.append(make_batch(2, tag=i), now_ms=0)
    assert len(plog.segments) > 3
    return plog


def test_removed_segments_wait_as_deleted_files_until_the_delay_passes(open_log, make_batch, log_dir):
    plog = _filled(open_log, make_batch)
    clock = FakeClock()
    plog.deletions = DelayedDeletions(clock)
    gone = [s.base_offset for s in plog.segments[:2]]
    expected = bytes(plog.read(0, 100_000).data)
    slices = plog.read_slices(0, 100_000)  # a reader holding the files being removed
    snapshots = {segment_stem(base) + ".snapshot" for base in gone
                 if (log_dir / (segment_stem(base) + ".snapshot")).exists()}  # rolls snapshot
    plog.delete_records_before(plog.segments[2].base_offset)
    waiting = {segment_stem(base) + suffix + ".deleted" for base in gone for suffix in SUFFIXES}
    waiting |= {name + ".deleted" for name in snapshots}
    assert _deleted_files(log_dir) == waiting
    assert not any((log_dir / (segment_stem(base) + ".log")).exists() for base in gone)
    got = b"".join(os.pread(s.fd, s.length, s.position) for s in slices.slices)
    slices.close()
    assert got == expected
    clock.now += 59.9
    assert plog.deletions.run_due() == 0 and _deleted_files(log_dir) == waiting
    clock.now += 0.2
    assert plog.deletions.run_due() == 1
    assert _deleted_files(log_dir) == set()
    assert plog.read(plog.log_start_offset, 100).data  # the rest of the log is untouched


def test_a_zero_delay_removes_the_files_at_once(open_log, make_batch, log_dir):
    plog = _filled(open_log, make_batch, dataclasses.replace(SMALL, file_delete_delay_ms=0))
    first = plog.segments[0].base_offset
    plog.delete_records_before(plog.segments[1].base_offset)
    assert _deleted_files(log_dir) == set()
    assert not any((log_dir / (segment_stem(first) + suffix)).exists() for suffix in SUFFIXES)


def test_deleted_files_left_by_a_stop_are_removed_when_the_log_opens(open_log, make_batch, log_dir):
    plog = _filled(open_log, make_batch)
    plog.delete_records_before(plog.segments[2].base_offset)
    start, end = plog.log_start_offset, plog.log_end_offset
    assert _deleted_files(log_dir)
    plog.close()  # the removal never ran, as after kill -9
    reopened = open_log(SMALL)
    assert _deleted_files(log_dir) == set()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)


def test_truncated_segments_wait_out_the_delay_too(open_log, make_batch, log_dir):
    plog = _filled(open_log, make_batch)
    last = plog.segments[-1].base_offset
    plog.truncate_to(plog.segments[-2].base_offset)
    assert segment_stem(last) + ".log.deleted" in _deleted_files(log_dir)
    plog.deletions.run_all()
    assert _deleted_files(log_dir) == set()


def test_retention_deletion_is_timed_by_the_event_loop(open_log, make_batch, log_dir):
    plog = _filled(open_log, make_batch, dataclasses.replace(SMALL, file_delete_delay_ms=100))

    async def scenario() -> None:
        plog.delete_records_before(plog.segments[1].base_offset)
        assert _deleted_files(log_dir)  # the timer cannot have run: nothing awaited yet
        deadline = time.monotonic() + 30
        while _deleted_files(log_dir) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert _deleted_files(log_dir) == set()


def test_file_delete_delay_is_a_topic_config_with_the_broker_default():
    assert LogConfig().file_delete_delay_ms == 60_000
    broker = LogConfig.from_broker_properties({"log.segment.delete.delay.ms": "5"})
    assert broker.file_delete_delay_ms == 5
    assert LogConfig.from_properties({"file.delete.delay.ms": "7"}, broker).file_delete_delay_ms == 7
    assert broker.to_properties()["file.delete.delay.ms"] == "5"
    with pytest.raises(ValueError, match=r"file\.delete\.delay\.ms"):
        LogConfig.from_properties({"file.delete.delay.ms": "-1"})


def test_a_replaced_segment_keeps_the_producer_snapshot_at_its_base(open_log, make_batch, log_dir):
    """A cleaner swap's new segment starts where the first old one did: that snapshot stays."""
    plog = _filled(open_log, make_batch)
    old = plog.segments[1:3]
    snapshots = [log_dir / (segment_stem(s.base_offset) + ".snapshot") for s in old]
    for path in snapshots:
        path.write_bytes(b"")  # stand-ins: only their names matter here
    plog.delete_segment_files(old, replaced_at=old[0].base_offset)
    assert snapshots[0].exists() and not snapshots[1].exists()
    assert (log_dir / (snapshots[1].name + ".deleted")).exists()
    assert (log_dir / (segment_stem(old[0].base_offset) + ".log.deleted")).exists()
