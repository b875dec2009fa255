"""Exponential backoff with jitter, as Kafka clients compute it (KIP-144, KIP-580).

Used for reconnects (``reconnect_backoff_ms`` .. ``reconnect_backoff_max_ms``) and for retries of
failed requests (``retry_backoff_ms`` .. ``retry_backoff_max_ms``). The jitter spreads the retries
of many clients that lost the same broker at the same moment, so they do not return in lock-step.
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """``initial_ms * multiplier ** attempts``, capped at ``max_ms``, times a random factor in
    ``[1 - jitter, 1 + jitter]``."""

    __slots__ = ("_exp_max", "_initial", "_jitter", "_max", "_multiplier")

    def __init__(self, initial_ms: float, max_ms: float, *, multiplier: float = 2.0, jitter: float = 0.2):
        if initial_ms < 0 or max_ms < 0:
            raise ValueError("backoff times must not be negative")
        self._initial = float(initial_ms)
        self._max = float(max(max_ms, initial_ms))
        self._multiplier = multiplier
        self._jitter = jitter
        if self._initial > 0 and self._max > self._initial and multiplier > 1:
            self._exp_max = math.log(self._max / self._initial) / math.log(multiplier)
        else:
            self._exp_max = 0.0

    def backoff_ms(self, attempts: int) -> float:
        """Milliseconds to wait after ``attempts`` failures (0 for the first retry)."""
        if self._exp_max <= 0:
            term = self._initial
        else:
            term = self._initial * self._multiplier ** min(max(attempts, 0), self._exp_max)
            term = min(term, self._max)
        if self._jitter > 0:
            term *= random.uniform(1 - self._jitter, 1 + self._jitter)
        return term

    @property
    def initial_ms(self) -> float:
        return self._initial

    @property
    def max_ms(self) -> float:
        return self._max
