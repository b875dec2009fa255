"""Wake-ups for Fetch long polls: produce appends notify, waiting fetches resume.

A waiting fetch registers one ``Watch`` on each of its partitions for as long as it waits, and an
append to a partition tells only the watches registered there which partition changed. A woken
fetch therefore looks again at the partitions that changed, not at every partition it asked for,
and registering costs once per fetch, not once per wake-up. Partitions nobody waits on cost
nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from types import TracebackType


class Watch:
    """One waiting fetch's registration: the keys notified since it last looked."""

    __slots__ = ("_future", "_owner", "keys", "notified")

    def __init__(self, owner: DataWaiters, keys: Iterable[Hashable]):
        self._owner = owner
        self.keys = list(dict.fromkeys(keys))
        self.notified: set[Hashable] = set()
        self._future: asyncio.Future[None] | None = None

    def _on_notify(self, key: Hashable) -> None:
        self.notified.add(key)
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    async def wait(self, timeout: float) -> set[Hashable]:
        """The keys notified since the last call, waiting up to ``timeout`` seconds for one;
        empty when the time ran out first."""
        if not self.notified and timeout > 0:
            self._future = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._future, timeout)
            except TimeoutError:
                pass
            finally:
                self._future = None
        notified, self.notified = self.notified, set()
        return notified

    def __enter__(self) -> Watch:
        for key in self.keys:
            self._owner._waiting.setdefault(key, set()).add(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        waiting = self._owner._waiting
        for key in self.keys:
            watches = waiting.get(key)
            if watches is not None:
                watches.discard(self)
                if not watches:
                    del waiting[key]


class DataWaiters:
    """Per-partition watch lists; keys are ``(topic_name, partition)`` tuples."""

    def __init__(self) -> None:
        self._waiting: dict[Hashable, set[Watch]] = {}

    def notify(self, key: Hashable) -> None:
        """New data (or a change that ends the wait, like a deletion) in one partition."""
        watches = self._waiting.get(key)
        if watches:
            for watch in list(watches):
                watch._on_notify(key)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify(key)

    def watch(self, keys: Iterable[Hashable]) -> Watch:
        """A registration on ``keys``, active inside its ``with`` block."""
        return Watch(self, keys)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until any key is notified or ``timeout`` seconds pass; True if notified."""
        with self.watch(keys) as watch:
            return bool(await watch.wait(timeout))

    def watching(self, key: Hashable) -> int:
        """How many watches are registered on ``key``."""
        return len(self._waiting.get(key, ()))
