"""The blocking producer: ``sdk.Producer`` driven on the shared loop thread (``sdk.sync._loop``).

It drives the async producer as its ``send`` does, split across threads: the record is prepared
(``Producer._prepare_record``: interceptors, serializers, size) on the caller's thread, and appended
on the loop thread by the accumulator's ``try_append``, or by ``Producer._append_waiting`` when it
must wait for metadata or memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from sdk.errors import BufferExhaustedError, KafkaTimeoutError, ProducerClosedError
from sdk.metrics.core import MetricName, Metrics
from sdk.producer.batch_api import Headers
from sdk.producer.futures import PENDING, TRANSITION, LazyRecordFuture
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.producer import Producer as AsyncProducer
from sdk.producer.record_metadata import RecordMetadata
from sdk.sync._loop import shared_loop

__all__ = ["DeliveryFuture", "Producer"]

log = logging.getLogger(__name__)

_new_object = object.__new__


_PENDING, _RESULT, _ERROR, _CANCELLED = 0, 1, 2, 3


class DeliveryFuture(LazyRecordFuture):
    """The outcome of one send: ``concurrent.futures.Future``'s methods plus kafka-python's
    ``get(timeout)``.

    A light re-implementation rather than a ``concurrent.futures.Future`` because one is made per
    record, on the caller's thread: it holds no lock or condition of its own (a thread that waits
    gets a lock made for it then), and a record's future is resolved together with the rest of
    its batch (``sdk.producer.futures``) rather than one by one. It does not work with
    ``concurrent.futures.wait``/``as_completed``; use ``get``, ``result`` or callbacks.

    A record's future is resolved through its batch's outcome once the loop thread has appended
    it; one that failed before that, or the future of a ``send_many`` call, is set directly
    (``set_result``/``set_exception``: state ``_RESULT``/``_ERROR`` with ``_value``).
    """

    __slots__ = ("_record", "_state", "_value")

    def __init__(self) -> None:
        self._outcome = None
        self._callbacks = None
        self._state = _PENDING
        self._value: Any = None
        #: ``(topic, key, value, partition, timestamp_ms, headers)`` while the record waits in
        #: the hand-over queue (``Producer.send``), None once the loop thread took it.
        self._record: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        state = "cancelled" if self._state == _CANCELLED else "finished" if self.done() else "pending"
        return f"<DeliveryFuture {state}>"

    def done(self) -> bool:
        if self._state != _PENDING:
            return True
        outcome = self._outcome
        return outcome is not None and outcome.state != PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def running(self) -> bool:
        return False

    def cancel(self) -> bool:
        """Stop waiting for the outcome (the record itself may still be delivered)."""
        return self._finish(_CANCELLED, None)

    def set_result(self, result: Any) -> None:
        self._finish(_RESULT, result)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(_ERROR, exception)

    def _finish(self, state: int, value: Any) -> bool:
        with TRANSITION:
            if self.done():
                return False
            self._value, self._state = value, state
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            self._run_callbacks(callbacks)
        return True

    def _run_callbacks(self, callbacks: list[Any]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("DeliveryFuture callback %r failed", callback)

    def add_done_callback(self, callback: Any) -> None:
        """``callback(future)`` once done (at once if already done), on the completing thread."""
        with TRANSITION:
            if not self.done():
                if self._callbacks is None:
                    self._callbacks = [callback]
                else:
                    self._callbacks.append(callback)
                return
        callback(self)

    def _wait(self, timeout: float | None) -> None:
        if self.done():
            return
        with TRANSITION:
            if self.done():
                return
            waiter = threading.Lock()
            waiter.acquire()
            wake = _Releaser(waiter)
            if self._callbacks is None:
                self._callbacks = [wake]
            else:
                self._callbacks.append(wake)
        if not waiter.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise concurrent.futures.TimeoutError()

    def result(self, timeout: float | None = None) -> Any:
        self._wait(timeout)
        state = self._state
        if state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        if state == _ERROR:
            raise self._value
        if state == _RESULT:
            return self._value
        outcome = self._outcome
        assert outcome is not None
        if outcome.error is not None:
            raise outcome.error.with_traceback(outcome.error_traceback)
        return self._metadata(outcome)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        state = self._state
        if state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        if state == _ERROR:
            return self._value
        if state == _RESULT:
            return None
        outcome = self._outcome
        assert outcome is not None
        return outcome.error

    def get(self, timeout: float | None = None) -> Any:
        """The result; ``KafkaTimeoutError`` if it is not there within ``timeout`` seconds."""
        try:
            return self.result(timeout)
        except concurrent.futures.TimeoutError:
            raise KafkaTimeoutError(f"no acknowledgement within {timeout} s") from None


class _Releaser:
    """A done-callback that wakes one thread blocked in ``DeliveryFuture._wait``."""

    __slots__ = ("_lock",)

    def __init__(self, lock: Any) -> None:
        self._lock = lock

    def __call__(self, _future: DeliveryFuture) -> None:
        self._lock.release()

    def __repr__(self) -> str:
        return "<waiting thread>"


def _transfer(source: asyncio.Future[Any], target: DeliveryFuture) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


class Producer:
    """Blocking ``sdk.Producer``: same settings (see ``sdk.producer.Producer``), same errors.

    ``send`` returns at once with a ``DeliveryFuture``; it blocks only while the hand-over queue
    is full, which happens when the async producer itself waits (for ``buffer_memory`` or for a
    new topic's metadata), so back-pressure reaches the caller as in Kafka's Java client. A
    caller blocked there when ``close`` begins gets ``ProducerClosedError`` at once.
    """

    #: Records handed over but not yet appended, beyond which ``send`` blocks.
    HANDOVER_LIMIT = 10000
    #: Records the loop thread appends before letting other work run.
    PUMP_ROUND = 2000

    def __init__(self, **config: Any):
        """Takes ``sdk.Producer``'s keyword arguments (``help(sdk.Producer.__init__)``), and
        starts it on the shared loop thread."""
        self._runner = shared_loop()
        self._producer = AsyncProducer(**config)
        self._max_block_s = self._producer.config.max_block_ms / 1000
        #: Records handed over to the loop thread: each future carries its record (``_record``).
        self._queue: deque[DeliveryFuture] = deque()
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._pump_scheduled = False
        self._waiting = 0
        self._slow_task: asyncio.Task[None] | None = None
        #: Set when ``close`` begins: ``send`` refuses records, blocked callers are woken.
        self._closing = False
        self._closed = False
        self._runner.run(self._producer.start())

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._producer.metrics_registry

    def metrics(self) -> dict[MetricName, float]:
        """See ``sdk.Producer.metrics`` (read on the loop thread)."""
        return self._runner.call(self._producer.metrics)

    @property
    def async_producer(self) -> AsyncProducer:
        """The asyncio producer doing the work (use it only from the shared loop thread)."""
        return self._producer

    # -- sending --------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> DeliveryFuture:
        """Queue a record; the future resolves to its ``RecordMetadata``.

        Serialization (and interceptors' ``on_send``) run in the calling thread, so their
        errors (``SerializationError``, ``RecordTooLargeError``) are raised here.
        ``ProducerClosedError`` once ``close`` began.
        """
        if self._closing:
            raise ProducerClosedError("producer closed")
        record = self._producer._prepare_record(topic, value, key, partition, timestamp_ms, headers)
        # DeliveryFuture(), its fields set here: cheaper than calling the constructor. The
        # future carries the record through the queue: one object per record that the garbage
        # collector follows (the record tuple holds no such object, so the collector stops
        # tracking it), which keeps collections short while records wait for the loop thread.
        future = _new_object(DeliveryFuture)
        future._outcome = None
        future._callbacks = None
        future._state = _PENDING
        future._record = record
        queue = self._queue
        if len(queue) >= self.HANDOVER_LIMIT:
            self._wait_for_room()
        # deque.append and the flag are atomic under the GIL; the pump resets the flag before it
        # drains, so a record appended at any moment is either drained or triggers a new pump.
        queue.append(future)
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._runner.call_soon(self._pump)
        return future

    def _wait_for_room(self) -> None:
        with self._lock:
            self._waiting += 1
            try:
                if not self._space.wait_for(
                    lambda: len(self._queue) < self.HANDOVER_LIMIT or self._closing, self._max_block_s
                ):
                    raise BufferExhaustedError(
                        f"the producer accepted nothing for max_block_ms={self._max_block_s * 1000:.0f}"
                    )
                if self._closing:
                    raise ProducerClosedError("producer closed while this send waited for room")
            finally:
                self._waiting -= 1

    def _notify_room(self, low_water: bool = False) -> None:
        """Wake callers blocked on a full hand-over queue. With ``low_water`` (the pump, which
        empties the queue quickly) only once it is half empty: waking a blocked caller costs two
        thread switches, worth paying for thousands of records of room, not for one batch's."""
        if self._waiting and (not low_water or len(self._queue) <= self.HANDOVER_LIMIT // 2):
            with self._lock:
                self._space.notify_all()

    def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        """``send`` and block until the record is acknowledged."""
        return self.send(topic, value, key, partition, timestamp_ms, headers).get(timeout)

    def send_many(
        self,
        topic: str,
        records: Iterable[tuple[Any, Any]],
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> DeliveryFuture:
        """The batch API (see ``sdk.Producer.send_many``): one future for all ``(key, value)`` records."""
        if self._closing:
            raise ProducerClosedError("producer closed")
        records = list(records)
        result = DeliveryFuture()

        async def queue_all() -> None:
            await self._drain_handover()
            future = await self._producer.send_many(
                topic, records, partition=partition, timestamp_ms=timestamp_ms, headers=headers
            )
            future.add_done_callback(lambda f: _transfer(f, result))

        self._runner.run(queue_all())
        return result

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent so far is acknowledged or failed."""

        async def flush_all() -> None:
            await self._drain_handover()
            await self._producer.flush()

        self._runner.run(flush_all(), timeout)

    def partitions_for(self, topic: str) -> set[int]:
        return self._runner.run(self._producer.partitions_for(topic))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what was handed over and is buffered, and stop (see ``sdk.Producer.stop``).
        Callers blocked in ``send`` get ``ProducerClosedError`` at once. Safe to call twice."""
        with self._lock:
            if self._closing:
                already = True
            else:
                already = False
                self._closing = True
                self._space.notify_all()
        if already:
            return

        async def stop() -> None:
            await self._drain_handover()
            await self._producer.stop(timeout)
            # A send that passed its closing check just before close began may have queued a
            # record after the drain: it was never appended.
            queue = self._queue
            while queue:
                future = queue.popleft()
                future._record = None
                future.set_exception(ProducerClosedError("producer closed before this record was appended"))

        try:
            self._runner.run(stop())
        finally:
            self._closed = True

    stop = close

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- transactions (sdk.producer.transaction_api) ---------------------------------------------

    def init_transactions(self, keep_prepared_transaction: bool = False) -> None:
        """See ``sdk.Producer.init_transactions`` (the constructor already did it, except with
        ``enable_two_phase_commit``)."""
        self._runner.run(self._producer.init_transactions(keep_prepared_transaction))

    def prepare_transaction(self) -> PreparedTxnState:
        """Flush the records handed over so far and prepare the transaction (KIP-939; see
        ``sdk.Producer.prepare_transaction``)."""

        async def prepare() -> PreparedTxnState:
            await self._drain_handover()
            return await self._producer.prepare_transaction()

        return self._runner.run(prepare())

    @property
    def prepared_transaction_state(self) -> PreparedTxnState | None:
        """See ``sdk.Producer.prepared_transaction_state``."""
        return self._producer.prepared_transaction_state

    def complete_transaction(self, state: PreparedTxnState) -> None:
        """Commit the prepared or kept transaction if ``state`` names it, else abort it (see
        ``sdk.Producer.complete_transaction``)."""
        self._runner.run(self._producer.complete_transaction(state))

    @property
    def transaction_version(self) -> int | None:
        """The transaction protocol in use (2: KIP-890, 1), None before ``init_transactions``."""
        return self._producer.transaction_version

    def begin_transaction(self) -> None:
        """Records sent from now on belong to a new transaction (``IllegalStateError`` if one is
        open)."""

        async def begin() -> None:
            await self._producer.begin_transaction()

        self._runner.run(begin())

    def send_offsets_to_transaction(self, offsets: Any, group_id: Any) -> None:
        """Consumer offsets committed with the transaction (see ``sdk.Producer``); ``group_id``
        is the group id or the consumer's ``group_metadata()``."""
        self._runner.run(self._producer.send_offsets_to_transaction(offsets, group_id))

    def commit_transaction(self) -> None:
        """Flush the records handed over so far, then commit (``TransactionAbortableError`` if
        one failed: abort then)."""

        async def commit() -> None:
            await self._drain_handover()
            await self._producer.commit_transaction()

        self._runner.run(commit())

    def abort_transaction(self) -> None:
        """Abort: records not sent yet fail with ``TransactionAbortedError``."""

        async def abort() -> None:
            await self._drain_handover()
            await self._producer.abort_transaction()

        self._runner.run(abort())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``with producer.transaction():`` commits when the block ends normally, aborts when it
        raises (``sdk.Producer.transaction`` run on the loop thread)."""
        context = self._producer.transaction()
        self._runner.run(context.__aenter__())
        try:
            yield
        except BaseException as exc:
            self._runner.run(self._end_transaction(context, exc))
            raise
        self._runner.run(self._end_transaction(context, None))

    async def _end_transaction(self, context: Any, exc: BaseException | None) -> None:
        await self._drain_handover()
        await context.__aexit__(None if exc is None else type(exc), exc, None)

    # -- hand-over, on the loop thread ----------------------------------------------------------

    def _pump(self) -> None:
        """Append queued records without waiting; hand a blocked one to a task that can wait."""
        self._pump_scheduled = False
        if self._slow_task is not None:
            return  # the task drains the queue in order
        try_append = self._producer._accumulator.try_append  # type: ignore[union-attr]  # set once started
        queue = self._queue
        appended = 0
        # A bounded round, then the loop's other work (the sender) gets a turn: a caller thread
        # that keeps the queue full must not starve the network.
        popleft = queue.popleft
        for _ in range(min(len(queue), self.PUMP_ROUND)):
            future = popleft()
            try:
                topic, partition, key, value, headers, timestamp_ms, size = future._record  # type: ignore[misc]  # set when queued
                if try_append(topic, partition, key, value, headers, timestamp_ms, future, size) is None:
                    # Back at the head (callers only append at the tail): the task takes it.
                    queue.appendleft(future)
                    self._slow_task = self._runner.loop.create_task(self._drain_handover_task())
                    break
            except Exception as exc:
                future.set_exception(exc)
            future._record = None
            appended += 1
        if appended:
            self._notify_room(low_water=True)
        if queue and self._slow_task is None and not self._pump_scheduled:
            self._pump_scheduled = True
            self._runner.call_soon(self._pump)

    async def _drain_handover_task(self) -> None:
        try:
            await self._drain_handover(from_task=True)
        finally:
            self._slow_task = None

    async def _drain_handover(self, from_task: bool = False) -> None:
        """Append everything handed over so far, waiting where the producer must wait."""
        if not from_task:
            while self._slow_task is not None:
                await asyncio.shield(self._slow_task)
        producer = self._producer
        try_append = producer._accumulator.try_append  # type: ignore[union-attr]  # set once started
        queue = self._queue
        while queue:
            future = queue[0]
            try:
                topic, partition, key, value, headers, timestamp_ms, size = future._record  # type: ignore[misc]  # set when queued
                if try_append(topic, partition, key, value, headers, timestamp_ms, future, size) is None:
                    await producer._append_waiting(
                        topic, partition, key, value, headers, timestamp_ms, future, size
                    )
            except Exception as exc:
                future.set_exception(exc)
            future._record = None
            queue.popleft()
            self._notify_room()


# help() and inspect show the async producer's keyword arguments, which the facade takes as they are.
Producer.__init__.__signature__ = inspect.signature(AsyncProducer.__init__)  # type: ignore[attr-defined]  # help()
