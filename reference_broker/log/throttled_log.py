"""Log lines that repeat per request, limited to one per key and interval.

A client whose appends are refused (a full disk takes the partition offline; every later produce
is refused the same way) would otherwise write one log line per request, filling the very disk
that is full and drowning the first, useful line. Each key (say partition and error) logs at most
once per interval; the next line says how many were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

__all__ = ["ThrottledLog"]

#: Keys remembered at most; beyond this the oldest are forgotten (their next line logs at once).
_MAX_KEYS = 10_000


class ThrottledLog:
    """``log(key, level, msg, *args)`` logs at most once per ``interval_s`` per ``key``."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        #: key -> (when it last logged, lines left out since)
        self._seen: dict[Hashable, tuple[float, int]] = {}

    def log(self, key: Hashable, level: int, msg: str, *args: object) -> bool:
        """Log unless ``key`` logged within the interval; True if the line was written."""
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.interval_s:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if last is None and len(self._seen) >= _MAX_KEYS:
            self._seen.pop(next(iter(self._seen)))
        left_out = last[1] if last is not None else 0
        self._seen[key] = (now, 0)
        if left_out:
            self.logger.log(level, msg + " (%d more like it in the last %.0f s not logged)",
                            *args, left_out, self.interval_s)
        else:
            self.logger.log(level, msg, *args)
        return True
