"""Transactions: last stable offset, markers, the aborted-transaction index, read_committed."""

from __future__ import annotations

import pytest

from reference_broker.log import LogConfig
from sdk.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from sdk.records import ControlType, iter_batches

CONFIG = LogConfig(segment_bytes=1_200, retention_ms=-1)


class Txn:
    """A transactional producer writing to one partition log."""

    def __init__(self, plog, make_batch, pid: int, epoch: int = 0):
        self.plog, self.make_batch, self.pid, self.epoch, self.seq = plog, make_batch, pid, epoch, 0

    def send(self, count: int = 2):
        result = self.plog.append(
            self.make_batch(count, pid=self.pid, epoch=self.epoch, seq=self.seq, txn=True, tag=self.pid),
            now_ms=0,
        )
        self.seq += count
        return result

    def end(self, control: ControlType, coordinator_epoch: int = 0):
        return self.plog.append_control(control, self.pid, self.epoch, coordinator_epoch, now_ms=0)


def test_last_stable_offset_follows_open_transactions(open_log, make_batch):
    plog = open_log(CONFIG)
    plog.append(make_batch(2), now_ms=0)  # 0-1 plain
    a, b = Txn(plog, make_batch, 1), Txn(plog, make_batch, 2)
    assert a.send().base_offset == 2  # A: 2-3
    assert plog.last_stable_offset == 2 and plog.high_watermark == 4
    b.send()  # B: 4-5
    a.send()  # A: 6-7
    assert plog.last_stable_offset == 2
    commit = a.end(ControlType.COMMIT)  # marker at 8
    assert commit.base_offset == 8 and commit.record_count == 1
    assert plog.last_stable_offset == 4  # B still open
    b.end(ControlType.COMMIT)
    assert plog.last_stable_offset == plog.high_watermark == 10
    # read_committed stops before the first open transaction
    a.send()
    result = plog.read(0, 10**6, max_offset=plog.last_stable_offset)
    assert result.next_offset == 10 and result.last_stable_offset == 10


def test_aborted_transactions_are_indexed_and_reported(open_log, make_batch):
    plog = open_log(CONFIG)
    a, b = Txn(plog, make_batch, 11), Txn(plog, make_batch, 22)
    a.send()  # 0-1
    b.send()  # 2-3
    a.send()  # 4-5
    abort = a.end(ControlType.ABORT)  # 6
    b.end(ControlType.COMMIT)  # 7
    txns = plog.active_segment.txn_index.entries
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in txns] == [
        (11, 0, abort.base_offset, 2)]  # B (from offset 2) was still open
    assert plog.aborted_transactions(0, plog.high_watermark) == [(11, 0)]
    assert plog.aborted_transactions(5, 8) == [(11, 0)]
    assert plog.aborted_transactions(7, 8) == []  # ended before the fetch range
    result = plog.read(0, 10**6, max_offset=plog.last_stable_offset, with_aborted=True)
    assert result.aborted_transactions == [(11, 0)]
    controls = [b for b in iter_batches(bytes(result.data)) if b.is_control]
    assert [c.control_record().type for c in controls] == [ControlType.ABORT, ControlType.COMMIT]


def test_aborted_transactions_span_segments(open_log, make_batch):
    plog = open_log(CONFIG)
    a = Txn(plog, make_batch, 5)
    first = a.send().base_offset
    for _ in range(30):
        a.send()
    assert len(plog.segments) > 3
    a.end(ControlType.ABORT)
    for fetch in (first, plog.segments[1].base_offset, plog.log_end_offset - 1):
        assert plog.aborted_transactions(fetch, plog.log_end_offset) == [(5, first)]


def test_marker_validation(open_log, make_batch):
    plog = open_log(CONFIG)
    a = Txn(plog, make_batch, 9, epoch=3)
    a.send()
    with pytest.raises(InvalidProducerEpochError):
        plog.append_control(ControlType.COMMIT, 9, 2, 0, now_ms=0)
    a.end(ControlType.COMMIT, coordinator_epoch=5)
    a.send()
    with pytest.raises(TransactionCoordinatorFencedError):
        a.end(ControlType.ABORT, coordinator_epoch=4)
    with pytest.raises(InvalidRecordError):
        plog.append_control(ControlType.LEADER_CHANGE, 9, 3, 5, now_ms=0)
    a.end(ControlType.ABORT, coordinator_epoch=5)
    assert plog.last_stable_offset == plog.high_watermark
    # a marker for a producer without an open transaction is written but changes nothing
    plog.append_control(ControlType.COMMIT, 12345, 0, 0, now_ms=0)
    assert plog.last_stable_offset == plog.high_watermark


def test_non_transactional_write_inside_a_transaction_is_rejected(open_log, make_batch):
    plog = open_log(CONFIG)
    Txn(plog, make_batch, 9).send()
    with pytest.raises(InvalidTxnStateError):
        plog.append(make_batch(1, pid=9, epoch=0, seq=2), now_ms=0)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("drop", [None, "snapshots", "txnindex"])
def test_transaction_state_and_index_survive_reopen(open_log, make_batch, log_dir, clean, drop):
    plog = open_log(CONFIG)
    a, b, c = Txn(plog, make_batch, 1), Txn(plog, make_batch, 2), Txn(plog, make_batch, 3)
    a.send()
    for _ in range(10):
        b.send()
    b.end(ControlType.ABORT)
    c_first = c.send().base_offset
    for _ in range(10):
        a.send()
    a.end(ControlType.ABORT)
    lso, hw = plog.last_stable_offset, plog.high_watermark
    assert lso == c_first < hw
    aborted = plog.aborted_transactions(0, hw)
    index_files = {p.name: p.read_bytes() for p in log_dir.glob("*.txnindex")}
    if clean:
        plog.close()
    else:
        plog._close_files()
    if drop == "snapshots":
        for path in log_dir.glob("*.snapshot"):
            path.unlink()
    elif drop == "txnindex":
        for path in log_dir.glob("*.txnindex"):
            path.unlink()
    plog = open_log(CONFIG)
    assert (plog.last_stable_offset, plog.high_watermark) == (lso, hw)
    assert plog.aborted_transactions(0, hw) == aborted == [(2, 2), (1, 0)]
    assert {p.name: p.read_bytes() for p in log_dir.glob("*.txnindex")} == index_files
    c.plog = plog
    c.end(ControlType.COMMIT)
    assert plog.last_stable_offset == plog.high_watermark
