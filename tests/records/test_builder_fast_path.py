"""The Python record writer's fast path against its general path, and against aiokafka's reader.

The fast path of ``_writer_py.RecordsWriter.append`` (no headers, table-sized varints) and
``_append_general`` must produce the same bytes and the same accept/refuse decisions for every
record; records that leave the fast path's range part-way through a batch (a long value, a
negative or large timestamp delta, the 8192nd record) must come out exactly as if every record had
taken the general path. (tests/records/test_writer.py holds the C writer to the Python one.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import BATCH_HEADER_SIZE, RecordBatch
from sdk.records.varint import ENCODED_CACHE_SIZE

from .oracles import AioBatch
from .writers import python_builder

if TYPE_CHECKING:
    from sdk.records import RecordBatchBuilder
else:
    RecordBatchBuilder = python_builder()


class GeneralOnly(RecordBatchBuilder):
    """A builder whose every append takes the general path: the reference for the fast one."""

    __slots__ = ()

    def append(self, timestamp_ms, key, value, headers=(), **_ignored):  # type: ignore[no-untyped-def]
        count = self._count
        if timestamp_ms is None:
            raise AssertionError("the equivalence tests always give timestamps")
        delta = timestamp_ms - self._base_timestamp if count else 0
        return self._append_general(count, timestamp_ms, delta, key, value, headers)


# Sizes around the varint table's edge (8192) and the 1/2-byte varint boundary (64), so records
# move in and out of the fast path within one batch.
sizes = st.sampled_from([0, 1, 63, 64, 100, 8000, ENCODED_CACHE_SIZE - 1, ENCODED_CACHE_SIZE, 9000])
field = st.none() | st.binary(max_size=80) | sizes.map(lambda n: b"x" * n)
deltas = st.sampled_from([0, 1, 63, 64, 1023, 1024, 5000, -1, -700])
hdrs = st.sampled_from([(), [], [("h", b"v")], [("k", None), ("é", b"")]])
record = st.tuples(deltas, field, field, hdrs)


def _both(batch_size: int | None, records: list) -> tuple[RecordBatchBuilder, RecordBatchBuilder, list]:
    fast = RecordBatchBuilder(batch_size=batch_size, producer_id=3, producer_epoch=1, base_sequence=0)
    slow = GeneralOnly(batch_size=batch_size, producer_id=3, producer_epoch=1, base_sequence=0)
    answers = []
    timestamp = 1_700_000_000_000
    for delta, key, value, headers in records:
        timestamp += delta
        got = fast.append(timestamp, key, value, headers)
        assert got == slow.append(timestamp, key, value, headers)
        answers.append(got)
        assert fast.estimated_size() == slow.estimated_size()
        assert fast.record_count == slow.record_count
    return fast, slow, answers


@settings(max_examples=150, deadline=None)
@given(st.lists(record, max_size=40), st.sampled_from([None, 200, 2000, 20_000]))
def test_fast_and_general_paths_build_the_same_bytes(records: list, batch_size: int | None) -> None:
    fast, slow, answers = _both(batch_size, records)
    data = fast.build()
    assert data == slow.build()
    # The batch limit refuses records the same way; offset deltas stay dense.
    accepted = [a for a in answers if a is not None]
    assert accepted == list(range(len(accepted)))
    if accepted:
        theirs = list(AioBatch(data))
        ours = list(RecordBatch(data))
        assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
            (r.offset, r.timestamp, r.key, r.value) for r in ours
        ]


def test_offset_deltas_past_the_table_leave_the_fast_path() -> None:
    records = [(1, None, b"v", ())] * (ENCODED_CACHE_SIZE + 5)
    fast, slow, answers = _both(None, records)
    assert answers[-1] == ENCODED_CACHE_SIZE + 4
    assert fast.build() == slow.build()


def test_typical_producer_records_are_read_back_by_aiokafka() -> None:
    builder = RecordBatchBuilder(batch_size=16384)
    timestamp = 1_700_000_000_000
    appended = []
    for i in range(1000):
        key = None if i % 3 else b"key-%d" % i
        value = None if i % 17 == 5 else b"v" * (i % 150)
        if builder.append(timestamp + i // 40, key, value) is None:
            break
        appended.append((timestamp + i // 40, key, value))
    assert 100 < len(appended) < 1000  # the 16 KiB limit stopped it
    assert builder.estimated_size() <= 16384
    data = builder.build()
    assert len(data) == builder.estimated_size()
    theirs = AioBatch(data)
    assert theirs.validate_crc()
    assert [(r.timestamp, r.key, r.value) for r in theirs] == appended


@pytest.mark.parametrize("bad", ["text", 42])
def test_a_wrong_type_on_the_fast_path_leaves_no_trace(bad: object) -> None:
    builder = RecordBatchBuilder()
    builder.append(5, None, b"first")
    before = builder.build()
    for key, value in ((bad, b"v"), (None, bad)):
        with pytest.raises(TypeError):
            builder.append(6, key, value)  # type: ignore[arg-type]
    assert builder.build() == before
    assert builder.record_count == 1
    assert builder.estimated_size() == len(before) > BATCH_HEADER_SIZE
