"""Per-record futures that a batch resolves all at once.

``Producer.send`` returns one future per record. An ``asyncio.Future`` per record costs its
creation (``loop.create_future``), a ``RecordMetadata`` tuple and a ``set_result`` call when the
batch is acknowledged, even though most callers never look at most futures. Here a batch has one
:class:`BatchOutcome` (where its records went, or why they failed) and each record's future only
knows its outcome and its place in the batch: acknowledging a batch of any size is one update of
the outcome, and a ``RecordMetadata`` is built only when someone asks a future for its result.
Futures that someone waits on (``await``, ``add_done_callback``) carry their callbacks, and the
batch runs exactly those.

:class:`RecordFuture` is what ``Producer.send`` returns: an asyncio-compatible future (it can be
awaited, gathered, waited for, shielded, cancelled; ``asyncio.isfuture`` is true) that is not an
``asyncio.Future`` subclass. ``sdk.sync.DeliveryFuture`` builds on the same base for threads.

Thread safety: outcomes change, and ``DeliveryFuture`` callbacks are registered, under one lock,
``TRANSITION``, so a thread that starts waiting for a ``DeliveryFuture`` while the loop thread
completes its batch either sees it done or is woken. ``RecordFuture`` is used on the loop thread
only, like any asyncio future, and takes no lock.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Generator
from operator import attrgetter
from typing import Any

from sdk.producer.record_metadata import CREATE_TIME, LOG_APPEND_TIME, RecordMetadata

__all__ = ["TRANSITION", "BatchOutcome", "LazyRecordFuture", "RecordFuture", "resolve_futures"]

PENDING, FINISHED, CANCELLED = 0, 1, 2
_new_tuple = tuple.__new__

#: Guards outcome changes against waiters registering from other threads (see the module doc).
TRANSITION = threading.Lock()


class BatchOutcome:
    """The result of one batch, shared by its records' futures.

    ``state`` is PENDING until the batch is acknowledged or fails, then FINISHED with either
    ``error`` set or the offsets: ``base_offset`` (-1 when unknown: acks=0, or a duplicate whose
    offset the broker no longer knows), ``log_append_time`` (-1 for CreateTime topics) and
    ``log_start_offset``. A cancelled ``RecordFuture`` gets an outcome of its own in state
    CANCELLED, with ``error`` holding the cancel message.
    """

    __slots__ = (
        "base_offset",
        "error",
        "error_traceback",
        "log_append_time",
        "log_start_offset",
        "loop",
        "partition",
        "scan",
        "state",
        "topic",
        "watchers",
    )

    def __init__(self, topic: str, partition: int, loop: asyncio.AbstractEventLoop | None) -> None:
        self.topic = topic
        self.partition = partition
        self.loop = loop
        self.state = PENDING
        self.error: Any = None
        #: The error's traceback when it was set: every future re-raises it from there, as
        #: asyncio's do, instead of growing one traceback with each raise.
        self.error_traceback: Any = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        #: RecordFutures that registered callbacks (they add themselves), so completing the
        #: batch touches only those.
        self.watchers: list[Any] | None = None
        #: True once a future that registers callbacks from another thread (DeliveryFuture) is
        #: attached: such a future may register before it is attached, so completion scans all.
        self.scan = False

    def __repr__(self) -> str:
        state = ("pending", "finished", "cancelled")[self.state]
        return f"<BatchOutcome {self.topic}-{self.partition} {state} base_offset={self.base_offset}>"


class LazyRecordFuture:
    """What a record's future knows: its batch's outcome, its offset delta in that batch, and
    what its ``RecordMetadata`` needs besides the outcome (timestamp, serialized sizes).

    ``_callbacks`` is None until someone registers one; a batch completing runs the callbacks of
    exactly the futures that have some (:func:`resolve_futures`).
    """

    __slots__ = ("_callbacks", "_delta", "_key_size", "_outcome", "_timestamp", "_value_size")

    _outcome: BatchOutcome | None
    _callbacks: list[Any] | None
    _delta: int
    _timestamp: int
    _key_size: int
    _value_size: int

    def _metadata(self, outcome: BatchOutcome) -> RecordMetadata:
        """This record's metadata from its (finished, successful) batch's outcome."""
        base = outcome.base_offset
        append_time = outcome.log_append_time
        # tuple.__new__ skips NamedTuple's Python-level __new__.
        return _new_tuple(
            RecordMetadata,
            (
                outcome.topic,
                outcome.partition,
                base + self._delta if base >= 0 else -1,
                self._timestamp if append_time < 0 else append_time,
                CREATE_TIME if append_time < 0 else LOG_APPEND_TIME,
                outcome.log_start_offset,
                self._key_size,
                self._value_size,
            ),
        )

    def _run_callbacks(self, callbacks: list[Any]) -> None:
        """Called once the future is done, with the callbacks taken from it (outside the lock)."""
        raise NotImplementedError


_callbacks_of = attrgetter("_callbacks")


def resolve_futures(outcome: BatchOutcome, futures: list[Any], error: BaseException | None) -> None:
    """Finish ``outcome`` (offsets already set on it, or ``error``) and run the callbacks of those
    of ``futures`` that have any: the outcome's watchers, or (``outcome.scan``) whichever have
    callbacks, found by a scan in C. One lock per batch, nothing per record."""
    with TRANSITION:
        if error is not None:
            outcome.error = error
            outcome.error_traceback = error.__traceback__
        outcome.state = FINISHED
        candidates = futures if outcome.scan else outcome.watchers or ()
        # filter() re-reads each future's callbacks as it goes, so one listed twice (callbacks
        # removed, then added again) is taken once; a cancelled one has another outcome.
        watched = []
        for future in filter(_callbacks_of, candidates):
            if future._outcome is outcome:
                watched.append((future, future._callbacks))
                future._callbacks = None
    for future, callbacks in watched:
        future._run_callbacks(callbacks)


class RecordFuture(LazyRecordFuture):
    """The future ``Producer.send`` returns: resolves to the record's ``RecordMetadata``.

    Behaves as an ``asyncio.Future`` for everything a caller does with one: ``await``,
    ``asyncio.gather``/``wait``/``wait_for``/``shield``, ``done()``, ``result()``,
    ``exception()``, ``cancel()`` (stops waiting; the record is still delivered),
    ``add_done_callback`` (callbacks are scheduled on the loop, with their context). It is not an
    ``asyncio.Future`` subclass, and has no ``set_result``: only its batch resolves it.
    """

    __slots__ = ()

    def __init__(
        self, outcome: BatchOutcome, delta: int, timestamp: int, key_size: int, value_size: int
    ) -> None:
        self._outcome = outcome
        self._delta = delta
        self._timestamp = timestamp
        self._key_size = key_size
        self._value_size = value_size
        self._callbacks = None

    @classmethod
    def detached(cls) -> RecordFuture:
        """A future not in a batch yet: ``RecordAccumulator.try_append`` attaches it (``send``'s slow
        path creates it before waiting for metadata or memory)."""
        future = cls.__new__(cls)
        future._outcome = None
        future._callbacks = None
        return future

    # asyncio's future protocol: Task and asyncio.isfuture() look for this attribute. A Task
    # clears it after registering its wake-up; __await__ only ever yields a pending future, so
    # the flag can read True always and ignore writes.
    @property
    def _asyncio_future_blocking(self) -> bool:
        return True

    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value: bool) -> None:
        pass

    def __repr__(self) -> str:
        outcome = self._outcome
        assert outcome is not None
        if outcome.state == PENDING:
            state = "pending"
        elif outcome.state == CANCELLED:
            state = "cancelled"
        elif outcome.error is not None:
            state = f"failed {outcome.error!r}"
        else:
            state = f"finished {self._metadata(outcome)!r}"
        return f"<RecordFuture {state}>"

    def get_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._outcome.loop  # type: ignore[union-attr]  # attached before it is handed out
        assert loop is not None
        return loop

    def done(self) -> bool:
        return self._outcome.state != PENDING  # type: ignore[union-attr]  # attached before it is handed out

    def cancelled(self) -> bool:
        return self._outcome.state == CANCELLED  # type: ignore[union-attr]  # attached before it is handed out

    def result(self) -> RecordMetadata:
        outcome = self._outcome
        assert outcome is not None
        state = outcome.state
        if state == FINISHED:
            error = outcome.error
            if error is not None:
                raise error.with_traceback(outcome.error_traceback)
            return self._metadata(outcome)
        if state == CANCELLED:
            raise self._make_cancelled_error()
        raise asyncio.InvalidStateError("Result is not ready.")

    def exception(self) -> BaseException | None:
        outcome = self._outcome
        assert outcome is not None
        if outcome.state == FINISHED:
            return outcome.error
        if outcome.state == CANCELLED:
            raise self._make_cancelled_error()
        raise asyncio.InvalidStateError("Exception is not set.")

    @property
    def _cancel_message(self) -> str | None:
        """asyncio.gather reads this from cancelled children."""
        outcome = self._outcome
        return outcome.error if outcome is not None and outcome.state == CANCELLED else None

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        message = self._cancel_message
        return asyncio.CancelledError() if message is None else asyncio.CancelledError(message)

    def cancel(self, msg: Any = None) -> bool:
        """Stop waiting for the outcome (the record itself is still sent, as with aiokafka)."""
        outcome = self._outcome
        assert outcome is not None
        if outcome.state != PENDING:
            return False
        # An outcome of its own: the batch's outcome, shared with the other records, stays as is.
        cancelled = BatchOutcome(outcome.topic, outcome.partition, outcome.loop)
        cancelled.state = CANCELLED
        cancelled.error = msg
        self._outcome = cancelled
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            self._run_callbacks(callbacks)
        return True

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None
    ) -> None:
        if context is None:
            context = contextvars.copy_context()
        outcome = self._outcome
        assert outcome is not None
        if outcome.state == PENDING:
            if self._callbacks is None:
                self._callbacks = [(fn, context)]
                if outcome.watchers is None:
                    outcome.watchers = [self]
                else:
                    outcome.watchers.append(self)
            else:
                self._callbacks.append((fn, context))
        else:
            self.get_loop().call_soon(fn, self, context=context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        callbacks = self._callbacks
        if not callbacks:
            return 0
        kept = [(f, ctx) for f, ctx in callbacks if f != fn]
        self._callbacks = kept or None
        return len(callbacks) - len(kept)

    def _run_callbacks(self, callbacks: list[Any]) -> None:
        call_soon = self.get_loop().call_soon
        for fn, context in callbacks:
            call_soon(fn, self, context=context)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            yield self  # tells the Task to wait (it registers a done callback)
        if not self.done():
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__
