"""Aborted transactions spanning segment rolls: what a read_committed fetch is told, before and
after recovery, retention and DeleteRecords.

A transaction is indexed in the segment of its ABORT marker, which can be several segments after
the data it aborts. Every check compares :meth:`PartitionLog.aborted_transactions` with the
definition: every aborted transaction in the log whose range ``[first_offset, marker]`` overlaps
``[fetch_offset, upper_bound)``.
"""

from __future__ import annotations

import random

import pytest

from reference_broker.log import LogConfig, PartitionLog
from reference_broker.log.index import AbortedTxn
from sdk.records import ControlType, iter_batches

SMALL_SEGMENTS = LogConfig(segment_bytes=600, retention_ms=-1)


class Txn:
    """A transactional producer writing to one partition log."""

    def __init__(self, plog: PartitionLog, make_batch, pid: int):
        self.plog, self.make_batch, self.pid, self.seq = plog, make_batch, pid, 0

    def send(self, count: int = 2) -> int:
        batch = self.make_batch(count, pid=self.pid, epoch=0, seq=self.seq, txn=True, tag=self.pid)
        self.seq += count
        return self.plog.append(batch, now_ms=0).base_offset

    def end(self, control: ControlType) -> int:
        return self.plog.append_control(control, self.pid, 0, 0, now_ms=0).base_offset


def indexed(plog: PartitionLog) -> list[AbortedTxn]:
    """Every aborted transaction of the log, in marker order."""
    return [t for s in plog.segments for t in s.txn_index.entries]


def overlapping(txns: list[AbortedTxn], fetch: int, upper: int) -> list[tuple[int, int]]:
    if upper <= fetch:
        return []
    return [(t.producer_id, t.first_offset) for t in txns
            if t.last_offset >= fetch and t.first_offset < upper]


def assert_every_range_reports_its_aborts(plog: PartitionLog, txns: list[AbortedTxn]) -> None:
    start, end = plog.log_start_offset, plog.log_end_offset
    for fetch in range(start, end + 1):
        for upper in range(fetch, end + 1):
            assert plog.aborted_transactions(fetch, upper) == overlapping(txns, fetch, upper), (fetch, upper)


def assert_one_batch_reads_report_their_aborts(plog: PartitionLog, txns: list[AbortedTxn]) -> None:
    """Read the whole log one batch per read, as a consumer with the smallest fetch size does."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1, with_aborted=True)
        assert list(iter_batches(bytes(result.data))), f"no progress at {offset}"
        assert result.aborted_transactions == overlapping(txns, offset, result.next_offset), offset
        offset = result.next_offset


def write_interleaved(plog: PartitionLog, make_batch, seed: int) -> None:
    """Plain batches and three transactional producers, each transaction a few batches long and
    ended at random, so transactions overlap each other and span segments."""
    rng = random.Random(seed)
    producers = [Txn(plog, make_batch, pid) for pid in (11, 22, 33)]
    open_txns: set[int] = set()
    for _ in range(120):
        producer = rng.choice(producers)
        roll = rng.random()
        if roll < 0.15:
            plog.append(make_batch(rng.randint(1, 3)), now_ms=0)
        elif roll < 0.3 and producer.pid in open_txns:
            producer.end(rng.choice([ControlType.ABORT, ControlType.ABORT, ControlType.COMMIT]))
            open_txns.discard(producer.pid)
        else:
            producer.send(rng.randint(1, 3))
            open_txns.add(producer.pid)


def test_a_read_ending_before_the_marker_segment_reports_the_abort(open_log, make_batch):
    plog = open_log(SMALL_SEGMENTS)
    txn = Txn(plog, make_batch, 7)
    first = txn.send()
    while len(plog.segments) < 4:
        txn.send()
    marker = txn.end(ControlType.ABORT)
    assert first < plog.segments[1].base_offset and marker >= plog.segments[-1].base_offset
    result = plog.read(first, 1, with_aborted=True)  # one batch of the first segment
    assert result.next_offset <= plog.segments[1].base_offset
    assert result.aborted_transactions == [(7, first)]
    assert_one_batch_reads_report_their_aborts(plog, indexed(plog))


@pytest.mark.parametrize("seed", range(4))
def test_interleaved_transactions_report_exactly_the_overlapping_aborts(open_log, make_batch, seed):
    plog = open_log(SMALL_SEGMENTS)
    write_interleaved(plog, make_batch, seed)
    txns = indexed(plog)
    assert len(plog.segments) > 5 and txns
    assert_every_range_reports_its_aborts(plog, txns)
    assert_one_batch_reads_report_their_aborts(plog, txns)
