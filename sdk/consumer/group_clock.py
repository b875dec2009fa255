"""The clock the group membership's timers read: heartbeat interval, session and rebalance
timeouts, ``max_poll_interval_ms``, auto-commit interval and retry backoff.

Injected so that tests drive time themselves (``sdk.testing.mock_time.MockTime``, as Java's
``MockTime``): time then moves only when the test says, and every timer fires deterministically.
``SystemClock`` is the real one: ``time.monotonic`` and the event loop's sleeps and timeouts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]

T = TypeVar("T")


class Clock(Protocol):
    """Monotonic time in seconds, and waiting on it."""

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


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        if timeout_s is None:
            return await awaitable
        async with asyncio.timeout(max(0.0, timeout_s)):
            return await awaitable


SYSTEM_CLOCK = SystemClock()
