"""The batch API, ``Producer.send_many``: many records, one future, no per-record objects.

Every record is serialized and sized first (so a bad one raises before anything is queued), then
appended by ``RecordAccumulator.try_append`` with the call's ``BatchSink`` in place of a future:
the records that land together in a batch form one run there, resolved with the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any

from sdk.producer.batch import BatchSink
from sdk.producer.interceptors import ProducerRecord
from sdk.producer.record_metadata import BatchMetadata
from sdk.records import headers_size

if TYPE_CHECKING:
    from sdk.producer.accumulator import RecordAccumulator
    from sdk.producer.interceptors import InterceptorChain

__all__ = ["BatchSendMixin", "Headers", "headers_size"]

Headers = Sequence[tuple[str, bytes | None]]


class BatchSendMixin:
    """``send_many`` for ``Producer`` (which provides the attributes declared here)."""

    _accepting: bool
    _accumulator: RecordAccumulator | None
    _interceptors: InterceptorChain | None
    _loop: asyncio.AbstractEventLoop | None
    _plain: bool
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
