"""The partition log as a replica: leader epochs stamped and recovered, follower appends,
truncation to a diverging offset (also across a crash), and a high watermark below the log end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from reference_broker.log import LogConfig
from reference_broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry
from sdk.protocol.errors import CorruptMessageError, InvalidRecordError, OutOfOrderSequenceNumberError
from sdk.records import ControlType, iter_batches

SMALL = LogConfig(segment_bytes=250, index_interval_bytes=100, retention_ms=-1)


def batches_of(data: bytes | memoryview) -> list:
    return list(iter_batches(bytes(data)))


def test_a_single_node_stamps_epoch_0_and_records_it_once(open_log, make_batch, log_dir):
    plog = open_log(SMALL)
    for i in range(5):
        plog.append(make_batch(2, tag=i), now_ms=5)
    read = plog.read(0, 1 << 20)
    assert {b.partition_leader_epoch for b in batches_of(read.data)} == {0}
    assert plog.leader_epoch_cache.entries == [EpochEntry(0, 0)]
    assert (log_dir / LEADER_EPOCH_CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"
    assert plog.high_watermark == plog.log_end_offset == 10 and not plog.replicated


def test_a_new_leader_epoch_starts_at_the_log_end(open_log, make_batch):
    plog = open_log(SMALL)
    plog.append(make_batch(3), now_ms=5)
    plog.leader_epoch = 4
    plog.append(make_batch(2), now_ms=5)
    assert plog.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(4, 3)]
    assert plog.leader_epoch_cache.end_offset_for(0, plog.log_end_offset) == (0, 3)
    assert [b.partition_leader_epoch for b in batches_of(plog.read(0, 1 << 20).data)] == [0, 4]


def _leader_with_epochs(open_log_in, make_batch):
    """A leader log: epoch 1 for offsets 0-5, epoch 3 from 6 to 11, with a transaction."""
    leader = open_log_in("leader")
    leader.leader_epoch = 1
    for i in range(3):
        leader.append(make_batch(2, tag=i, pid=7, epoch=0, seq=2 * i), now_ms=5)
    leader.leader_epoch = 3
    leader.append(make_batch(2, tag=9, pid=8, epoch=0, seq=0, txn=True), now_ms=5)
    leader.append_control(ControlType.ABORT, 8, 0, 0, now_ms=5)
    for i in range(3):
        leader.append(make_batch(1, tag=10 + i), now_ms=5)
    return leader


@pytest.fixture
def open_log_in(tmp_path):
    from reference_broker.log import PartitionLog

    opened = []

    def factory(name: str, config: LogConfig = SMALL) -> PartitionLog:
        plog = PartitionLog.open(tmp_path / name, config, now_ms=1_000)
        opened.append(plog)
        return plog

    yield factory
    for plog in opened:
        plog._close_files()


def test_a_follower_keeps_the_leaders_offsets_batches_and_epochs(open_log_in, make_batch):
    leader = _leader_with_epochs(open_log_in, make_batch)
    follower = open_log_in("follower")
    offset = 0
    while offset < leader.log_end_offset:  # fetch in small steps, as a replica fetcher does
        read = leader.read(offset, 150, max_offset=leader.log_end_offset)
        result = follower.append_as_follower(read.data, now_ms=6)
        assert result.base_offset == offset
        offset = read.next_offset
    assert follower.log_end_offset == leader.log_end_offset == 12
    assert bytes(follower.read(0, 1 << 20).data) == bytes(leader.read(0, 1 << 20).data)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [
        EpochEntry(1, 0), EpochEntry(3, 6)]
    assert follower.aborted_transactions(0, 12) == leader.aborted_transactions(0, 12) == [(8, 6)]
    assert follower.producer_state.producers[7].last_seq == 5


def test_a_follower_append_must_continue_the_log_and_pass_its_crc(open_log_in, make_batch):
    leader = _leader_with_epochs(open_log_in, make_batch)
    follower = open_log_in("follower")
    first = bytes(leader.read(0, 1, max_offset=leader.log_end_offset).data)
    later = bytes(leader.read(6, 1, max_offset=leader.log_end_offset).data)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(later, now_ms=6)  # would leave a gap 0..5
    damaged = bytearray(first)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower(damaged, now_ms=6)
    follower.append_as_follower(first, now_ms=6)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(first, now_ms=6)  # behind the log end
    assert follower.log_end_offset == 2


def test_truncate_to_removes_the_diverged_suffix_consistently(open_log_in, make_batch, read_all):
    leader = _leader_with_epochs(open_log_in, make_batch)
    assert len(leader.segments) > 2
    assert leader.truncate_to(7)  # inside the transactional batch 6-7: the whole batch goes
    assert leader.log_end_offset == 6
    assert leader.leader_epoch_cache.entries == [EpochEntry(1, 0)]
    assert leader.aborted_transactions(0, 6) == []
    assert leader.producer_state.first_unstable_offset is None
    assert 8 not in leader.producer_state.producers
    assert leader.producer_state.producers[7].last_seq == 5
    assert [b.last_offset for b in read_all(leader)] == [1, 3, 5]
    assert not leader.truncate_to(6)
    # The log goes on from there, in a new epoch, and survives a reopen.
    leader.leader_epoch = 5
    result = leader.append(make_batch(1), now_ms=5)
    assert result.base_offset == 6
    leader.close()
    again = open_log_in("leader")
    assert again.log_end_offset == 7
    assert again.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(5, 6)]
    assert again.leader_epoch == 5


def test_truncate_below_the_log_start_restarts_the_log(open_log_in, make_batch):
    leader = _leader_with_epochs(open_log_in, make_batch)
    leader.truncate_fully_and_start_at(40)
    assert (leader.log_start_offset, leader.log_end_offset) == (40, 40)
    assert leader.leader_epoch_cache.entries == []
    leader.leader_epoch = 6
    assert leader.append(make_batch(1), now_ms=5).base_offset == 40
    assert leader.leader_epoch_cache.entries == [EpochEntry(6, 40)]


def test_reads_stop_at_the_high_watermark_of_a_replicated_log(open_log_in, make_batch):
    leader = _leader_with_epochs(open_log_in, make_batch)
    leader.set_high_watermark(4)
    assert (leader.high_watermark, leader.last_stable_offset, leader.latest_offset()) == (4, 4, 4)
    assert [b.last_offset for b in batches_of(leader.read(0, 1 << 20).data)] == [1, 3]
    assert leader.read(4, 1 << 20).data == b""  # committed up to 4, not beyond
    follower_view = leader.read(4, 1 << 20, max_offset=leader.log_end_offset)
    assert batches_of(follower_view.data)[-1].last_offset == 11
    leader.set_high_watermark(100)  # clamped to the log end
    assert leader.high_watermark == 12
    leader.set_high_watermark(None)
    assert not leader.replicated and leader.high_watermark == leader.log_end_offset


def test_epochs_are_rebuilt_when_the_checkpoint_is_missing_or_bad(open_log_in, make_batch, tmp_path):
    leader = _leader_with_epochs(open_log_in, make_batch)
    leader.close()
    path = tmp_path / "leader" / LEADER_EPOCH_CHECKPOINT_FILE
    path.unlink()
    assert open_log_in("leader").leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(3, 6)]
    open_log_in("leader").close()
    path.write_text("garbage")
    assert open_log_in("leader").leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(3, 6)]


def test_epoch_entries_beyond_a_recovered_log_end_are_dropped(open_log_in, make_batch, tmp_path):
    leader = _leader_with_epochs(open_log_in, make_batch)
    leader.close()
    path = tmp_path / "leader" / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("0\n3\n1 0\n3 6\n9 50\n")  # epoch 9 from a write the log lost
    assert open_log_in("leader").leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(3, 6)]


def test_a_crash_in_the_middle_of_truncation_recovers_a_consistent_log(tmp_path, make_batch):
    """kill -9 right after the segment file is cut, before its indexes and producer state are
    rebuilt: reopening must give the truncated log, its epochs and no trace of the cut data."""
    directory = tmp_path / "leader"
    script = textwrap.dedent(f"""
        import os, signal
        from reference_broker.log import LogConfig, PartitionLog
        from reference_broker.log import segment
        from tests.reference_broker.log.conftest import _make_batch
        plog = PartitionLog.open({str(directory)!r}, LogConfig(segment_bytes=250,
                                 index_interval_bytes=100, retention_ms=-1), now_ms=1000)
        plog.leader_epoch = 1
        for i in range(3):
            plog.append(_make_batch(2, tag=i), now_ms=5)
        plog.leader_epoch = 3
        for i in range(6):
            plog.append(_make_batch(1, tag=10 + i), now_ms=5)
        plog.flush()
        def killed(self):
            os.kill(os.getpid(), signal.SIGKILL)
        segment.LogSegment.rebuild_indexes = killed
        plog.truncate_to(8)
    """)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    from reference_broker.log import PartitionLog

    plog = PartitionLog.open(directory, SMALL, now_ms=2_000)
    try:
        assert plog.log_end_offset == 8
        assert plog.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(3, 6)]
        assert [b.last_offset for b in batches_of(plog.read(0, 1 << 20).data)] == [1, 3, 5, 6, 7]
        assert plog.append(make_batch(1), now_ms=5).base_offset == 8
    finally:
        plog._close_files()


def test_truncating_at_the_log_end_drops_an_epoch_begun_there_without_records(open_log_in, make_batch):
    """A replica that became leader (recording its epoch at its log end) and wrote nothing before
    losing leadership must not keep that epoch: its next leader never had it, and a follower
    that keeps it would fetch with it and diverge for ever."""
    plog = open_log_in("replica")
    plog.leader_epoch = 1
    plog.append(make_batch(3), now_ms=5)
    plog.leader_epoch_cache.assign(4, plog.log_end_offset)
    assert not plog.truncate_to(plog.log_end_offset)
    assert plog.leader_epoch_cache.entries == [EpochEntry(1, 0)]


def test_a_replicated_high_watermark_is_checkpointed_and_read_back(open_log_in, make_batch, tmp_path):
    import json

    from reference_broker.replication.partition import Partition

    single = open_log_in("single")
    single.append(make_batch(2), now_ms=5)
    single.maybe_flush(10**13)
    assert "high_watermark" not in json.loads((tmp_path / "single" / "partition.checkpoint").read_text())

    plog = _leader_with_epochs(open_log_in, make_batch)
    plog.set_high_watermark(4)
    plog.maybe_flush(10)  # the periodic chore: the moved high watermark is written
    body = json.loads((tmp_path / "leader" / "partition.checkpoint").read_text())
    assert body["high_watermark"] == 4
    plog.close()
    again = open_log_in("leader")
    assert again.checkpointed_high_watermark == 4
    assert again.high_watermark == again.log_end_offset  # not replicated until told so
    partition = Partition("leader", 0, 2, again)
    assert partition.make_follower(1, 5, 0, [1, 2])
    assert again.high_watermark == 4  # a replica starts from its checkpoint, not the log end


def test_an_elected_follower_keeps_sequence_checks_and_the_open_transaction(open_log_in, make_batch):
    leader = open_log_in("leader")
    leader.leader_epoch = 1
    produced = make_batch(2, pid=40, epoch=0, seq=0)
    leader.append(produced, now_ms=5)
    leader.append(make_batch(1, pid=41, epoch=0, seq=0, txn=True), now_ms=5)  # left open
    leader.append(make_batch(1), now_ms=5)
    follower = open_log_in("follower")
    follower.append_as_follower(leader.read(0, 1 << 20, max_offset=leader.log_end_offset).data, now_ms=6)
    # The follower is elected: the producer's retry of its first batch is a duplicate there too,
    # and read_committed readers stop at the transaction still open.
    follower.leader_epoch = 2
    retry = follower.append(produced, now_ms=7)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (0, 1)
    assert follower.last_stable_offset == 2
    with pytest.raises(OutOfOrderSequenceNumberError):
        follower.append(make_batch(1, pid=40, epoch=0, seq=5), now_ms=7)
