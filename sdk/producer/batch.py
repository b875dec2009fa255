"""A batch of records for one partition, from first append to the broker's answer.

Records are encoded into the ``RecordBatchBuilder`` as they are appended; the batch remembers, per
record, only what its ``RecordMetadata`` needs. Records added by ``send_many`` are kept as runs
(one entry per run of consecutive offsets) so a large batch API call costs one future, not one
per record.

Records from ``Producer.send`` and the synchronous facade have lazy futures
(``sdk.producer.futures``): each knows the batch's shared ``outcome`` and its offset delta, so
completing the batch updates the outcome once instead of resolving every future.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sdk.producer.futures import BatchOutcome, LazyRecordFuture, resolve_futures
from sdk.producer.interceptors import InterceptorChain
from sdk.producer.record_metadata import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    BatchMetadata,
    OffsetRange,
    RecordMetadata,
)
from sdk.records import RecordBatch, RecordBatchBuilder

__all__ = ["BatchSink", "ProducerBatch", "increment_sequence"]

NO_SEQUENCE = -1
_MAX_SEQUENCE = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: int32 sequences wrap to 0 after 2**31 - 1."""
    if sequence > _MAX_SEQUENCE - increment:
        return increment - (_MAX_SEQUENCE - sequence) - 1
    return sequence + increment


