"""Segments: sparse index and time index lookups against linear scans, rolling, index rebuilds."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.segment import LogSegment, scan_batches
from sdk.records import iter_batches

SMALL = LogConfig(segment_bytes=3_000, index_interval_bytes=150, retention_ms=-1)


def fill(plog: PartitionLog, make_batch: Callable[..., bytes], n: int, seed: int = 1,
         shuffle_ts: bool = False) -> list[tuple[int, int]]:
    """Append ``n`` batches of 1-5 records; returns (base_offset, last_offset) of each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = 10_000 + (rng.randrange(0, 5_000) if shuffle_ts else i * 10)
        result = plog.append(make_batch(rng.randint(1, 5), ts=ts, value_size=rng.randint(5, 80), tag=i),
                             now_ms=50_000)
        out.append((result.base_offset, result.last_offset))
    return out


def linear_positions(segment: LogSegment) -> list[tuple[int, int, int]]:
    """(position, base_offset, last_offset) of every batch, by walking the file."""
    return [(pos, b.base_offset, b.last_offset) for pos, b in scan_batches(segment.fd, 0, segment.size)]


def test_index_lookup_equals_linear_scan(open_log, make_batch) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 300)
    assert len(plog.segments) > 5
    for segment in plog.segments:
        batches = linear_positions(segment)
        assert len(segment.offset_index) > 0 or segment is plog.active_segment
        for offset in range(segment.base_offset, segment.next_offset):
            expected = next(pos for pos, _, last in batches if last >= offset)
            found = segment.find_batch(offset)
            assert found is not None and found[0] == expected, offset
        assert segment.find_batch(segment.next_offset) is None


def test_index_entries_follow_kafkas_rule(open_log, make_batch) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 100)
    for segment in plog.segments:
        batches = {pos: last for pos, _, last in linear_positions(segment)}
        index = segment.offset_index
        for rel, pos in zip(index.relative_offsets, index.positions, strict=True):
            assert batches[pos] == segment.base_offset + rel  # entry = last offset of the batch at pos
        assert list(index.positions) == sorted(set(index.positions))


def test_time_index_is_monotonic_and_timestamp_lookup_equals_scan(open_log, make_batch) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 200, shuffle_ts=True)
    records = []
    for segment in plog.segments:
        ts = list(segment.time_index.timestamps)
        assert ts == sorted(set(ts))
        data = segment.read_batches(0, segment.base_offset, 10**9, None, True)[0]
        for batch in iter_batches(bytes(data)):
            records.extend((r.offset, r.timestamp) for r in batch)
    for target in range(9_990, 15_010, 37):
        expected = next(((o, t) for o, t in records if t >= target), None)
        assert plog.offset_for_timestamp(target) == expected, target
    best = max(t for _, t in records)
    assert plog.max_timestamp_offset() == next((o, t) for o, t in records if t == best)


def test_segments_roll_by_size_and_never_exceed_it(open_log, make_batch) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 200)
    for segment in plog.segments:
        assert segment.size <= SMALL.segment_bytes
    bases = [s.base_offset for s in plog.segments]
    assert bases == sorted(bases)
    for prev, nxt in zip(plog.segments, plog.segments[1:], strict=False):
        assert prev.next_offset == nxt.base_offset


def test_roll_by_age_uses_batch_timestamps(open_log, make_batch) -> None:
    plog = open_log(LogConfig(segment_ms=1_000, retention_ms=-1))
    plog.append(make_batch(ts=10_000), now_ms=0)
    plog.append(make_batch(ts=10_900), now_ms=0)
    assert len(plog.segments) == 1
    plog.append(make_batch(ts=11_001), now_ms=0)  # 1001 ms after the first batch
    assert len(plog.segments) == 2
    assert plog.active_segment.base_offset == 2


def test_roll_by_age_uses_wall_clock_without_timestamps(open_log, make_batch) -> None:
    plog = open_log(LogConfig(segment_ms=1_000, retention_ms=-1), now_ms=0)
    plog.append(make_batch(ts=-1), now_ms=100)
    plog.append(make_batch(ts=-1), now_ms=999)
    assert len(plog.segments) == 1
    plog.append(make_batch(ts=-1), now_ms=1_001)
    assert len(plog.segments) == 2


def test_full_index_rolls_the_segment(open_log, make_batch) -> None:
    plog = open_log(LogConfig(segment_index_bytes=16, index_interval_bytes=0, retention_ms=-1))
    for i in range(10):
        plog.append(make_batch(tag=i), now_ms=0)
    assert len(plog.segments) > 2
    assert all(len(s.offset_index) <= 2 for s in plog.segments)


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "wrong_entry"])
@pytest.mark.parametrize("clean", [True, False])
def test_missing_or_bad_indexes_are_rebuilt(open_log, make_batch, read_all, log_dir: Path,
                                            caplog, damage: str, clean: bool) -> None:
    plog = open_log(SMALL)
    fill(plog, make_batch, 150)
    before = [bytes(b.raw) for b in read_all(plog, 500)]
    plog.close()
    index_files = sorted(log_dir.glob("*.index")) + sorted(log_dir.glob("*.timeindex"))
    expected = {p: p.read_bytes() for p in index_files}
    if not clean:
        (log_dir / ".clean_shutdown").unlink()
    for path in index_files:
        if damage == "delete":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(b"\xff" * 13)
        elif damage == "truncate":
            path.write_bytes(path.read_bytes()[:-3])
        elif path.suffix == ".index" and path.stat().st_size >= 16:
            raw = bytearray(path.read_bytes())
            raw[-8:-4] = (int.from_bytes(raw[-8:-4], "big") + 1).to_bytes(4, "big")
            path.write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING, "reference_broker.log")
    plog = open_log(SMALL)
    after = [bytes(b.raw) for b in read_all(plog, 500)]
    assert after == before
    for segment in plog.segments:  # lookups still equal a linear scan
        batches = linear_positions(segment)
        for offset in range(segment.base_offset, segment.next_offset, 3):
            pos = next(p for p, _, last in batches if last >= offset)
            assert segment.find_batch(offset)[0] == pos
    plog.close()
    for path, content in expected.items():
        assert path.read_bytes() == content, f"{path.name} was not rebuilt identically"
