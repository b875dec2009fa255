"""The batch API, ``Producer.send_many``: many records, one future, no per-record objects.

Kept apart from ``producer.py`` because its hot loop is organised differently: records are
serialized and size-checked in one pass, routed to partitions (keyless records in whole sticky
runs, from ``Partitioner.partition_keyless_many``), and then each partition's share is appended
by ``RecordAccumulator.append_many`` in one tight loop, with one run entry per batch instead of a
future per record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any

from sdk.producer.accumulator import now_ms
from sdk.producer.batch import BatchSink
from sdk.producer.interceptors import ProducerRecord
from sdk.producer.record_metadata import BatchMetadata
from sdk.records import RECORD_OVERHEAD, headers_size

if TYPE_CHECKING:
    from sdk.producer.accumulator import RecordAccumulator
    from sdk.producer.interceptors import InterceptorChain
    from sdk.producer.partitioner import Partitioner

__all__ = ["BatchSendMixin", "Headers", "headers_size"]

Headers = Sequence[tuple[str, bytes | None]]


class BatchSendMixin:
    """``send_many`` for ``Producer`` (which provides the attributes declared here)."""

    _accepting: bool
    _accumulator: RecordAccumulator | None
    _cluster: Any
    _interceptors: InterceptorChain | None
    _key_serializer: Any
    _value_serializer: Any
    _loop: asyncio.AbstractEventLoop | None
    _max_block_ms: float
    _max_record_size: int
    _partitioner: Partitioner

    if TYPE_CHECKING:

        def _check_running(self) -> None: ...
        def _check_running_after_wait(self, reserved: int) -> None: ...
        def _serialize(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]: ...
        def _too_large(self, size: int) -> None: ...
        async def _wait_for_topic(self, topic: str, partition: int | None, deadline: float) -> Any: ...

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
        by_partition, count, explicit, keyed = self._prepare_many(
            topic, records, partition, timestamp_ms, headers
        )
        sink = BatchSink(self._loop.create_future(), topic)  # type: ignore[union-attr]  # set once started
        sink.count = count
        try:
            if count:
                await self._append_many(topic, by_partition, explicit, keyed, timestamp_ms, sink)
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
    ) -> tuple[list[Any], int, set[int | None], bool]:
        """Serialize and size-check every record; one list for default partitioning (None)
        plus one per explicit partition. Entries: (key, value, size, headers). Also returns the
        count, the partitions asked for, and whether any record has a key."""
        interceptors = self._interceptors
        max_size = self._max_record_size
        header_size = headers_size(headers) if headers else 0
        plain = self._key_serializer is None and self._value_serializer is None and interceptors is None
        groups: dict[int | None, list[Any]] = {}
        default: list[Any] = []
        groups[partition] = default
        count = 0
        keyed = False
        for key, value in records:
            record_headers, group = headers, default
            if not plain:
                if interceptors is not None:
                    changed = interceptors.on_send(
                        ProducerRecord(topic, value, key, partition, timestamp_ms, headers)
                    )
                    key, value, record_headers = changed.key, changed.value, changed.headers
                    if changed.partition != partition:
                        group = groups.setdefault(changed.partition, [])
                key, value = self._serialize(topic, key, value)
            elif (key is not None and type(key) is not bytes) or (
                value is not None and type(value) is not bytes
            ):
                key, value = self._serialize(topic, key, value)
            size = RECORD_OVERHEAD + (0 if key is None else len(key)) + (0 if value is None else len(value))
            size += header_size if record_headers is headers else headers_size(record_headers or ())
            if size > max_size:
                self._too_large(size)
            group.append((key, value, size, record_headers))
            count += 1
            if key is not None:
                keyed = True
        return [(p, g) for p, g in groups.items() if g], count, set(groups), keyed

    async def _append_many(
        self,
        topic: str,
        groups: list[tuple[int | None, list[Any]]],
        explicit: set[int | None],
        keyed: bool,
        timestamp_ms: int | None,
        sink: BatchSink,
    ) -> None:
        deadline = now_ms() + self._max_block_ms
        meta = self._cluster.topics.get(topic)
        for wanted in explicit:
            if (
                meta is None
                or not meta.partition_ids
                or (wanted is not None and wanted not in meta.partitions)
            ):
                meta = await self._wait_for_topic(topic, wanted, deadline)
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        acc = self._accumulator
        assert acc is not None
        partitioner = self._partitioner
        for fixed, items in groups:
            # Route each record, then append each partition's records in one tight loop.
            routes: dict[int, list[Any]] = {}
            if fixed is not None:
                routes[fixed] = items
            elif not keyed:
                # All keyless: the partitioner hands out runs, no per-record call.
                all_ids, available = meta.partition_ids, meta.available
                sizes = [item[2] for item in items]
                position = 0
                for p, count in partitioner.partition_keyless_many(topic, all_ids, available, sizes):
                    routes.setdefault(p, []).extend(items[position : position + count])
                    position += count
            else:
                all_ids, available = meta.partition_ids, meta.available
                for item in items:
                    key = item[0]
                    if key is None:
                        p = partitioner.partition_keyless(topic, all_ids, available, item[2])
                    else:
                        p = partitioner.partition(topic, key, all_ids, available)
                    routed = routes.get(p)
                    if routed is None:
                        routes[p] = [item]
                    else:
                        routed.append(item)
            for p, routed in routes.items():
                total = sum(item[2] for item in routed)
                if acc.try_reserve(total):
                    if acc.append_many(topic, p, timestamp_ms, routed, sink):
                        await asyncio.sleep(0)
                    continue
                for item in routed:  # not enough room for all at once: one at a time, waiting
                    if not acc.try_reserve(item[2]):
                        await acc.reserve(item[2], max(0.0, deadline - now_ms()))
                        self._check_running_after_wait(item[2])
                    if acc.append_many(topic, p, timestamp_ms, [item], sink):
                        await asyncio.sleep(0)