class BatchSink:
    """One future for all records of a ``send_many`` call, resolved when every run is written."""

    __slots__ = ("count", "error", "future", "next", "pending_runs", "ranges", "records", "sealed", "topic")

    def __init__(self, future: Any, topic: str):
        self.future = future
        self.topic = topic
        #: The call's records ``(partition, key, value, headers, size)``, serialized and sized,
        #: and the index of the next one to append (``RecordAccumulator.try_append`` appends a
        #: run of them at a time and moves it on).
        self.records: list[tuple[Any, ...]] | None = None
        self.next = 0
        self.count = 0
        self.pending_runs = 0
        self.ranges: list[OffsetRange] = []
        self.error: BaseException | None = None
        self.sealed = False  # all records appended: resolve when the last run completes

    def run_done(self, partition: int, base_offset: int, count: int) -> None:
        self.ranges.append(OffsetRange(partition, base_offset, count))
        self.pending_runs -= 1
        self._maybe_resolve()

    def run_failed(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.pending_runs -= 1
        self._maybe_resolve()

    def seal(self) -> None:
        self.sealed = True
        self._maybe_resolve()

    def _maybe_resolve(self) -> None:
        if not self.sealed or self.pending_runs or self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            ranges = sorted(self.ranges, key=lambda r: (r.partition, r.base_offset))
            self.future.set_result(BatchMetadata(self.topic, self.count, tuple(ranges)))


class ProducerBatch:
    """Records for one topic-partition that travel in one Produce request."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "created_ms",
        "done_waiters",
        "full",
        "futures",
        "last_attempt_ms",
        "outcome",
        "partition",
        "payload",
        "producer_epoch",
        "producer_id",
        "reserved",
        "runs",
        "sequence_reset",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        builder: RecordBatchBuilder,
        created_ms: float,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.created_ms = created_ms
        #: Shared by the records' lazy futures; ``loop`` is where their callbacks run.
        self.outcome = BatchOutcome(topic, partition, loop)
        #: The lazy futures of this batch's records (their outcome is ``self.outcome``).
        self.futures: list[LazyRecordFuture] = []
        #: [sink, first_delta, count] per run of ``send_many`` records.
        self.runs: list[list[Any]] = []
        self.reserved = 0  # bytes of the producer's memory bound this batch holds
        self.full = False  # no more appends: full, or drained
        self.attempts = 0
        self.last_attempt_ms = 0.0
        self.payload: bytes | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.sequence_reset = False
        self.done_waiters: list[asyncio.Future[None]] | None = None

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
            f"seq={self.base_sequence} epoch={self.producer_epoch} attempts={self.attempts}>"
        )

    @property
    def record_count(self) -> int:
        return self.builder.record_count

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.record_count - 1)

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    def estimated_size(self) -> int:
        return len(self.payload) if self.payload is not None else self.builder.estimated_size()

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp idempotence fields; the wire bytes are rebuilt if they were built already."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.builder.set_producer_state(producer_id, producer_epoch, base_sequence)
        self.payload = None

    def close(self) -> bytes:
        """Stop appends and return the wire bytes (built, and compressed, once)."""
        self.full = True
        payload = self.payload
        if payload is None:
            payload = self.payload = self.builder.build()
        return payload

    def split(self) -> list[ProducerBatch]:
        """Two batches holding this batch's records in order (for a broker that rejected it as
        too large), with the records' sinks, sequences and reserved memory carried over."""
        records = list(RecordBatch(self.close()))
        middle = len(records) // 2
        halves: list[ProducerBatch] = []
        for part in (records[:middle], records[middle:]):
            builder = RecordBatchBuilder(self.builder.compression)
            for record in part:
                builder.append(record.timestamp, record.key, record.value, record.headers)
            half = ProducerBatch(self.topic, self.partition, builder, self.created_ms, self.outcome.loop)
            half.full = True
            halves.append(half)
        first, second = halves
        # Lazy futures move to the half that holds their record (a cancelled one keeps its own
        # outcome: nothing to move).
        outcome = self.outcome
        for half in halves:
            half.outcome.scan = outcome.scan
        for future in self.futures:
            delta = future._delta
            half = first if delta < middle else second
            if future._outcome is outcome:
                future._outcome = half.outcome
                if future._callbacks is not None:
                    if half.outcome.watchers is None:
                        half.outcome.watchers = []
                    half.outcome.watchers.append(future)
            future._delta = delta if delta < middle else delta - middle
            half.futures.append(future)
        for sink, start, count in self.runs:
            end = start + count
            if end <= middle:
                first.runs.append([sink, start, count])
            elif start >= middle:
                second.runs.append([sink, start - middle, count])
            else:
                first.runs.append([sink, start, middle - start])
                second.runs.append([sink, 0, end - middle])
                sink.pending_runs += 1
        first.reserved = self.reserved * middle // len(records)
        second.reserved = self.reserved - first.reserved
        self.reserved = 0
        if self.has_sequence:
            first.set_producer_state(self.producer_id, self.producer_epoch, self.base_sequence)
            second.set_producer_state(
                self.producer_id, self.producer_epoch, increment_sequence(self.base_sequence, middle)
            )
        second.done_waiters, self.done_waiters = self.done_waiters, None
        self.runs, self.futures = [], []
        return halves

    # -- completion -----------------------------------------------------------------------------

    def complete(
        self,
        base_offset: int,
        log_append_time: int,
        log_start_offset: int,
        interceptors: InterceptorChain | None,
    ) -> None:
        """Resolve every record's future, and the runs' sinks, with their metadata."""
        partition = self.partition
        known = base_offset >= 0
        append_time = log_append_time if log_append_time is not None and log_append_time >= 0 else None
        outcome = self.outcome
        outcome.base_offset = base_offset if known else -1
        outcome.log_append_time = -1 if append_time is None else append_time
        outcome.log_start_offset = log_start_offset
        futures = self.futures
        # One update for all lazy futures; only those someone waits on are touched.
        resolve_futures(outcome, futures, None)
        if interceptors is not None:
            for future in futures:
                interceptors.on_acknowledgement(future._metadata(outcome), None)
        for sink, first_delta, count in self.runs:
            sink.run_done(partition, base_offset + first_delta if known else -1, count)
            if interceptors is not None:
                self._acknowledge_run(interceptors, first_delta, count, base_offset, append_time, None)
        self._finish()

    def fail(self, error: BaseException, interceptors: InterceptorChain | None) -> None:
        """Fail every record's future, and the runs' sinks, with ``error``."""
        resolve_futures(self.outcome, self.futures, error)
        if interceptors is not None:
            for future in self.futures:
                metadata = RecordMetadata(
                    self.topic,
                    self.partition,
                    -1,
                    future._timestamp,
                    CREATE_TIME,
                    -1,
                    future._key_size,
                    future._value_size,
                )
                interceptors.on_acknowledgement(metadata, error)
        for sink, first_delta, count in self.runs:
            sink.run_failed(error)
            if interceptors is not None:
                self._acknowledge_run(interceptors, first_delta, count, -1, None, error)
        self._finish()

    def _acknowledge_run(
        self,
        interceptors: InterceptorChain,
        first_delta: int,
        count: int,
        base_offset: int,
        append_time: int | None,
        error: BaseException | None,
    ) -> None:
        ts_type = CREATE_TIME if append_time is None else LOG_APPEND_TIME
        for delta in range(first_delta, first_delta + count):
            offset = base_offset + delta if base_offset >= 0 else -1
            metadata = RecordMetadata(self.topic, self.partition, offset, append_time or -1, ts_type)
            interceptors.on_acknowledgement(metadata, error)

    def _finish(self) -> None:
        self.futures = []
        self.runs = []
        waiters, self.done_waiters = self.done_waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def wait_done(self) -> asyncio.Future[None]:
        """A future completing when the batch is acknowledged or failed (for ``flush``)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.done_waiters is None:
            self.done_waiters = []
        self.done_waiters.append(future)
        return future
