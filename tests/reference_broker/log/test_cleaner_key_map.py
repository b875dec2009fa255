"""A dirty range with more distinct keys than the cleaner's key map holds: each pass cleans as far
as its map reaches, stopping at the record that did not fit wherever it lies (Kafka's
buildOffsetMapForSegment), and the passes together compact the log as one unbounded pass would."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.cleaner import clean_log, cleanable, read_checkpoint, write_checkpoint
from reference_broker.log.offset_map import ENTRY_BYTES
from sdk.records import RecordBatchBuilder, iter_batches

pytestmark = pytest.mark.unit

Row = tuple[int, bytes | None, bytes | None]
#: a map of 11 slots, full at 9 keys
SMALL_MAP = 11 * ENTRY_BYTES
COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=600, index_interval_bytes=100,
                    cleaner_dedupe_buffer_bytes_per_thread=SMALL_MAP)


def _open(directory: Path, config: LogConfig) -> PartitionLog:
    return PartitionLog.open(directory, config, now_ms=1_000)


def _fill(plog: PartitionLog, keys: list[bytes]) -> None:
    for i, key in enumerate(keys):
        builder = RecordBatchBuilder()
        builder.append(1_000, key, b"v%d" % i)
        plog.append(builder.build(), now_ms=1_000)


def _rows(plog: PartitionLog) -> list[Row]:
    rows: list[Row] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20)
        batches = list(iter_batches(bytes(result.data)))
        if not batches:
            break
        rows.extend((r.offset, r.key, r.value) for b in batches for r in b)
        offset = result.next_offset
    return rows


def _pass(plog: PartitionLog) -> int:
    to_clean = cleanable(plog, read_checkpoint(plog.directory), 2_000)
    end = clean_log(plog, to_clean, 2_000)
    write_checkpoint(plog.directory, end)
    return end


#: 30 distinct keys, each written twice in a row, then 30 more records of the same keys
KEYS = [b"key-%02d" % (i // 2) for i in range(60)] + [b"key-%02d" % i for i in range(0, 30)]


def test_a_full_map_stops_the_pass_at_the_record_that_did_not_fit(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0", COMPACT)
    try:
        _check_first_pass(plog)
    finally:
        plog.close()


def _check_first_pass(plog: PartitionLog) -> None:
    _fill(plog, KEYS)
    before = _rows(plog)
    end = _pass(plog)
    # Nine keys fill the map (key-00 to key-08, offsets 0-16): at offset 17 nothing more may be
    # put, not even a key already mapped (Kafka checks the size first), so the pass cleans [0, 17).
    assert end == 17
    assert read_checkpoint(plog.directory) == 17
    assert end not in {s.base_offset for s in plog.segments}  # in the middle of a segment
    rows = _rows(plog)
    latest = [r for r in before if r[0] < 17 and (r[0] % 2 == 1 or r[0] == 16)]
    assert [r for r in rows if r[0] < 17] == latest
    assert [r for r in rows if r[0] >= 17] == [r for r in before if r[0] >= 17]


def test_passes_over_a_full_map_end_as_one_pass_with_room_for_every_key(tmp_path: Path) -> None:
    bounded = _open(tmp_path / "bounded-0", COMPACT)
    roomy = dataclasses.replace(COMPACT, cleaner_dedupe_buffer_bytes_per_thread=1 << 20)
    unbounded = _open(tmp_path / "unbounded-0", roomy)
    try:
        _check_passes(bounded, unbounded)
    finally:
        bounded.close()
        unbounded.close()


def _check_passes(bounded: PartitionLog, unbounded: PartitionLog) -> None:
    for plog in (bounded, unbounded):
        _fill(plog, KEYS)
    target = bounded.active_segment.base_offset
    assert _pass(unbounded) == target
    ends: list[int] = []
    while not ends or ends[-1] < target:
        ends.append(_pass(bounded))
        assert len(ends) < 20
    assert len(ends) > 2 and ends == sorted(set(ends))
    assert _rows(bounded) == _rows(unbounded)
    survivors = [r for r in _rows(bounded) if r[0] < target]
    assert len({key for _, key, _ in survivors}) == len(survivors)  # one record a key
