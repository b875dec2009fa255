"""Hypothesis state machine: random appends, reads, deletions, clean and unclean reopens (with
torn tails) never lose or alter an acknowledged batch."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference_broker.log import AppendOrigin, LogConfig, PartitionLog
from sdk.protocol.errors import OffsetOutOfRangeError
from sdk.records import Compression, RecordBatchBuilder, iter_batches

PID = 77
CODECS = st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD])


def build(values: list[bytes], ts: int, codec: Compression, seq: int = -1) -> bytes:
    pid, epoch = (PID, 0) if seq >= 0 else (-1, -1)
    builder = RecordBatchBuilder(codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i, value in enumerate(values):
        builder.append(ts + i, None, value)
    return builder.build()


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logmachine-"))
        self.directory = self.tmp / "t-0"
        self.config = LogConfig(segment_bytes=900, index_interval_bytes=120, retention_ms=-1)
        self.plog = PartitionLog.open(self.directory, self.config, now_ms=0)
        #: base offset -> (last offset, values) of every acknowledged batch
        self.acked: dict[int, tuple[int, list[bytes]]] = {}
        self.end = 0
        self.start = 0
        self.counter = 0
        self.seq = 0
        #: the last idempotent batch: (blob, base offset, last offset)
        self.last_idempotent: tuple[bytes, int, int] | None = None

    def teardown(self) -> None:
        try:
            self.check_everything()
        finally:
            self.plog._close_files()
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(
        batches=st.lists(st.lists(st.binary(max_size=120), min_size=1, max_size=6), min_size=1, max_size=3),
        codec=CODECS,
    )
    def append(self, batches: list[list[bytes]], codec: Compression) -> None:
        blob = b"".join(build(values, 1_000 + self.counter, codec) for values in batches)
        self.counter += 1
        origin = AppendOrigin.CLIENT if len(batches) == 1 else AppendOrigin.COORDINATOR
        result = self.plog.append(blob, now_ms=0, origin=origin)
        assert result.base_offset == self.end
        for values in batches:
            self.acked[self.end] = (self.end + len(values) - 1, values)
            self.end += len(values)
        assert result.last_offset == self.end - 1

    @rule(values=st.lists(st.binary(max_size=50), min_size=1, max_size=4))
    def append_idempotent(self, values: list[bytes]) -> None:
        blob = build(values, 2_000, Compression.NONE, seq=self.seq)
        result = self.plog.append(blob, now_ms=0)
        assert not result.duplicate and result.base_offset == self.end
        self.acked[self.end] = (self.end + len(values) - 1, values)
        self.end += len(values)
        self.seq += len(values)
        self.last_idempotent = (blob, result.base_offset, result.last_offset)

    @precondition(lambda self: self.last_idempotent is not None)
    @rule()
    def retry_idempotent(self) -> None:
        assert self.last_idempotent is not None
        blob, base, last = self.last_idempotent
        result = self.plog.append(blob, now_ms=0)
        assert result.duplicate and (result.base_offset, result.last_offset) == (base, last)

    @rule(limit=st.integers(0, 4_000))
    def retention_by_size(self, limit: int) -> None:
        self.plog.update_config(dataclasses.replace(self.config, retention_bytes=limit))
        self.plog.apply_retention(0)
        self.plog.update_config(self.config)
        assert self.plog.log_start_offset >= self.start
        size = self.plog.size_in_bytes
        assert size <= limit or size - self.plog.segments[0].size < limit  # Kafka's rule
        self.start = self.plog.log_start_offset

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data(), max_bytes=st.integers(1, 3_000), min_one=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        result = self.plog.read(offset, max_bytes, min_one_batch=min_one)
        batches = list(iter_batches(bytes(result.data)))
        if batches:
            assert batches[0].base_offset <= offset <= batches[0].last_offset or (
                batches[0].base_offset >= offset)
            assert len(result.data) <= max_bytes or (len(batches) == 1 and min_one)
        elif offset < self.end:
            assert not min_one
        for batch in batches:
            batch.validate()
            assert self.acked[batch.base_offset] == (batch.last_offset, [r.value for r in batch])

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.start, self.end))
        assert self.plog.delete_records_before(target) == max(target, self.start)
        self.start = max(target, self.start)

    @rule()
    def reopen_clean(self) -> None:
        self.plog.close()
        self.plog = PartitionLog.open(self.directory, self.config, now_ms=0)

    @rule(junk=st.binary(max_size=200), flush=st.booleans())
    def crash_and_reopen(self, junk: bytes, flush: bool) -> None:
        if flush:
            self.plog.maybe_flush(0)
        active = self.plog.active_segment.log_path
        self.plog._close_files()  # kill -9: no flush, no snapshot, no marker
        with active.open("ab") as f:
            f.write(junk)  # a torn write of an unacknowledged append
        self.plog = PartitionLog.open(self.directory, self.config, now_ms=0)

    @invariant()
    def offsets_match(self) -> None:
        assert self.plog.log_end_offset == self.end
        assert self.plog.log_start_offset == self.start
        assert not self.plog.corruptions

    def check_everything(self) -> None:
        offset = self.start
        seen = []
        while offset < self.end:
            result = self.plog.read(offset, 2_000)
            batches = list(iter_batches(bytes(result.data)))
            assert batches
            for batch in batches:
                assert self.acked[batch.base_offset] == (batch.last_offset, [r.value for r in batch])
                seen.append(batch.base_offset)
            offset = result.next_offset
        expected = [b for b, (last, _) in sorted(self.acked.items()) if last >= self.start]
        assert seen == expected
        with pytest.raises(OffsetOutOfRangeError):
            self.plog.read(self.start - 1, 10)
        with pytest.raises(OffsetOutOfRangeError):
            self.plog.read(self.end + 1, 10)


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
