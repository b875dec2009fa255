"""Kafka clients kept in each Python worker between Spark tasks, as Spark's connector keeps its
KafkaConsumer and KafkaProducer per executor (KafkaDataConsumer's pool, CachedKafkaProducer).

A PySpark worker process runs many tasks one after another; each task used to connect, look up
metadata and, for a transactional producer, find its coordinator and initialise its id, for a
few milliseconds of work. The rules, Spark's own:

- A client is borrowed by one task at a time: ``borrow`` takes it out of the pool, ``give_back``
  returns it once the task is done with it, and a client whose task failed is closed instead
  (``discard``), so a broken connection or a fenced producer is never handed to the next task.
- A client is found by everything that shapes it: the connection settings, and what else the
  caller puts in the key (a consumer's partition, so a micro-batch goes on where the previous
  one stopped with the records already fetched; a transactional producer's transactional id,
  so a transactional producer is never used for another id).
- Idle clients expire (``IDLE_TIMEOUT_S``, Spark's ``spark.kafka.consumer.cache.timeout`` of
  5 minutes) and at most ``CAPACITY`` are kept idle (the oldest closed first); both are applied
  whenever a client is borrowed or given back, and the rest are closed when the worker exits
  (``atexit``: a worker killed by Spark closes nothing, and its sockets close with it).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

Client = TypeVar("Client")

#: Seconds an idle client is kept (Spark's consumer cache timeout).
IDLE_TIMEOUT_S = 300.0
#: Idle clients kept per pool at most (Spark's ``spark.kafka.consumer.cache.capacity`` is 64;
#: a worker here serves one task at a time, so a few are enough). The environment variable
#: ``TOPICWRIGHT_SPARK_CLIENT_POOL`` sets it for the worker processes (0: no reuse, every task
#: makes and closes its own clients, which is how the reuse is measured).
CAPACITY = int(os.environ.get("TOPICWRIGHT_SPARK_CLIENT_POOL", "16"))


def settings_key(settings: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable key of client settings (values by ``repr``: some, like an SSL context, are not
    hashable; two equal settings give the same key)."""
    return tuple(sorted((name, repr(value)) for name, value in settings.items()))


class ClientPool(Generic[Client]):
    """Idle clients by key, each borrowed by one task at a time (see the module's rules)."""

    def __init__(self, name: str, close: Callable[[Client], None], idle_timeout_s: float = IDLE_TIMEOUT_S,
                 capacity: int = CAPACITY) -> None:
        self.name = name
        self._close = close
        self.idle_timeout_s = idle_timeout_s
        self.capacity = capacity
        #: key -> idle clients with the time each was given back, oldest first.
        self._idle: dict[Hashable, list[tuple[float, Client]]] = {}
        self._lock = threading.Lock()
        #: Clients handed out by ``borrow`` since the pool started (reused ones), for tests.
        self.reused = 0

    def borrow(self, key: Hashable) -> Client | None:
        """An idle client of ``key``, now the caller's alone, or None (the caller makes one)."""
        with self._lock:
            expired = self._expire(time.monotonic())
            idle = self._idle.get(key)
            client = idle.pop()[1] if idle else None
            if idle == []:
                del self._idle[key]
            if client is not None:
                self.reused += 1
        self._close_all(expired)
        return client

    def give_back(self, key: Hashable, client: Client) -> None:
        """``client`` is idle again, for the next task that asks for ``key``."""
        with self._lock:
            now = time.monotonic()
            self._idle.setdefault(key, []).append((now, client))
            expired = self._expire(now)
            expired += self._over_capacity()
        self._close_all(expired)

    def discard(self, client: Client) -> None:
        """Close a borrowed client that must not be used again (its task failed with it)."""
        self._close_all([client])

    def close_all(self) -> None:
        """Close every idle client (the worker is exiting)."""
        with self._lock:
            clients = [client for idle in self._idle.values() for _, client in idle]
            self._idle.clear()
        self._close_all(clients)

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def _expire(self, now: float) -> list[Client]:
        expired: list[Client] = []
        for key in list(self._idle):
            idle = self._idle[key]
            kept = [(at, client) for at, client in idle if now - at < self.idle_timeout_s]
            expired.extend(client for at, client in idle if now - at >= self.idle_timeout_s)
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        return expired

    def _over_capacity(self) -> list[Client]:
        entries = sorted((at, id(client), key) for key, idle in self._idle.items() for at, client in idle)
        surplus: list[Client] = []
        for at, ident, key in entries[: max(len(entries) - self.capacity, 0)]:
            idle = self._idle[key]
            for index, (given_at, client) in enumerate(idle):
                if given_at == at and id(client) == ident:
                    surplus.append(idle.pop(index)[1])
                    break
            if not idle:
                del self._idle[key]
        return surplus

    def _close_all(self, clients: list[Client]) -> None:
        for client in clients:
            try:
                self._close(client)
            except Exception:  # a client that cannot close cleanly is dropped all the same
                log.debug("%s: closing a pooled client failed", self.name, exc_info=True)


_pools: list[ClientPool[Any]] = []


def new_pool(name: str, close: Callable[[Client], None]) -> ClientPool[Client]:
    """A pool of this process, closed at its exit."""
    pool: ClientPool[Client] = ClientPool(name, close, capacity=CAPACITY)
    _pools.append(pool)
    return pool


@atexit.register
def _close_pools() -> None:
    for pool in _pools:
        pool.close_all()
