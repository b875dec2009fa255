"""The clock the producer's sender and transactional operations read: linger and retry backoff,
delivery timeouts, the coordinator requests' deadlines.

Injected (``Sender(clock=...)``, ``Transactions(clock=...)``) so that tests move time themselves
(``sdk.testing.mock_time.MockTime``, as Java's ``MockTime``): a 120-second delivery timeout or a
retry backoff then takes no real time and fires in a reproducible order. ``SYSTEM_CLOCK`` is the
real one: ``time.monotonic`` and the event loop's timers.

Batches carry their creation time from ``sdk.producer.accumulator.now_ms``, which reads the same
monotonic clock as ``SYSTEM_CLOCK``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = ["SYSTEM_CLOCK", "Cancellable", "ProducerClock", "SystemProducerClock"]

T = TypeVar("T")


class Cancellable(Protocol):
    """A scheduled call that may be called off (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> object: ...


class ProducerClock(Protocol):
    """Monotonic time in seconds, waiting on it, and calls scheduled on it."""

    def monotonic(self) -> float:
        """Seconds since an arbitrary origin; never goes back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        ...

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        """``awaitable``'s result, or ``TimeoutError`` (and ``awaitable`` cancelled) once
        ``timeout_s`` passed on this clock first; None waits as long as it takes."""
        ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` on the event loop once ``delay_s`` passed on this clock."""
        ...


class SystemProducerClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        return await asyncio.wait_for(awaitable, timeout_s)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay_s, callback)


SYSTEM_CLOCK: ProducerClock = SystemProducerClock()
