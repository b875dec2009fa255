"""Broker services: parts with a life cycle (load at start, periodic work, stop), run by ``Broker``.

The group coordinator (and, next, the transaction coordinator) and the log's background chores
are services. ``Broker.start`` starts them in order after the storage is open and before
clients connect (a service whose loading takes time starts it in the background and answers
COORDINATOR_LOAD_IN_PROGRESS meanwhile); ``Broker.stop`` stops them in reverse order before the
storage is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from reference_broker.log.cleaner import InThread

log = logging.getLogger("reference_broker.services")

_T = TypeVar("_T")


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
    """The log cleaner (compaction): ``threads`` cleaners (``log.cleaner.threads``), each
    compacting the dirtiest compacted log no other one is cleaning, one log at a time, and
    sleeping ``log.cleaner.backoff.ms`` when no log needs it (Kafka's cleaner threads). A pass
    reads and writes in a worker thread of its own, so clients are served meanwhile (see
    ``reference_broker.log.cleaner``); ``stop`` aborts the passes under way and waits for them."""

    name = "log-cleaner"
    MIN_INTERVAL_S = 0.01

    def __init__(
        self,
        backoff_s: float,
        clean: Callable[[InThread], Awaitable[str | None]],
        abort: Callable[[str], None],
        threads: int = 1,
    ):
        if threads < 0:
            raise ValueError(f"log.cleaner.threads must be at least 0, not {threads}")
        self._interval_s = max(backoff_s, self.MIN_INTERVAL_S)
        self._clean = clean
        self._abort = abort
        self._threads = threads
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        if self._threads == 0:
            log.warning("log.cleaner.threads is 0: no log is compacted")
            return
        self._stopping = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self._threads, thread_name_prefix="log-cleaner")
        self._tasks = [asyncio.create_task(self._cleaner(), name=f"log-cleaner-{i}")
                       for i in range(self._threads)]

    @property
    def backoff_s(self) -> float:
        """How long a cleaner sleeps when no log needs cleaning."""
        return self._interval_s

    def periodic_tasks(self) -> list[PeriodicTask]:
        return []  # the cleaners are tasks of their own, started by start()

    def _in_thread(self, fn: Callable[[], _T]) -> Awaitable[_T]:
        assert self._executor is not None
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _cleaner(self) -> None:
        while not self._stopping.is_set():
            try:
                cleaned = await self._clean(self._in_thread)
            except Exception:
                log.exception("cleaner failed")
                cleaned = None
            if cleaned is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self._interval_s)

    async def stop(self) -> None:
        self._stopping.set()
        self._abort("the broker is stopping")
        for task in self._tasks:
            await task
        self._tasks.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class MemoryReturnChore:
    """Every ``interval_s`` seconds, gives the heap memory freed after a burst of large requests
    back to the kernel (``reference_broker._memory.ReturnFreedMemory``); the check itself costs a
    few microseconds, and nothing is done where the allocator cannot be trimmed."""

    name = "memory-return"
    INTERVAL_S = 2.0

    def __init__(self, check: Callable[[], object], interval_s: float = INTERVAL_S):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self._check = check
        self._interval_s = interval_s

    async def start(self) -> None:
        return None

    def periodic_tasks(self) -> list[PeriodicTask]:
        return [PeriodicTask("return-freed-memory", self._interval_s, self._check)]

    async def stop(self) -> None:
        return None
