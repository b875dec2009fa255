"""Idempotent producers: duplicates, sequence gaps, epochs, persistence across restarts."""

from __future__ import annotations

import pytest

from reference_broker.log import LogConfig
from sdk.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from sdk.records import iter_batches

CONFIG = LogConfig(segment_bytes=1_500, retention_ms=-1)
PID = 4242


def produce(plog, make_batch, seq: int, count: int = 2, *, epoch: int = 0, pid: int = PID, **kw):
    batch = make_batch(count, pid=pid, epoch=epoch, seq=seq, tag=seq, **kw)
    return plog.append(batch, now_ms=kw.get("ts", 1_000))


def test_duplicate_of_any_of_the_last_five_batches_returns_the_original_offsets(open_log, make_batch):
    plog = open_log(CONFIG)
    plog.append(make_batch(3), now_ms=0)  # someone else's data first
    originals = [produce(plog, make_batch, seq) for seq in range(0, 12, 2)]  # 6 batches
    end = plog.log_end_offset
    for original in originals[1:]:  # the last five are remembered
        retry = produce(plog, make_batch, original.base_offset - 3)
        assert retry.duplicate
        assert (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset)
        assert plog.log_end_offset == end  # nothing written
    with pytest.raises(OutOfOrderSequenceNumberError):  # the sixth-newest is forgotten
        produce(plog, make_batch, 0)
    assert produce(plog, make_batch, 12).base_offset == end


def test_sequence_gap_and_wrong_batch_boundaries_are_out_of_order(open_log, make_batch):
    plog = open_log(CONFIG)
    produce(plog, make_batch, 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 3)  # gap: expected 2
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 1)  # overlaps, not an exact duplicate
    assert produce(plog, make_batch, 2).base_offset == 2


def test_epochs(open_log, make_batch):
    plog = open_log(CONFIG)
    produce(plog, make_batch, 0, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        produce(plog, make_batch, 2, epoch=2)
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 2, epoch=4)  # a new epoch must start at 0
    assert not produce(plog, make_batch, 0, epoch=4).duplicate
    assert produce(plog, make_batch, 2, epoch=4).base_offset == 4
    # the old epoch's batches are no longer duplicates, they are fenced
    with pytest.raises(InvalidProducerEpochError):
        produce(plog, make_batch, 0, epoch=3)


def test_unknown_producer_is_accepted_at_any_sequence_like_kafka_2_5(open_log, make_batch):
    plog = open_log(CONFIG)
    assert produce(plog, make_batch, 17).base_offset == 0  # KIP-360: no UNKNOWN_PRODUCER_ID
    assert produce(plog, make_batch, 19).base_offset == 2
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 22)


def test_legacy_mode_reports_unknown_producer_id(open_log, make_batch, tmp_path):
    plog = open_log(CONFIG, legacy_unknown_producer_id=True)
    with pytest.raises(UnknownProducerIdError):
        produce(plog, make_batch, 17)
    assert produce(plog, make_batch, 0).base_offset == 0


def test_sequence_wraps_at_int32_max(open_log, make_batch):
    plog = open_log(CONFIG)
    top = 2**31 - 1
    produce(plog, make_batch, top - 1, count=2)  # sequences top-1, top
    assert produce(plog, make_batch, 0, count=2).base_offset == 2
    wrapping = produce(plog, make_batch, 2, count=1)
    assert wrapping.base_offset == 4
    # a batch whose own range wraps: sequences top, 0, 1 -> the next starts at 2
    other = 99
    produce(plog, make_batch, top - 1, count=1, pid=other)
    produce(plog, make_batch, top, count=3, pid=other)
    assert produce(plog, make_batch, 2, count=1, pid=other).base_offset == plog.log_end_offset - 1
    assert produce(plog, make_batch, top, count=3, pid=other).duplicate


