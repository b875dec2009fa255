"""Broker services: parts with a life cycle (load at start, periodic work, stop), run by ``Broker``.

The group coordinator (and, next, the transaction coordinator) and the log's background chores
are services. ``Broker.start`` starts them in order after the storage is open and before
clients connect (a service whose loading takes time starts it in the background and answers
COORDINATOR_LOAD_IN_PROGRESS meanwhile); ``Broker.stop`` stops them in reverse order before the
storage is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("reference_broker.services")


@dataclasses.dataclass(frozen=True)
class PeriodicTask:
    """``run`` every ``interval_s`` seconds; a failing run is logged, not fatal."""

    name: str
    interval_s: float
    run: Callable[[], object]


class Service(Protocol):
    """A broker part with a life cycle."""

    name: str

    async def start(self) -> None: ...

    def periodic_tasks(self) -> list[PeriodicTask]: ...

    async def stop(self) -> None: ...


class ServiceRunner:
    """Starts services in order, runs their periodic tasks, stops them in reverse order."""

    def __init__(self) -> None:
        self.services: list[Service] = []
        self._started: list[Service] = []
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, service: Service) -> None:
        self.services.append(service)

    def get(self, name: str) -> Service | None:
        return next((s for s in self.services if s.name == name), None)

    async def start(self) -> None:
        for service in self.services:
            await service.start()
            self._started.append(service)
            for task in service.periodic_tasks():
                self._tasks.append(asyncio.create_task(_every(task), name=f"{service.name}:{task.name}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        while self._started:
            service = self._started.pop()
            try:
                await service.stop()
            except Exception:
                log.exception("stopping service %s failed", service.name)


async def _every(task: PeriodicTask) -> None:
    while True:
        await asyncio.sleep(task.interval_s)
        try:
            task.run()
        except Exception:
            log.exception("%s failed", task.name)


class LogChores:
    """The log's background work: retention and housekeeping (fsync of rolled segments, expiry of
    idle producer ids)."""

    name = "log-chores"
    HOUSEKEEPING_INTERVAL_S = 5.0

    def __init__(
        self, retention_interval_s: float, retention: Callable[[], None], housekeeping: Callable[[], None]
    ):
        self._retention_interval_s = retention_interval_s
        self._retention = retention
        self._housekeeping = housekeeping

    async def start(self) -> None:
        return None

    def periodic_tasks(self) -> list[PeriodicTask]:
        return [
            PeriodicTask("retention", self._retention_interval_s, self._retention),
            PeriodicTask("housekeeping", self.HOUSEKEEPING_INTERVAL_S, self._housekeeping),
        ]

    async def stop(self) -> None:
        return None


class LogCleanerChore:
    """The log cleaner (compaction) as a broker task: every ``log.cleaner.backoff.ms`` it compacts
    the dirtiest compacted log that needs it, one log per run (Kafka's cleaner thread backs off
    that long when no log needs cleaning)."""

    name = "log-cleaner"
    MIN_INTERVAL_S = 0.01

    def __init__(self, backoff_s: float, clean: Callable[[], object]):
        self._interval_s = max(backoff_s, self.MIN_INTERVAL_S)
        self._clean = clean

    async def start(self) -> None:
        return None

    def periodic_tasks(self) -> list[PeriodicTask]:
        return [PeriodicTask("cleaner", self._interval_s, self._clean)]

    async def stop(self) -> None:
        return None
