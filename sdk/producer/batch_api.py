"""The batch API, ``Producer.send_many``: many records, one future, no per-record objects.

Every record is serialized and sized first (so a bad one raises before anything is queued), then
appended by ``RecordAccumulator.try_append`` with the call's ``BatchSink`` in place of a future:
the records that land together in a batch form one run there, resolved with the batch.

aiokafka's direct batch control, ``create_batch()`` + ``BatchBuilder.append`` +
``send_batch(batch, topic, partition=)``, is built on it: a ``BatchBuilder`` collects records up
to ``batch_size`` bytes, and ``send_batch`` hands them to ``send_many`` for the one partition,
in order, so they are written together unless other sends to that partition come between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any, NamedTuple

from sdk.errors import IllegalStateError
from sdk.producer.batch import BatchSink
from sdk.producer.interceptors import ProducerRecord
from sdk.producer.record_metadata import BatchMetadata, RecordMetadata
from sdk.records import BATCH_OVERHEAD, headers_size, record_size_bound

if TYPE_CHECKING:
    from sdk.producer.accumulator import RecordAccumulator
    from sdk.producer.interceptors import InterceptorChain

__all__ = ["BatchBuilder", "BatchRecordMetadata", "BatchSendMixin", "Headers", "headers_size"]

Headers = Sequence[tuple[str, bytes | None]]


class BatchRecordMetadata(NamedTuple):
    """What ``BatchBuilder.append`` answers for an accepted record (aiokafka's fields):
    ``offset`` is its place in the batch (0, 1, ...), ``size`` its bytes at most, ``timestamp``
    the one given (None: the send time)."""

    offset: int
    size: int
    timestamp: int | None
    crc: None = None


class BatchBuilder:
    """Records for one ``send_batch`` (aiokafka's ``BatchBuilder``): ``append`` until it answers
    None (the next record would take the batch past ``batch_size`` bytes; the first record is
    always accepted), then ``send_batch`` it. Keys and values are bytes (not serialized)."""

    def __init__(self, batch_size: int) -> None:
        self._batch_size = batch_size
        self._size = BATCH_OVERHEAD
        self._closed = False
        #: (timestamp_ms or None, key, value, headers), in append order.
        self.records: list[tuple[int | None, bytes | None, bytes | None, Headers | None]] = []

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> BatchRecordMetadata | None:
        """Add a record; None (and nothing added) when it does not fit any more."""
        if self._closed:
            raise IllegalStateError("the batch is closed: create a new one with create_batch()")
        for name, field in (("key", key), ("value", value)):
            if field is not None and not isinstance(field, bytes | bytearray | memoryview):
                raise TypeError(f"a batch record's {name} must be bytes or None, not {type(field).__name__}")
        if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
            raise TypeError(f"timestamp must be milliseconds (int) or None, not {timestamp!r}")
        headers = list(headers) if headers else None
        size = record_size_bound(key, value, headers)
        if self.records and self._size + size > self._batch_size:
            return None
        self._size += size
        self.records.append((timestamp, bytes(key) if key is not None else None,
                             bytes(value) if value is not None else None, headers))
        return BatchRecordMetadata(len(self.records) - 1, size, timestamp)

    def close(self) -> None:
        """No more appends (``send_batch`` closes the batch too)."""
        self._closed = True

    def size(self) -> int:
        """Bytes of the batch so far (an upper bound)."""
        return self._size

    def record_count(self) -> int:
        return len(self.records)


class BatchSendMixin:
    """``send_many`` for ``Producer`` (which provides the attributes declared here)."""

    _accepting: bool
    _accumulator: RecordAccumulator | None
    _interceptors: InterceptorChain | None
    _loop: asyncio.AbstractEventLoop | None
    _plain: bool
    config: Any
    #: ``Producer._append_waiting``: the slow path of ``try_append`` (waits for metadata, memory).
    _append_waiting: Callable[..., Coroutine[Any, Any, None]]

    if TYPE_CHECKING:

        def _check_running(self) -> None: ...
        def _serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]: ...

    async def send_many(
        self,
        topic: str,
        records: Iterable[tuple[Any, Any]],
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[BatchMetadata]:
        """Queue many ``(key, value)`` records; returns ONE future for all of them.

        For throughput: records go straight into the partition batches, without a future or
        metadata object per record. The future resolves to ``BatchMetadata`` (the offset ranges
        the records got) when all are acknowledged, or fails with the first error; records in
        other batches may have been written even then. Keys are partitioned as in ``send``
        (``partition`` sends all to one partition); ``timestamp_ms`` and ``headers`` apply to every
        record (interceptors may change them per record). Serialization and size errors are
        raised before anything is queued.
        """
        if not self._accepting:
            self._check_running()
        prepared = self._prepare_many(topic, records, partition, timestamp_ms, headers)
        sink = BatchSink(self._loop.create_future(), topic)  # type: ignore[union-attr]  # set once started
        sink.count = len(prepared)
        try:
            if prepared:
                await self._append_many(topic, prepared, timestamp_ms, sink)
        finally:
            sink.seal()
        return sink.future

    def create_batch(self) -> BatchBuilder:
        """An empty ``BatchBuilder`` bounded by ``batch_size`` (aiokafka's ``create_batch``)."""
        return BatchBuilder(self.config.batch_size)

    async def send_batch(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[RecordMetadata]:
        """Queue ``batch``'s records for ``partition`` of ``topic`` (aiokafka's ``send_batch``);
        returns a future of the first record's ``RecordMetadata``, resolved when all are written.
        The batch is closed; an empty one is a ``ValueError``."""
        batch.close()
        if not batch.records:
            raise ValueError("send_batch() of an empty batch")
        now = _time_ns() // 1_000_000
        runs: list[tuple[int, Headers | None, list[tuple[bytes | None, bytes | None]]]] = []
        for timestamp, key, value, headers in batch.records:
            timestamp = now if timestamp is None else timestamp
            if runs and runs[-1][0] == timestamp and runs[-1][1] == headers:
                runs[-1][2].append((key, value))
            else:
                runs.append((timestamp, headers, [(key, value)]))
        futures = [
            await self.send_many(topic, records, partition=partition, timestamp_ms=timestamp, headers=headers)
            for timestamp, headers, records in runs
        ]
        first_timestamp = runs[0][0]

        async def first_record() -> RecordMetadata:
            results = await asyncio.gather(*futures)
            first = results[0].offsets(partition)
            return RecordMetadata(topic, partition, first[0] if first else -1, first_timestamp)

        return asyncio.ensure_future(first_record())

    def _prepare_many(
        self,
        topic: str,
        records: Iterable[tuple[Any, Any]],
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
    ) -> list[tuple[int | None, bytes | None, bytes | None, Headers | None, int]]:
        """Every record intercepted, serialized and sized: ``(partition, key, value, headers,
        size)`` in ``try_append``'s order."""
        interceptors = self._interceptors
        record_size = self._accumulator.record_size  # type: ignore[union-attr]  # set once started
        plain = self._plain
        prepared = []
        for key, value in records:
            record_partition, record_headers = partition, headers
            if interceptors is not None:
                changed = interceptors.on_send(
                    ProducerRecord(topic, value, key, partition, timestamp_ms, headers)
                )
                key, value = changed.key, changed.value
                record_partition, record_headers = changed.partition, changed.headers
            if not plain or (key is not None and type(key) is not bytes) or (
                value is not None and type(value) is not bytes
            ):
                key, value = self._serialize(topic, key, value)
            size = record_size(key, value, record_headers)
            prepared.append((record_partition, key, value, record_headers, size))
        return prepared

    async def _append_many(
        self,
        topic: str,
        prepared: list[tuple[int | None, bytes | None, bytes | None, Headers | None, int]],
        timestamp_ms: int | None,
        sink: BatchSink,
    ) -> None:
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        acc = self._accumulator
        assert acc is not None
        try_append = acc.try_append
        sink.records = prepared
        end = len(prepared)
        while sink.next < end:
            # try_append takes this record and the following ones that go the same way.
            partition, key, value, headers, size = prepared[sink.next]
            if try_append(topic, partition, key, value, headers, timestamp_ms, sink, size) is None:
                await self._append_waiting(topic, partition, key, value, headers, timestamp_ms, sink, size)
            if acc.filled:
                # A batch just filled up: let the sender put it on the wire.
                acc.filled = False
                await asyncio.sleep(0)
