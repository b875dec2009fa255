"""MockTime: a clock that moves only when the test says (Java's ``MockTime``).

Code that reads an injected clock (``sdk.consumer.group_clock.Clock``) sleeps on it; ``advance``
moves time forward and wakes every sleeper whose time has come, in deadline order, so timers fire
in a reproducible order and a test of a 45-second session timeout takes microseconds. No task is
ever woken by the passing of real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["MockTime", "settle"]

T = TypeVar("T")

#: Event-loop turns ``settle`` gives the tasks: enough for any chain of wake-ups that does no I/O.
SETTLE_TURNS = 50


async def settle(turns: int = SETTLE_TURNS) -> None:
    """Let every task that is ready run until it waits again (on the clock, a fake's answer, a
    lock). The fakes do no I/O, so a bounded number of loop turns is enough."""
    for _ in range(turns):
        await asyncio.sleep(0)


class MockTime:
    """A manual clock, in seconds from ``start``; see the module docstring."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._order = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self._now

    @property
    def now_ms(self) -> float:
        return self._now * 1000

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        if timeout_s is None:
            return await awaitable
        task = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self.sleep(max(0.0, timeout_s)))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            timer.cancel()
            raise
        timer.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            if task.cancelled():
                raise TimeoutError(f"no result within {timeout_s} s of mock time")
        return task.result()

    def call_later(
        self, delay_s: float, callback: Callable[[], None]
    ) -> asyncio.Future[None] | asyncio.Handle:
        """Run ``callback`` once ``delay_s`` passed on this clock (at the next loop turn when it is
        not positive); ``cancel()`` the returned handle to call it off."""
        loop = asyncio.get_running_loop()
        if delay_s <= 0:
            return loop.call_soon(callback)
        future: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._sleepers, (self._now + delay_s, next(self._order), future))
        future.add_done_callback(lambda done: None if done.cancelled() else callback())
        return future

    def sleeping(self) -> int:
        """Sleeps not yet over (cancelled ones excluded)."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    def next_wakeup(self) -> float | None:
        """Seconds until the next sleeper is due, or None when nobody sleeps."""
        due = self._next_due()
        return None if due is None else max(0.0, due - self._now)

    def _next_due(self) -> float | None:
        due = [when for when, _, future in self._sleepers if not future.done()]
        return min(due) if due else None

    def advance(self, ms: float) -> None:
        """Move time ``ms`` milliseconds forward and wake the sleepers now due (they run at the
        next loop turns: ``await settle()``)."""
        if ms < 0:
            raise ValueError(f"MockTime cannot go back ({ms} ms)")
        self._advance_to(self._now + ms / 1000)

    def _advance_to(self, when: float) -> None:
        self._now = max(self._now, when)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def tick(self, ms: float) -> None:
        """``advance(ms)`` in steps from one due sleeper to the next, settling after each, so a
        timer that fires and sleeps again within ``ms`` fires again too."""
        if ms < 0:
            raise ValueError(f"MockTime cannot go back ({ms} ms)")
        end = self._now + ms / 1000
        while True:
            await settle()
            due = self._next_due()
            if due is None or due > end:
                break
            self._advance_to(due)
        self._advance_to(end)
        await settle()