def test_idempotent_batch_without_sequence_is_invalid(open_log, make_batch):
    plog = open_log(CONFIG)
    with pytest.raises(InvalidRecordError):
        plog.append(make_batch(pid=PID, epoch=0, seq=-1), now_ms=0)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("drop_snapshots", [False, True])
def test_state_survives_reopen(open_log, make_batch, log_dir, clean, drop_snapshots):
    plog = open_log(CONFIG)
    results = [produce(plog, make_batch, seq) for seq in range(0, 80, 2)]
    produce(plog, make_batch, 0, pid=7, epoch=5)
    assert len(plog.segments) > 2
    if clean:
        plog.close()
    else:
        plog._close_files()
    if drop_snapshots:
        for path in log_dir.glob("*.snapshot"):
            path.unlink()
    plog = open_log(CONFIG)
    retry = produce(plog, make_batch, 78)
    assert retry.duplicate and retry.base_offset == results[-1].base_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 81)
    with pytest.raises(InvalidProducerEpochError):
        produce(plog, make_batch, 2, pid=7, epoch=4)
    assert produce(plog, make_batch, 80).base_offset == plog.log_end_offset - 2


def test_snapshot_files_are_written_on_roll_and_close(open_log, make_batch, log_dir):
    plog = open_log(CONFIG)
    for seq in range(0, 60, 2):
        produce(plog, make_batch, seq)
    rolled = sorted(int(p.stem) for p in log_dir.glob("*.snapshot"))
    assert rolled and set(rolled) <= {s.base_offset for s in plog.segments}
    plog.close()
    assert (log_dir / f"{plog.log_end_offset:020d}.snapshot").exists()


def test_corrupt_snapshot_falls_back_to_replay(open_log, make_batch, log_dir, caplog):
    plog = open_log(CONFIG)
    for seq in range(0, 30, 2):
        produce(plog, make_batch, seq)
    plog.close()
    for path in log_dir.glob("*.snapshot"):
        path.write_bytes(b"00000000\n{not json")
    plog = open_log(CONFIG)
    assert "unreadable producer snapshot" in caplog.text
    assert produce(plog, make_batch, 28).duplicate


def test_producers_expire_after_producer_id_expiration(open_log, make_batch):
    plog = open_log(LogConfig(producer_id_expiration_ms=10_000, retention_ms=-1))
    produce(plog, make_batch, 0, ts=1_000)
    assert plog.remove_expired_producers(5_000) == 0
    assert plog.remove_expired_producers(11_000) == 0  # last record at 1_001
    assert plog.remove_expired_producers(11_001) == 1
    # the producer is now unknown: any sequence is accepted again (Kafka 2.5+)
    assert not produce(plog, make_batch, 10).duplicate


def test_expired_producers_are_not_loaded_from_snapshots(open_log, make_batch):
    plog = open_log(LogConfig(producer_id_expiration_ms=10_000, retention_ms=-1))
    produce(plog, make_batch, 0, ts=1_000)
    plog.close()
    plog = open_log(LogConfig(producer_id_expiration_ms=10_000, retention_ms=-1), now_ms=50_000)
    assert plog.producer_state.last_entry(PID) is None


def test_state_is_kept_after_retention_removes_the_data(open_log, make_batch):
    plog = open_log(LogConfig(segment_bytes=1_000, retention_ms=1_000))
    for seq in range(0, 20, 2):
        produce(plog, make_batch, seq, ts=1_000)
    plog.apply_retention(100_000)
    assert plog.log_start_offset == plog.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(plog, make_batch, 40, ts=100_000)
    assert produce(plog, make_batch, 18, ts=100_000).duplicate
    plog.close()
    reopened = open_log(LogConfig(segment_bytes=1_000, retention_ms=1_000), now_ms=100_000)
    assert produce(reopened, make_batch, 20, ts=100_000).base_offset == reopened.log_start_offset
    assert len(list(iter_batches(bytes(reopened.read(reopened.log_start_offset, 10**6).data)))) == 1
