"""RecordAccumulator: per-partition queues of batches, and the producer's memory bound.

``try_append`` is the one place records enter batches (``send``, ``send_many`` and the sync
facade all call it): it sizes the record, takes its memory, picks its partition (the sticky route
of keyless records, or the partitioner) and appends it to the partition's open batch. The sender asks
``ready()`` which brokers have something worth sending (a full batch, a batch older than
``linger_ms``, a retry whose backoff passed, or anything at all while flushing, closing or when
``send`` is blocked on memory) and ``drain()``s one batch per partition into one Produce request
per broker, up to ``max_request_size``, as Kafka's Java RecordAccumulator does.

Memory is accounted per record (its encoded size estimate) and released when its batch completes;
a ``send`` that does not fit waits, first come first served, up to ``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata
from sdk.errors import BufferExhaustedError, InvalidPartitionError, RecordTooLargeError
from sdk.producer.batch import BatchSink, ProducerBatch
from sdk.producer.futures import LazyRecordFuture, RecordFuture
from sdk.producer.partitioner import DefaultPartitioner, Partitioner
from sdk.records import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    Compression,
    RecordBatchBuilder,
)
from sdk.records.writer import RecordSizer

if TYPE_CHECKING:
    from sdk.producer.transaction_manager import TransactionManager

__all__ = ["BATCH_OVERHEAD", "RECORD_OVERHEAD", "RecordAccumulator"]


Deque = deque[ProducerBatch]
HeadersArg = Iterable[tuple[str, bytes | None]] | None

_new_object = object.__new__


def now_ms() -> float:
    return time.monotonic() * 1000


class _StickyRoute:
    """Where a topic's keyless records go while nothing changes: ``sticky`` is the
    DefaultPartitioner's state for the topic and ``batch`` the open batch of its partition. The
    route holds while ``cluster.version == version``, ``sticky.used_up`` is false and
    ``batch.full`` is false."""

    __slots__ = ("batch", "sticky", "version")

    def __init__(self) -> None:
        self.sticky: Any = None
        self.batch: Any = None
        self.version = -1


class RecordAccumulator:
    """Batches by topic-partition; memory bound; ready/drain/expire for the sender."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: float,
        compression: Compression,
        buffer_memory: int,
        delivery_timeout_ms: float,
        retry_backoff: ExponentialBackoff,
        max_in_flight_per_partition: int | None = None,
        on_ready: Callable[[], None] | None = None,
        cluster: ClusterMetadata | None = None,
        partitioner: Partitioner | None = None,
        max_request_size: int = 1048576,
    ):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff = retry_backoff
        self.on_ready = on_ready or (lambda: None)
        #: The metadata ``try_append`` routes records by, and the partitioner that chooses.
        self.cluster = cluster if cluster is not None else ClusterMetadata()
        self.partitioner = partitioner if partitioner is not None else DefaultPartitioner(batch_size)
        #: The partitioner when it is exactly the DefaultPartitioner, whose sticky state the fast
        #: path follows (a subclass may change the rules, so it always gets asked).
        self._sticky_partitioner = (
            self.partitioner if type(self.partitioner) is DefaultPartitioner else None
        )
        #: Sticky routes for keyless records, per topic (see ``_update_route``).
        self._routes: dict[str, _StickyRoute] = {}
        self.max_request_size = max_request_size
        #: Largest record (framing included) allowed by max_request_size and buffer_memory.
        self.max_record_size = min(max_request_size - BATCH_OVERHEAD, buffer_memory)
        #: Bytes a record can take in a batch (Kafka's upper bound, ``record_size_bound``), the
        #: one size check of every send: ``RecordTooLargeError`` if the record could never fit in
        #: a request or in ``buffer_memory``. One C call (the record writer's sizer, when it is
        #: built), an instance attribute and not a method so a call is not a method lookup.
        self.record_size: Callable[[bytes | None, bytes | None, HeadersArg], int] = RecordSizer(
            self.max_record_size, self._record_too_large
        ).size
        #: Set when an append sealed a full batch (the producer then lets the sender run).
        self.filled = False
        #: The loop the records' futures run their callbacks on (None when built outside one,
        #: as unit tests do with plain sinks).
        self.loop: asyncio.AbstractEventLoop | None
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self._batches: dict[str, dict[int, Deque]] = {}
        #: The batch still taking records, per topic and partition (``try_append``'s fast path).
        self.open: dict[str, dict[int, ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        #: Bytes reserved, and sends waiting for room: public for the producer's inlined fast path.
        self.used = 0
        self.waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._flushes = 0
        self._closing = False
        self._drain_index: dict[int, int] = {}
        #: Partitions with a batch on the wire, when order needs one request at a time per partition.
        self._muted: set[tuple[str, int]] | None = set() if max_in_flight_per_partition == 1 else None
        #: With idempotence, per partition with batches on the wire: the broker they went to and
        #: how many they are.
        self._on_wire: dict[tuple[str, int], list[int]] = {}

    # -- memory ---------------------------------------------------------------------------------

    @property
    def memory_used(self) -> int:
        return self.used

    def try_reserve(self, size: int) -> bool:
        """Take ``size`` bytes of the bound if they are free and nobody is queued before us."""
        if self.waiters or self.used + size > self.buffer_memory:
            return False
        self.used += size
        return True

    async def reserve(self, size: int, timeout_ms: float) -> None:
        """Wait for ``size`` bytes; ``BufferExhaustedError`` after ``timeout_ms``."""
        if self.try_reserve(size):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self.waiters.append(entry)
        self.on_ready()  # a blocked send makes every partition ready: free memory sooner
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await future
        except TimeoutError:
            if entry in self.waiters:
                self.waiters.remove(entry)
                self._grant()
            elif future.done() and not future.cancelled():
                self.release(size)  # granted in the same instant the wait expired
            raise BufferExhaustedError(
                f"{size} bytes did not become free in the producer's buffer_memory "
                f"({self.buffer_memory} bytes, {self.used} in use) within max_block_ms={timeout_ms:.0f}"
            ) from None
        except BaseException:
            if entry in self.waiters:
                self.waiters.remove(entry)
            elif future.done() and not future.cancelled():
                self.release(size)
            raise

    def release(self, size: int) -> None:
        self.used -= size
        if self.waiters:
            self._grant()

    def _grant(self) -> None:
        waiters = self.waiters
        while waiters:
            size, future = waiters[0]
            if future.done():
                waiters.popleft()
                continue
            if self.used + size > self.buffer_memory:
                return
            waiters.popleft()
            self.used += size
            future.set_result(None)

    # -- appending ------------------------------------------------------------------------------

    def _new_batch(self, topic: str, partition: int, dq: Deque) -> ProducerBatch:
        builder = RecordBatchBuilder(self.compression, batch_size=self.batch_size)
        batch = ProducerBatch(topic, partition, builder, now_ms(), self.loop)
        dq.append(batch)
        self._incomplete.add(batch)
        open_parts = self.open.get(topic)
        if open_parts is None:
            open_parts = self.open[topic] = {}
        open_parts[partition] = batch
        return batch

    def _seal(self, batch: ProducerBatch) -> None:
        """No more appends to ``batch`` (full, or about to be sent)."""
        batch.full = True
        open_parts = self.open.get(batch.topic)
        if open_parts is not None and open_parts.get(batch.partition) is batch:
            del open_parts[batch.partition]

    def _deque(self, topic: str, partition: int) -> Deque:
        parts = self._batches.get(topic)
        if parts is None:
            parts = self._batches[topic] = {}
        dq = parts.get(partition)
        if dq is None:
            dq = parts[partition] = deque()
        return dq

    def _record_too_large(self, size: int) -> None:
        """Raise the ``RecordTooLargeError`` for a record of ``size`` bytes (over ``max_record_size``)."""
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise RecordTooLargeError(
                f"the record is {size + BATCH_OVERHEAD} bytes serialized, larger than "
                f"max_request_size ({self.max_request_size})"
            )
        raise RecordTooLargeError(
            f"the record is {size} bytes serialized, larger than buffer_memory ({self.buffer_memory})"
        )

    def try_append(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: HeadersArg,
        timestamp_ms: int | None,
        future: LazyRecordFuture | BatchSink | None,
        size: int = -1,
        reserved: bool = False,
    ) -> LazyRecordFuture | BatchSink | None:
        """Append one serialized record to its partition's open batch (opening one if needed) and
        return what tracks it: ``future`` attached to the batch (a new ``RecordFuture`` when None),
        or a ``BatchSink`` whose run the record joins. The only code that puts records in batches.

        ``size`` is ``record_size``'s answer when the caller has it; ``reserved`` says its memory
        is taken already (``reserve``). Returns None, with nothing changed, when the record must
        wait: for room in ``buffer_memory`` or for the topic's (or the partition's) metadata.
        Raises ``RecordTooLargeError`` and, for a negative partition, ``InvalidPartitionError``.

        The per-record fast path (Java's ``RecordAccumulator.append``): a keyless record rides
        the topic's sticky route (the DefaultPartitioner's sticky partition and its open batch,
        see ``_StickyRoute``), a record for a given partition joins that partition's open batch;
        only a record that opens a batch or switches partitions asks metadata and partitioner.
        """
        if size < 0:
            size_of = self.record_size  # a plain attribute load; see __init__
            size = size_of(key, value, headers)
        if not reserved and (self.waiters or self.used + size > self.buffer_memory):
            return None
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        batch = None
        if partition is None:
            route = self._routes.get(topic) if key is None else None
            if route is not None and route.version == self.cluster.version:
                sticky = route.sticky
                batch = route.batch
                if not sticky.used_up and not batch.full:
                    delta = batch.builder.append(timestamp_ms, None, value, headers)
                    if delta is not None:
                        # The partitioner's accounting, as ``partition_keyless`` does it.
                        produced = sticky.produced + size
                        sticky.produced = produced
                        if produced >= self.batch_size:
                            sticky.used_up = True
                    else:
                        batch = None
                else:
                    batch = None
        else:
            parts = self.open.get(topic)
            batch = parts.get(partition) if parts is not None else None
            if batch is not None:
                delta = batch.builder.append(timestamp_ms, key, value, headers)
                if delta is None:
                    batch = None
        if batch is None:
            # The general path: the partition from metadata and the partitioner, then its open
            # batch or a new one (sealing a full one); a keyless record renews the sticky route.
            meta = self.cluster.topics.get(topic)
            if meta is None or not meta.partition_ids:
                return None
            keyless = False
            if partition is None:
                if key is None:
                    partition = self.partitioner.partition_keyless(
                        topic, meta.partition_ids, meta.available, size
                    )
                    keyless = True
                else:
                    partition = self.partitioner.partition(topic, key, meta.partition_ids, meta.available)
            elif partition not in meta.partitions:
                if partition < 0:
                    raise InvalidPartitionError(f"partition {partition} is negative")
                return None
            dq = self._deque(topic, partition)
            if dq and not dq[-1].full:
                batch = dq[-1]
                delta = batch.builder.append(timestamp_ms, key, value, headers)
                if delta is None:
                    self._seal(batch)
                    self.filled = True
            if batch is None or delta is None:
                batch = self._new_batch(topic, partition, dq)
                delta = batch.builder.append(timestamp_ms, key, value, headers)
                assert delta is not None, "an empty batch takes any record"
                self.on_ready()
            if keyless and self._sticky_partitioner is not None:
                self._update_route(topic, partition, batch)
        if not reserved:
            self.used += size
        batch.reserved += size
        if future is None:
            # RecordFuture(), its fields set here: cheaper than calling its constructor.
            future = _new_object(RecordFuture)
            future._callbacks = None
        elif type(future) is BatchSink:
            runs = batch.runs
            run = runs[-1] if runs else None
            if run is None or run[0] is not future or run[1] + run[2] != delta:
                run = [future, delta, 0]
                runs.append(run)
                future.pending_runs += 1
            run[2] += 1 + self._continue_run(topic, batch, future, timestamp_ms)
            return future
        elif type(future) is not RecordFuture:
            batch.outcome.scan = True  # see BatchOutcome.scan
        future._outcome = batch.outcome  # type: ignore[union-attr]  # a LazyRecordFuture here
        future._delta = delta  # type: ignore[union-attr]
        future._timestamp = timestamp_ms  # type: ignore[union-attr]
        future._key_size = -1 if key is None else len(key)  # type: ignore[union-attr]
        future._value_size = -1 if value is None else len(value)  # type: ignore[union-attr]
        batch.futures.append(future)  # type: ignore[arg-type]
        return future

    def _continue_run(self, topic: str, batch: ProducerBatch, sink: BatchSink, timestamp_ms: int) -> int:
        """After ``try_append`` put the record ``sink.records[sink.next]`` in ``batch``: append
        the call's next records to the same batch while they take the same way (the same given
        partition, or keyless records while the sticky route stays on this batch) and memory is
        free, so a ``send_many`` call costs one ``try_append`` per batch, not per record. Advances
        ``sink.next`` past them and returns how many followed the first."""
        records = sink.records
        start = index = sink.next + 1
        if records is None:
            sink.next = index
            return 0
        wanted = records[index - 1][0]
        route = None
        produced = limit = 0
        if wanted is None:
            route = self._routes.get(topic)
            if route is None or route.batch is not batch or records[index - 1][1] is not None:
                sink.next = index
                return 0
            produced, limit = route.sticky.produced, self.batch_size
        # Free memory (none while someone waits for it) bounds the run, and with a sticky route
        # so does what is left of the sticky partition's share.
        room = -1 if self.waiters else self.buffer_memory - self.used
        index, added = batch.builder.append_run(
            records, index, timestamp_ms, wanted, route is not None, room, limit - produced
        )
        produced += added
        if route is not None:
            route.sticky.produced = produced
            if produced >= limit:
                route.sticky.used_up = True
        self.used += added
        batch.reserved += added
        sink.next = index
        return index - start

    def _update_route(self, topic: str, partition: int, batch: ProducerBatch) -> None:
        """Remember (or forget) the topic's sticky route after a keyless record went through the
        general path: the DefaultPartitioner's current sticky partition and the batch open there."""
        sticky = self._sticky_partitioner.sticky(topic)  # type: ignore[union-attr]  # checked by the caller
        if batch.full or sticky is None or sticky.used_up or sticky.partition != partition:
            self._routes.pop(topic, None)
            return
        route = self._routes.get(topic)
        if route is None:
            route = self._routes[topic] = _StickyRoute()
        route.sticky = sticky
        route.batch = batch
        route.version = self.cluster.version

    # -- the sender's side ----------------------------------------------------------------------

    def begin_flush(self) -> None:
        self._flushes += 1
        self.on_ready()

    def end_flush(self) -> None:
        self._flushes -= 1

    def close(self) -> None:
        """No more appends are coming: send everything now."""
        self._closing = True
        self.on_ready()

    def incomplete_batches(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    @property
    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def has_undrained(self) -> bool:
        return any(dq for parts in self._batches.values() for dq in parts.values())

    def ready(self, cluster: ClusterMetadata, now: float) -> tuple[dict[int, list[Deque]], float, set[str]]:
        """Brokers with a sendable batch (with their partitions' queues), the time until the next
        batch becomes sendable, and topics with partitions whose leader is unknown."""
        ready: dict[int, list[Deque]] = {}
        next_delay = float("inf")
        unknown: set[str] = set()
        send_all = self._closing or self._flushes > 0 or bool(self.waiters)
        linger = self.linger_ms
        backoff = self.retry_backoff
        muted = self._muted
        topics = cluster.topics
        for topic, parts in self._batches.items():
            meta = topics.get(topic)
            for partition, dq in parts.items():
                if not dq:
                    continue
                p = meta.partitions.get(partition) if meta is not None else None
                leader = p.leader if p is not None else -1
                if leader < 0:
                    unknown.add(topic)
                    continue
                if muted is not None and (topic, partition) in muted:
                    continue
                batch = dq[0]
                if batch.attempts:
                    wait = backoff.backoff_ms(batch.attempts - 1)
                    waited = now - batch.last_attempt_ms
                    if waited < wait:
                        next_delay = min(next_delay, wait - waited)
                        continue
                    sendable = True
                else:
                    waited = now - batch.created_ms
                    sendable = send_all or batch.full or len(dq) > 1 or waited >= linger
                    if not sendable:
                        next_delay = min(next_delay, linger - waited)
                        continue
                queues = ready.get(leader)
                if queues is None:
                    ready[leader] = [dq]
                else:
                    queues.append(dq)
        return ready, next_delay, unknown

    def drain(
        self,
        node_id: int,
        queues: list[Deque],
        max_request_size: int,
        now: float,
        txn: TransactionManager | None,
    ) -> list[ProducerBatch]:
        """Take at most one batch per partition for one Produce request to ``node_id``.

        With idempotence (``txn``), a partition whose leader changed while batches were on the
        wire to the old one waits for their answers: a batch sent to the new leader before an
        earlier one was refused by the old leader would be written ahead of it.
        """
        drained: list[ProducerBatch] = []
        if not queues:
            return drained
        size = 0
        count = len(queues)
        start = self._drain_index.get(node_id, 0) % count
        for i in range(count):
            dq = queues[(start + i) % count]
            if not dq:
                continue
            first = dq[0]
            if size + first.estimated_size() > max_request_size and drained:
                # The rest waits for the next request; start there next time.
                self._drain_index[node_id] = start + i
                break
            key = (first.topic, first.partition)
            wire = self._on_wire.get(key)
            if txn is not None and wire is not None and wire[0] != node_id:
                continue
            if txn is not None and not txn.can_drain(first):
                continue
            batch = dq.popleft()
            if not batch.full:
                self._seal(batch)
            if txn is not None and not batch.has_sequence:
                txn.assign_sequence(batch)
            size += len(batch.close())
            drained.append(batch)
            if txn is not None:  # without idempotence nothing waits on what is on the wire
                if wire is None:
                    self._on_wire[key] = [node_id, 1]
                else:
                    wire[1] += 1
            if self._muted is not None:
                self._muted.add(key)
        else:
            self._drain_index[node_id] = start + 1
        return drained

    def unmute(self, batch: ProducerBatch) -> None:
        """``batch``'s request was answered, or failed: it is no longer on the wire."""
        key = (batch.topic, batch.partition)
        wire = self._on_wire.get(key)
        if wire is not None:
            wire[1] -= 1
            if wire[1] <= 0:
                del self._on_wire[key]
        if self._muted is not None:
            self._muted.discard(key)

    def reenqueue(self, batch: ProducerBatch, now: float) -> None:
        """Put a failed batch back at the head of its queue to be retried after a backoff.

        Batches with sequence numbers go back in sequence order, so a partition's retries leave in
        the order they were first sent.
        """
        batch.attempts += 1
        batch.last_attempt_ms = now
        dq = self._deque(batch.topic, batch.partition)
        if batch.has_sequence:
            index = 0
            while index < len(dq) and dq[index].has_sequence and _seq_before(dq[index], batch):
                index += 1
            dq.insert(index, batch)
        else:
            dq.appendleft(batch)
        self.on_ready()

    def split_and_reenqueue(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """Replace a batch the broker found too large by its two halves, at the head of its
        queue, to be sent again at once (as Kafka's Java client does for MESSAGE_TOO_LARGE)."""
        halves = batch.split()
        self._incomplete.discard(batch)
        dq = self._deque(batch.topic, batch.partition)
        for half in reversed(halves):
            self._incomplete.add(half)
            dq.appendleft(half)
        self.on_ready()
        return halves

    def expired_batches(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery_timeout_ms``."""
        limit = now - self.delivery_timeout_ms
        expired: list[ProducerBatch] = []
        for parts in self._batches.values():
            for dq in parts.values():
                while dq and dq[0].created_ms <= limit:
                    batch = dq.popleft()
                    if not batch.full:
                        self._seal(batch)
                    expired.append(batch)
        return expired

    def next_expiry_delay(self, now: float) -> float:
        earliest = float("inf")
        for parts in self._batches.values():
            for dq in parts.values():
                if dq and dq[0].created_ms < earliest:
                    earliest = dq[0].created_ms
        return max(0.0, earliest + self.delivery_timeout_ms - now)

    def done(self, batch: ProducerBatch) -> None:
        """Forget a completed batch and give its memory back."""
        self._incomplete.discard(batch)
        if batch.reserved:
            self.release(batch.reserved)
            batch.reserved = 0

    def abort_undrained(self) -> list[ProducerBatch]:
        """Remove and return every batch still queued (for a forced close)."""
        aborted: list[ProducerBatch] = []
        for parts in self._batches.values():
            for dq in parts.values():
                aborted.extend(dq)
                dq.clear()
        for batch in aborted:
            batch.full = True
        self.open.clear()
        return aborted

    async def wait_for_incomplete(self) -> None:
        """Wait until every batch that exists now is acknowledged or failed."""
        waiters = [b.wait_done() for b in list(self._incomplete)]
        if waiters:
            await asyncio.gather(*waiters)


def _seq_before(a: ProducerBatch, b: ProducerBatch) -> bool:
    return a.base_sequence < b.base_sequence if a.producer_epoch == b.producer_epoch else True
