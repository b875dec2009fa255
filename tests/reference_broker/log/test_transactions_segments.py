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


class Interleaving:
    """Plain batches and three transactional producers, each transaction a few batches long and
    ended at random, so transactions overlap each other and span segments."""

    def __init__(self, plog: PartitionLog, make_batch, seed: int):
        self.rng = random.Random(seed)
        self.make_batch = make_batch
        self.producers = [Txn(plog, make_batch, pid) for pid in (11, 22, 33)]
        self.open_txns: set[int] = set()
        self.plog = plog

    def reopened(self, plog: PartitionLog) -> None:
        self.plog = plog
        for producer in self.producers:
            producer.plog = plog

    def write(self, steps: int) -> None:
        rng = self.rng
        for _ in range(steps):
            producer = rng.choice(self.producers)
            roll = rng.random()
            if roll < 0.15:
                self.plog.append(self.make_batch(rng.randint(1, 3)), now_ms=0)
            elif roll < 0.3 and producer.pid in self.open_txns:
                producer.end(rng.choice([ControlType.ABORT, ControlType.ABORT, ControlType.COMMIT]))
                self.open_txns.discard(producer.pid)
            else:
                producer.send(rng.randint(1, 3))
                self.open_txns.add(producer.pid)


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
    Interleaving(plog, make_batch, seed).write(120)
    txns = indexed(plog)
    assert len(plog.segments) > 5 and txns
    assert_every_range_reports_its_aborts(plog, txns)
    assert_one_batch_reads_report_their_aborts(plog, txns)


def txn_index_per_segment(plog: PartitionLog) -> dict[int, list[AbortedTxn]]:
    return {s.base_offset: list(s.txn_index.entries) for s in plog.segments}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("drop", [None, "all-snapshots", "newer-snapshots", "txn-indexes"])
def test_unclean_recovery_rebuilds_aborts_begun_in_trusted_segments(
    open_log, make_batch, log_dir, seed, drop
):
    """The segments after the recovery point are validated and their transaction indexes rebuilt
    by replaying producer state; transactions begun before the recovery point (in trusted
    segments) and aborted after it must be rebuilt with their true first offset."""
    plog = open_log(SMALL_SEGMENTS)
    writes = Interleaving(plog, make_batch, seed)
    straddling, open_across_crash = Txn(plog, make_batch, 44), Txn(plog, make_batch, 55)
    writes.write(30)
    straddling.send()
    open_across_crash.send()
    writes.write(30)
    trusted_up_to = plog.active_segment.base_offset
    plog.flush(trusted_up_to)
    writes.write(80)
    straddling.end(ControlType.ABORT)
    before = txn_index_per_segment(plog)
    lso, hw = plog.last_stable_offset, plog.high_watermark
    assert any(t.producer_id == 44 and t.first_offset < trusted_up_to <= t.last_offset
               for ts in before.values() for t in ts)
    plog._close_files()  # no clean shutdown: recovery from the recovery point
    snapshots = sorted(log_dir.glob("*.snapshot"))
    if drop == "all-snapshots":
        for path in snapshots:
            path.unlink()
    elif drop == "newer-snapshots":
        for path in snapshots:
            if int(path.name.split(".")[0]) >= trusted_up_to:
                path.unlink()
    elif drop == "txn-indexes":
        for path in log_dir.glob("*.txnindex"):
            path.unlink()
    plog = open_log(SMALL_SEGMENTS)
    assert plog.recovery_point == plog.log_end_offset == hw
    assert txn_index_per_segment(plog) == before
    assert (plog.last_stable_offset, plog.high_watermark) == (lso, hw)
    assert_every_range_reports_its_aborts(plog, indexed(plog))
    writes.reopened(plog)
    open_across_crash.plog = plog
    open_across_crash.end(ControlType.ABORT)
    for producer in writes.producers:
        if producer.pid in writes.open_txns:
            producer.end(ControlType.ABORT)
    assert plog.last_stable_offset == plog.high_watermark
    assert_one_batch_reads_report_their_aborts(plog, indexed(plog))


