"""Time for the broker's state machines: wall-clock milliseconds plus timers, swappable in tests.

Session timeouts, rebalance windows and offset retention are decisions about time. The group
coordinator reads time and sets timers only through a ``Clock`` so that its tests can drive it
with ``ManualClock`` (no sleeping, no sockets, no event loop) and get the same decisions a live
broker makes with ``LoopClock``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    """What ``call_later`` returns: something that can be cancelled before it fires."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Milliseconds since the epoch, and callbacks run after a delay."""

    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """The real clock: ``time.time`` and the running event loop's timers."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000, callback)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "due_ms")

    def __init__(self, due_ms: int, callback: Callable[[], None]):
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (``advance``), firing due timers in order."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self._now = start_ms
        self._timers: list[tuple[int, int, _ManualTimer]] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> TimerHandle:
        timer = _ManualTimer(self._now + max(delay_ms, 0), callback)
        heapq.heappush(self._timers, (timer.due_ms, next(self._sequence), timer))
        return timer

    def advance(self, delta_ms: int) -> None:
        """Move time forward by ``delta_ms``, running every timer that falls due meanwhile (timers
        set by those callbacks included) at its own due time."""
        target = self._now + delta_ms
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.callback()
        self._now = target

    @property
    def pending(self) -> int:
        """Timers still armed (for tests)."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)
