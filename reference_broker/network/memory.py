"""The broker-wide bounds on requests read and not yet handled: Kafka's ``queued.max.request.bytes``
(its ``SimpleMemoryPool``) and ``queued.max.requests``.

The pool (off when ``queued.max.request.bytes`` <= 0, Kafka's default) is taken from when a
request's size prefix has been read until the request has been handed to its handler, as Kafka
frees a request's buffer once its handler returns. It is not strict, as Kafka's is not: a request
is given its bytes while any are left, so the pool may be overdrawn by at most one request (which
is why it must hold at least ``socket.request.max.bytes``). While it is empty, a connection that
wants to read a request stops reading and waits; every waiting connection looks again once bytes
come back (Kafka mutes every channel while its pool is out of memory and unmutes them all then).
With the pool on, a connection also reads its next request only after answering the last one
(Kafka's channel is muted from a request's arrival until its response is sent), so a client that
pipelines requests and never reads the answers holds no pool memory: only requests on their way
to a handler do.

``queued.max.requests`` bounds Kafka's request queue. Here each connection may always have its
next request read (the one Kafka's channel holds); requests read further ahead (this server's
pipelining read-ahead) count toward the bound, and no connection reads further ahead while it is
reached. A client that stops reading its answers thus costs other clients their read-ahead, never
their service.

Responses are not counted, as in Kafka (whose pool holds requests only, and whose Fetch
responses are sent from the page cache by ``sendfile``), because what an unsent response holds is
bounded per connection without it: a connection starts its next request only once its last
response has been handed to the kernel; a Fetch response's record data are views of the log's
mapped segment files (page cache, shared by every response reading the same data: they show in
the process's file-backed RSS once per mapping, not as memory of their own); and of those views
the transport copies at most what the kernel did not take of one write chunk. Counting held
responses toward a broker-wide limit would instead let clients that never read their responses
stop every other client's fetches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class RequestMemory:
    """The broker's request pool and read-ahead count, shared by every listener."""

    def __init__(self, pool_bytes: int = -1, max_queued: int = 500):
        self.capacity = pool_bytes if pool_bytes > 0 else 0
        self.available = self.capacity
        self.max_queued = max_queued
        self.queued = 0  # requests read beyond each connection's next one
        self._waiting: dict[int, Callable[[], None]] = {}  # connections waiting to read again

    @classmethod
    def from_config(cls, config: Any) -> RequestMemory:
        """The bounds a ``BrokerConfig`` sets; ``ConfigError`` naming the settings for a pool
        smaller than the largest request (Kafka refuses to start then too)."""
        pool = config.get("queued.max.request.bytes")
        largest = config.get("socket.request.max.bytes")
        if 0 < pool < largest:
            from reference_broker.config import ConfigError  # the config imports the network

            raise ConfigError(
                f"queued.max.request.bytes ({pool}) must be at least socket.request.max.bytes ({largest})"
            )
        return cls(pool, config.get("queued.max.requests"))

    @property
    def pooled(self) -> bool:
        """``queued.max.request.bytes`` is on."""
        return self.capacity > 0

    def try_take(self, size: int) -> bool:
        """Take ``size`` bytes for a request being read: True while any are left (or without a
        pool), else False and the caller waits (``wait``)."""
        if not self.capacity:
            return True
        if self.available <= 0:
            return False
        self.available -= size
        return True

    def give_back(self, size: int) -> None:
        """A request taken with ``try_take`` was handed to its handler (or dropped)."""
        if not self.capacity or size <= 0:
            return
        self.available += size
        if self.available > 0:
            self._wake()

    def read_ahead(self) -> None:
        """A request was read beyond a connection's next one."""
        self.queued += 1

    def read_ahead_done(self, count: int = 1) -> None:
        """``count`` read-ahead requests became a connection's next one (or were dropped)."""
        was_full = self.queued >= self.max_queued
        self.queued -= count
        if was_full and self.queued < self.max_queued:
            self._wake()

    @property
    def read_ahead_full(self) -> bool:
        return self.queued >= self.max_queued

    def wait(self, key: int, resume: Callable[[], None]) -> None:
        """Call ``resume`` once pool bytes come back or read-ahead room frees (once)."""
        self._waiting[key] = resume

    def forget(self, key: int) -> None:
        self._waiting.pop(key, None)

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for resume in waiting.values():
            resume()