def remove_first_segments(plog: PartitionLog, how: str, count: int) -> None:
    """Remove the first ``count`` segments by DeleteRecords (log start inside the next segment) or
    by retention.bytes."""
    if how == "delete-records":
        plog.delete_records_before(plog.segments[count].base_offset + 1)
    else:
        keep = sum(s.size for s in plog.segments[count:])
        plog.update_config(LogConfig(segment_bytes=SMALL_SEGMENTS.segment_bytes, retention_ms=-1,
                                     retention_bytes=keep))
        assert plog.apply_retention(0) == count


def write_with_plain_between(plog: PartitionLog, make_batch, txn: Txn, segments: int) -> int:
    """``txn`` sends until the log has ``segments`` segments, plain batches between its batches;
    returns its first offset."""
    first = txn.send()
    while len(plog.segments) < segments:
        plog.append(make_batch(1), now_ms=0)
        txn.send()
    return first


@pytest.mark.parametrize("how", ["delete-records", "retention"])
@pytest.mark.parametrize("reopen", [None, "clean", "unclean"])
def test_removing_the_first_segment_of_an_aborted_transaction(open_log, make_batch, how, reopen):
    plog = open_log(SMALL_SEGMENTS)
    txn = Txn(plog, make_batch, 7)
    first = write_with_plain_between(plog, make_batch, txn, 5)
    marker = txn.end(ControlType.ABORT)
    remove_first_segments(plog, how, 2)
    assert first < plog.log_start_offset < marker
    if reopen is not None:
        plog.close() if reopen == "clean" else plog._close_files()
        plog = open_log(SMALL_SEGMENTS)
    assert plog.last_stable_offset == plog.high_watermark
    assert plog.aborted_transactions(plog.log_start_offset, plog.log_start_offset + 1) == [(7, first)]
    assert_one_batch_reads_report_their_aborts(plog, indexed(plog))


@pytest.mark.parametrize("how", ["delete-records", "retention"])
@pytest.mark.parametrize("reopen", [None, "clean", "unclean"])
def test_removing_the_first_segment_of_an_open_transaction(open_log, make_batch, how, reopen):
    plog = open_log(SMALL_SEGMENTS)
    txn = Txn(plog, make_batch, 7)
    first = write_with_plain_between(plog, make_batch, txn, 5)
    remove_first_segments(plog, how, 2)
    start = plog.log_start_offset
    assert first < start
    if reopen is not None:
        plog.close() if reopen == "clean" else plog._close_files()
        plog = open_log(SMALL_SEGMENTS)
        txn.plog = plog
    # The transaction is still open: nothing from the log start on is stable.
    assert plog.last_stable_offset == start < plog.high_watermark
    assert plog.read(start, 10**6, max_offset=plog.last_stable_offset).next_offset == start
    txn.send()
    txn.end(ControlType.ABORT)
    assert plog.last_stable_offset == plog.high_watermark
    assert plog.aborted_transactions(start, start + 1) == [(7, first)]
    assert_one_batch_reads_report_their_aborts(plog, indexed(plog))


@pytest.mark.parametrize("seed", range(3))
def test_aborts_stay_reported_while_delete_records_removes_segments_holding_others(
    open_log, make_batch, seed
):
    plog = open_log(SMALL_SEGMENTS)
    Interleaving(plog, make_batch, seed).write(120)
    holding_aborts = len([s for s in plog.segments if s.txn_index.entries])
    for fraction in (0.25, 0.5, 0.75):
        plog.delete_records_before(plog.segments[int(len(plog.segments) * fraction)].base_offset + 1)
        txns = indexed(plog)  # markers below the log start went with their segments
        end = plog.log_end_offset
        for fetch in range(plog.log_start_offset, end):
            assert plog.aborted_transactions(fetch, end) == overlapping(txns, fetch, end), fetch
        assert_one_batch_reads_report_their_aborts(plog, txns)
    assert len([s for s in plog.segments if s.txn_index.entries]) < holding_aborts
