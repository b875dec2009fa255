"""read_committed filtering of one fetch response (``PartitionRecords``), against the definition.

A response holds whole batches from the one containing the fetch offset and the aborted
transactions overlapping the fetched range as ``(producer_id, first_offset)``. A record is
returned iff it is at or after the fetch offset and is not in an aborted transaction: not a
transactional record of a producer between the first offset of one of its aborted transactions
and that transaction's ABORT marker. Control batches are never returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.client.cluster import TopicPartition
from sdk.consumer.fetch_records import PartitionRecords
from sdk.records import ControlType, RecordBatchBuilder, build_control_batch

TP = TopicPartition("t", 0)
PRODUCERS = (101, 202, 303)


def data_batch(base_offset: int, count: int, pid: int, txn: bool) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, producer_id=pid,
                                 producer_epoch=0 if pid >= 0 else -1,
                                 base_sequence=0 if pid >= 0 else -1, is_transactional=txn)
    for i in range(count):
        builder.append(1_000 + i, b"k", b"%d" % (base_offset + i))
    return builder.build()


def marker(offset: int, pid: int, control: ControlType) -> bytes:
    return build_control_batch(control, pid, 0, 0, base_offset=offset)


def drain(part: PartitionRecords) -> list[int]:
    out: list[int] = []
    while records := part.take(1000):
        out.extend(r.offset for r in records)
    return out


def test_a_marker_before_the_fetch_offset_still_ends_its_aborted_range():
    """The first listed transaction ended (ABORT at 1) before the fetch offset 2: the producer's
    next transaction, committed, must be returned (Java's fetcher reads every batch's marker)."""
    a = PRODUCERS[0]
    data = (data_batch(0, 1, a, True) + marker(1, a, ControlType.ABORT)
            + data_batch(2, 2, a, True) + marker(4, a, ControlType.COMMIT))
    part = PartitionRecords(TP, 2, data, aborted=[(a, 0)], read_committed=True, check_crcs=True)
    assert drain(part) == [2, 3]
    assert part.next_offset == 5


# A log: steps ("plain", n) | ("send", producer, n) | ("end", producer, abort?).
steps = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("send"), st.sampled_from(PRODUCERS), st.integers(1, 3)),
    st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
), max_size=30)


@dataclass
class Log:
    """Batches as (base offset, next offset, bytes), up to the first open transaction."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)
    aborted_offsets: set[int] = field(default_factory=set)
    control_offsets: set[int] = field(default_factory=set)
    aborted_txns: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, marker)


def build_log(plan: list[tuple]) -> Log:
    log = Log()
    open_txns: dict[int, list[int]] = {}
    offset = 0
    for step in plan:
        if step[0] == "plain":
            log.batches.append((offset, offset + step[1], data_batch(offset, step[1], -1, False)))
            offset += step[1]
        elif step[0] == "send":
            _, pid, count = step
            log.batches.append((offset, offset + count, data_batch(offset, count, pid, True)))
            open_txns.setdefault(pid, []).extend(range(offset, offset + count))
            offset += count
        elif step[1] in open_txns:
            _, pid, abort = step
            written = open_txns.pop(pid)
            control = ControlType.ABORT if abort else ControlType.COMMIT
            log.batches.append((offset, offset + 1, marker(offset, pid, control)))
            log.control_offsets.add(offset)
            if abort:
                log.aborted_offsets.update(written)
                log.aborted_txns.append((pid, written[0], offset))
            offset += 1
    stable_end = min((offsets[0] for offsets in open_txns.values()), default=offset)
    log.batches = [b for b in log.batches if b[1] <= stable_end]
    return log


@settings(max_examples=300, deadline=None)
@given(plan=steps, fetch_index=st.integers(0, 40), within=st.integers(0, 2))
def test_read_committed_returns_exactly_the_committed_records(plan, fetch_index, within):
    """Any fetch offset, the broker's aborted list for [fetch offset, end of the data)."""
    log = build_log(plan)
    if not log.batches:
        return
    first = min(fetch_index, len(log.batches) - 1)
    base, end, _ = log.batches[first]
    fetch_offset = min(base + within, end - 1)
    upper = log.batches[-1][1]
    data = b"".join(raw for _, _, raw in log.batches[first:])
    listed = [(pid, first_offset) for pid, first_offset, last in log.aborted_txns
              if last >= fetch_offset and first_offset < upper]
    part = PartitionRecords(TP, fetch_offset, data, aborted=listed, read_committed=True,
                            check_crcs=True)
    skipped = log.aborted_offsets | log.control_offsets
    assert drain(part) == [o for o in range(fetch_offset, upper) if o not in skipped]
    assert part.next_offset == upper
