"""Recovery at open: torn tails, corrupt closed segments, clean-shutdown marker, kill -9."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.segment import LogSegment
from sdk.protocol.errors import KafkaStorageError
from sdk.records import iter_batches

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=100, retention_ms=-1)


def crash(plog: PartitionLog) -> None:
    """Drop the log like a killed process would: no flush, no snapshot, no clean marker."""
    plog._close_files()


def fill(plog: PartitionLog, make_batch, n: int) -> list[bytes]:
    for i in range(n):
        plog.append(make_batch(1 + i % 3, tag=i), now_ms=0)
    return [bytes(b.raw) for b in iter_batches(bytes(plog.read(0, 10**9).data))]


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    return [(pos, b.base_offset, b.size_in_bytes) for pos, b in _walk(data)]


def _walk(data: bytes):
    pos = 0
    for batch in iter_batches(data):
        yield pos, batch
        pos += batch.size_in_bytes


@pytest.mark.parametrize(
    "tail",
    ["half_batch", "garbage", "zeros", "bad_crc_batch", "header_only"],
)
def test_torn_tail_of_the_active_segment_is_truncated(open_log, make_batch, log_dir, caplog, tail):
    plog = open_log(SMALL)
    before = fill(plog, make_batch, 40)
    end = plog.log_end_offset
    active = plog.active_segment.log_path
    size = active.stat().st_size
    crash(plog)
    extra = make_batch(3, tag=99)
    junk = {
        "half_batch": extra[: len(extra) // 2],
        "garbage": os.urandom(77),
        "zeros": bytes(4096),
        "bad_crc_batch": extra[:-1] + bytes([extra[-1] ^ 1]),
        "header_only": extra[:61],
    }[tail]
    with active.open("ab") as f:
        f.write(junk)
    caplog.set_level(logging.WARNING, "reference_broker.log")
    plog = open_log(SMALL)
    assert plog.log_end_offset == end
    assert active.stat().st_size == size
    assert "truncating" in caplog.text
    assert [bytes(b.raw) for b in iter_batches(bytes(plog.read(0, 10**9).data))] == before
    assert plog.append(make_batch(2), now_ms=0).base_offset == end


def test_a_lost_active_segment_tail_after_roll_is_fine(open_log, make_batch, log_dir):
    plog = open_log(SMALL)
    before = fill(plog, make_batch, 40)
    end = plog.log_end_offset
    plog.roll(0)
    crash(plog)
    plog = open_log(SMALL)
    assert plog.log_end_offset == end
    assert len(plog.read(0, 10**9).data) == sum(len(b) for b in before)


def _flip_byte_in_batch(path: Path, index: int, field_offset: int) -> tuple[int, int, int]:
    """Corrupt one byte of the ``index``-th batch of a segment file; returns its position info."""
    pos, base, size = batch_positions(path)[index]
    raw = bytearray(path.read_bytes())
    target = pos + (field_offset if field_offset >= 0 else size + field_offset)
    raw[target] ^= 0x5A
    path.write_bytes(bytes(raw))
    return pos, base, size


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("where", [-3, 7, 25], ids=["record", "base_offset", "offset_delta"])
def test_corrupt_byte_in_a_closed_segment_is_reported_and_never_served(
    open_log, make_batch, log_dir, caplog, clean, where
):
    plog = open_log(SMALL)
    before = fill(plog, make_batch, 80)
    assert len(plog.segments) >= 4
    victim = plog.segments[1]
    victim_path, victim_next = victim.log_path, victim.next_offset
    following = plog.segments[2].base_offset
    if clean:
        plog.close()
    else:
        crash(plog)
    pos, base, _ = _flip_byte_in_batch(victim_path, 2, where)
    caplog.set_level(logging.ERROR, "reference_broker.log")
    plog = open_log(SMALL)
    # everything before the damaged batch is still served, and the read stops there
    result = plog.read(0, 10**9)
    served = [bytes(b.raw) for b in iter_batches(bytes(result.data))]
    assert result.next_offset == base and served == before[: len(served)]
    assert str(victim_path) in caplog.text and f"position {pos}" in caplog.text
    assert plog.corruptions and plog.corruptions[0].position == pos
    # the damaged batch itself raises KAFKA_STORAGE_ERROR
    with pytest.raises(KafkaStorageError, match=victim_path.name):
        plog.read(base, 10**9)
    # data after it (same segment and later ones) is intact and readable
    after = plog.read(base + 3, 10**9)  # batches hold at most 3 records
    assert after.first_offset > base and after.next_offset == plog.log_end_offset
    assert plog.read(following, 1).first_offset == following
    assert victim_path.stat().st_size > 0 and victim.next_offset == victim_next


def test_broken_framing_in_a_closed_segment_blocks_the_rest_of_that_segment(
    open_log, make_batch, log_dir, caplog
):
    plog = open_log(SMALL)
    fill(plog, make_batch, 80)
    victim = plog.segments[1]
    path, next_base = victim.log_path, plog.segments[2].base_offset
    crash(plog)
    _, base, _ = _flip_byte_in_batch(path, 3, 9)  # the batch length field
    caplog.set_level(logging.ERROR, "reference_broker.log")
    plog = open_log(SMALL)
    assert "corrupt data" in caplog.text and path.name in caplog.text
    for offset in (base, base + 1, next_base - 1):
        with pytest.raises(KafkaStorageError):
            plog.read(offset, 10)
    assert plog.read(0, 10**9).next_offset == base
    assert plog.read(next_base, 10).first_offset == next_base
    assert plog.log_end_offset > next_base


def test_clean_shutdown_skips_validation_and_unclean_starts_at_the_recovery_point(
    open_log, make_batch, monkeypatch
):
    plog = open_log(SMALL)
    fill(plog, make_batch, 80)
    plog.close()
    recovered: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, **kwargs: bool):
        recovered.append(self.base_offset)
        return original(self, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", spy)
    plog = open_log(SMALL)
    assert recovered == []
    assert plog.recovery_point == plog.log_end_offset
    for i in range(40):
        plog.append(make_batch(tag=i), now_ms=0)
    plog.maybe_flush(0)  # fsyncs the rolled segments: recovery point = active segment base
    rp = plog.recovery_point
    assert rp == plog.active_segment.base_offset
    for i in range(5):
        plog.append(make_batch(tag=i), now_ms=0)
    crash(plog)
    plog = open_log(SMALL)
    assert recovered == [rp]
    assert plog.recovery_point == plog.log_end_offset


def test_leftovers_of_interrupted_operations_are_cleaned(open_log, make_batch, log_dir):
    plog = open_log(SMALL)
    fill(plog, make_batch, 80)
    plog.delete_records_before(plog.segments[2].base_offset)
    start = plog.log_start_offset
    plog.close()
    (log_dir / "00000000000000999999.index").write_bytes(b"")  # index without its .log
    (log_dir / "partition.checkpoint.tmp").write_bytes(b"junk")
    # a segment below the log start whose deletion was interrupted
    (log_dir / "00000000000000000000.log").write_bytes(b"")
    plog = open_log(SMALL)
    assert plog.log_start_offset == start
    assert plog.segments[0].base_offset == start
    assert not (log_dir / "00000000000000999999.index").exists()
    assert not (log_dir / "partition.checkpoint.tmp").exists()
    assert not (log_dir / "00000000000000000000.log").exists()


def test_kill_minus_nine_loses_no_acknowledged_batch(log_dir, killed_writer):
    acked = killed_writer({"segment_bytes": 4000, "retention_ms": -1}, 400, key=b"k")
    plog = PartitionLog.open(log_dir, LogConfig(segment_bytes=4000, retention_ms=-1))
    try:
        assert plog.log_end_offset >= acked[-1][1] + 1
        got = {}
        for batch in iter_batches(bytes(plog.read(0, 10**9).data)):
            batch.validate()
            got[batch.base_offset] = (batch.last_offset, [r.value for r in batch])
        for i, (base, last) in enumerate(acked):
            assert got[base][0] == last
            assert got[base][1] == [b"%d-%d" % (i, j) for j in range(i % 4 + 1)]
    finally:
        plog.close()


def test_damage_inside_the_active_segment_is_not_mistaken_for_a_torn_tail(
    open_log, make_batch, caplog
):
    plog = open_log(LogConfig(retention_ms=-1))
    before = fill(plog, make_batch, 30)
    path, end = plog.active_segment.log_path, plog.log_end_offset
    size = path.stat().st_size
    crash(plog)
    _, base, _ = _flip_byte_in_batch(path, 10, -2)
    caplog.set_level(logging.ERROR, "reference_broker.log")
    plog = open_log(LogConfig(retention_ms=-1))
    assert path.stat().st_size == size and plog.log_end_offset == end  # nothing truncated
    assert "corrupt data" in caplog.text
    with pytest.raises(KafkaStorageError):
        plog.read(base, 100)
    served = [bytes(b.raw) for b in iter_batches(bytes(plog.read(base + 3, 10**9).data))]
    assert served == before[11:]
    assert plog.append(make_batch(), now_ms=0).base_offset == end
