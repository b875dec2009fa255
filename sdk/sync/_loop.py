"""The event loop every blocking facade shares: one daemon thread per process.

The async clients do all their I/O there; calling threads hand work over with ``run`` (wait for a
coroutine's result) or ``call_soon`` (schedule a callback), the only two ways in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sdk.errors import IllegalStateError, KafkaTimeoutError

__all__ = ["LoopThread", "shared_loop"]

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sdk-sync-loop", daemon=True)
        self.thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        """True when called from the loop's own thread (where blocking calls would deadlock)."""
        return threading.current_thread() is self.thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait (up to ``timeout`` seconds) for its result; on
        timeout the coroutine is cancelled and ``KafkaTimeoutError`` raised."""
        if self.in_loop_thread():
            coro.close()
            raise IllegalStateError("blocking sdk.sync call from the shared event loop thread would deadlock")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaTimeoutError(f"operation did not finish within {timeout} s") from None

    def call(self, function: Callable[[], T], timeout: float | None = None) -> T:
        """Run ``function()`` on the loop thread and return its result (for reading state the loop
        thread changes, such as a client's metrics, between two of its steps)."""

        async def call() -> T:
            return function()

        return self.run(call(), timeout)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Schedule ``callback(*args)`` on the loop, from any thread."""
        if self.in_loop_thread():
            self.loop.call_soon(callback, *args)
        else:
            self.loop.call_soon_threadsafe(callback, *args)


_shared: LoopThread | None = None
_shared_pid: int | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process-wide loop thread (a new one after ``fork``)."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid() or not _shared.thread.is_alive():
            _shared = LoopThread()
            _shared_pid = os.getpid()
        return _shared
