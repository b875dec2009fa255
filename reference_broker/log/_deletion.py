"""Files of removed segments and deleted partitions, unlinked after ``file.delete.delay.ms``.

Kafka never unlinks a segment the moment retention, DeleteRecords, truncation or a cleaner swap
takes it out of a log: its files are renamed ``<name>.deleted`` at once (a restart never takes
them for live data: the loader removes every ``.deleted`` file it finds) and unlinked after the
topic's ``file.delete.delay.ms`` (broker default ``log.segment.delete.delay.ms``, 60 s), so a
reader that already holds a file finishes with it. A deleted partition's directory, renamed
``...-delete``, waits the broker-level delay the same way (also when found at start).

A delay of 0 removes at once, in the caller. Otherwise the removal runs on the event loop's timer
when a loop is running; without one (tools, tests driving a log directly) it waits for
:meth:`DelayedDeletions.run_due`, which the log manager's periodic work calls too. Removals still
waiting when the log manager closes are dropped: the files are found and removed at the next
start, as Kafka's are.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable

__all__ = ["DELETED_SUFFIX", "DelayedDeletions"]

log = logging.getLogger("reference_broker.log")

#: Kafka's ``LogFileUtils.DELETED_FILE_SUFFIX``.
DELETED_SUFFIX = ".deleted"


class DelayedDeletions:
    """Removals waiting for their time, earliest first, run by one event-loop timer.

    ``clock`` is monotonic seconds; it must be the running loop's clock (``time.monotonic``) for
    the timer to fire at the due times.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._pending: list[tuple[float, int, str, Callable[[], None]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0

    def __len__(self) -> int:
        return len(self._pending)

    def schedule(self, delay_ms: int, what: str, remove: Callable[[], None]) -> None:
        """Run ``remove`` (which unlinks ``what``) after ``delay_ms``; at once when it is 0."""
        if delay_ms <= 0:
            _run(what, remove)
            return
        heapq.heappush(self._pending, (self._clock() + delay_ms / 1000, next(self._order), what, remove))
        self._arm()

    def run_due(self) -> int:
        """Run every removal whose time has come; returns how many ran."""
        now = self._clock()
        ran = 0
        while self._pending and self._pending[0][0] <= now:
            _, _, what, remove = heapq.heappop(self._pending)
            _run(what, remove)
            ran += 1
        return ran

    def run_all(self) -> int:
        """Run every waiting removal now, due or not (a tool that must not leave files behind)."""
        ran = len(self._pending)
        while self._pending:
            _, _, what, remove = heapq.heappop(self._pending)
            _run(what, remove)
        self._cancel_timer()
        return ran

    def cancel(self) -> None:
        """Drop every waiting removal (the log manager closes; the next start removes the files)."""
        self._pending.clear()
        self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if not self._pending:
            self._cancel_timer()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: run_due is called by whoever drives the log
        due = self._pending[0][0]
        if self._timer is not None and not self._timer.cancelled() and self._timer_due <= due:
            return
        self._cancel_timer()
        self._timer = loop.call_later(max(0.0, due - self._clock()), self._fire)
        self._timer_due = due

    def _fire(self) -> None:
        self._timer = None
        self.run_due()
        self._arm()


def _run(what: str, remove: Callable[[], None]) -> None:
    try:
        remove()
    except OSError as exc:
        log.error("deleting %s failed: %s", what, exc)
    else:
        log.info("deleted %s", what)
