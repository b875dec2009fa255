"""When the client's next metadata refresh is due (the timing of Kafka's ``Metadata``).

Three reasons to refresh, in order of urgency:

* topics the client has just started tracking: at once (``request_for_new_topics``), as the Java
  client's ``requestUpdateForNewTopics`` does, so a fresh producer or consumer does not wait;
* a request (``request``): a caller saw stale metadata (NOT_LEADER_OR_FOLLOWER, a lost
  connection, a topic still unknown), or the last answer was *incomplete*: a tracked topic came
  back with a retriable error (LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION while Apache
  Kafka creates it asynchronously) or with a partition that has no usable leader. These wait
  ``retry_backoff_ms``, growing exponentially with jitter to ``retry_backoff_max_ms`` while
  consecutive refreshes fail or stay incomplete (KIP-580), so a topic that takes a while to
  appear is found within about a second of appearing without flooding the brokers;
* age: ``metadata_max_age_ms`` after the last successful refresh.

Pure bookkeeping on a millisecond clock the caller passes in; ``KafkaClient`` does the I/O.
"""

from __future__ import annotations

from sdk.client.backoff import ExponentialBackoff

__all__ = ["RefreshSchedule"]


class RefreshSchedule:
    """Due time of the next metadata refresh (see the module docstring).

    Invariants: a requested refresh never starts before ``not_before_ms``, which each attempt
    pushes back by the current backoff; ``failures`` counts consecutive failed attempts and
    ``incomplete`` consecutive successful ones whose answer still lacked something a caller needs.
    """

    __slots__ = (
        "_backoff",
        "_max_age_ms",
        "_new_topics",
        "failures",
        "incomplete",
        "last_success_ms",
        "not_before_ms",
        "requested",
    )

    def __init__(self, backoff: ExponentialBackoff, max_age_ms: float) -> None:
        self._backoff = backoff
        self._max_age_ms = max_age_ms
        self.requested = False
        #: Topics were added since the last refresh started: the next one is due at once.
        self._new_topics = False
        self.failures = 0
        self.incomplete = 0
        self.not_before_ms = 0.0
        self.last_success_ms = 0.0

    def request(self) -> None:
        """Refresh soon, once the current backoff has passed."""
        self.requested = True

    def request_for_new_topics(self) -> None:
        """Refresh now: the client tracks topics it has no metadata for yet."""
        self.requested = True
        self._new_topics = True
        self.incomplete = 0
        self.not_before_ms = 0.0

    def time_to_next_ms(self, now_ms: float) -> float:
        """Milliseconds until the next refresh is due (0: now)."""
        if self._new_topics:
            return 0.0
        if self.requested:
            return max(0.0, self.not_before_ms - now_ms)
        return max(0.0, self.last_success_ms + self._max_age_ms - now_ms, self.not_before_ms - now_ms)

    def started(self) -> None:
        """A refresh is being sent: it answers every request made so far."""
        self.requested = False
        self._new_topics = False

    def failed(self, now_ms: float) -> None:
        """The refresh got no usable answer: retry after a growing backoff."""
        self.failures += 1
        self.requested = True
        self.not_before_ms = now_ms + self._backoff.backoff_ms(self.failures - 1)

    def succeeded(self, now_ms: float, *, incomplete: bool) -> None:
        """The refresh was applied; ``incomplete``: it left a tracked topic or partition without
        what callers wait for, so it is retried after a backoff that grows while that lasts."""
        self.failures = 0
        self.last_success_ms = now_ms
        if incomplete:
            self.incomplete += 1
            self.requested = True
            self.not_before_ms = now_ms + self._backoff.backoff_ms(self.incomplete - 1)
        else:
            self.incomplete = 0
            self.not_before_ms = now_ms + self._backoff.backoff_ms(0)
