"""Exponential backoff with jitter, as Kafka clients compute it (KIP-144, KIP-580).

Used for reconnects (``reconnect_backoff_ms`` .. ``reconnect_backoff_max_ms``), for retries of
failed requests and for metadata refreshes that are retried (``retry_backoff_ms`` ..
``retry_backoff_max_ms``). The jitter spreads the retries of many clients that lost the same
broker at the same moment, so they do not return in lock-step.

Invariants (those of Kafka's ``ExponentialBackoff``): a backoff never exceeds ``max_ms``, jitter
included; a maximum below the initial value makes the backoff constant at that maximum; a
constant backoff (initial equal to the maximum) carries no jitter.
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """``initial_ms * multiplier ** attempts`` times a random factor in ``[1 - jitter, 1 + jitter]``,
    capped at ``max_ms``."""

    __slots__ = ("_exp_max", "_initial", "_jitter", "_max", "_multiplier")

    def __init__(self, initial_ms: float, max_ms: float, *, multiplier: float = 2.0, jitter: float = 0.2):
        if initial_ms < 0 or max_ms < 0:
            raise ValueError("backoff times must not be negative")
        if multiplier < 1:
            raise ValueError(f"the backoff multiplier must be at least 1, not {multiplier}")
        if not 0 <= jitter < 1:
            raise ValueError(f"the backoff jitter must be in [0, 1), not {jitter}")
        self._max = float(max_ms)
        self._initial = float(min(initial_ms, max_ms))
        self._multiplier = multiplier
        self._jitter = jitter
        if self._max > self._initial and multiplier > 1:
            self._exp_max = math.log(self._max / max(self._initial, 1.0)) / math.log(multiplier)
        else:
            self._exp_max = 0.0

    def backoff_ms(self, attempts: int) -> float:
        """Milliseconds to wait after ``attempts + 1`` consecutive failures (``attempts`` 0: the
        first retry waits about ``initial_ms``)."""
        if self._exp_max <= 0:
            return self._initial
        term = self._initial * self._multiplier ** min(max(attempts, 0), self._exp_max)
        if self._jitter > 0:
            term *= random.uniform(1 - self._jitter, 1 + self._jitter)
        return min(term, self._max)

    @property
    def initial_ms(self) -> float:
        return self._initial

    @property
    def max_ms(self) -> float:
        return self._max
