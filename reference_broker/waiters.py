"""Wake-ups for Fetch long polls: produce appends notify, waiting fetches resume.

One set of futures per partition, rather than an ``asyncio.Condition`` per partition, so a fetch
over many partitions registers one future everywhere and wakes on the first append to any of them,
and partitions nobody waits on cost nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class DataWaiters:
    """Per-partition wait lists; keys are ``(topic_id_or_name, partition)`` tuples."""

    def __init__(self) -> None:
        self._waiting: dict[Hashable, set[asyncio.Future[None]]] = {}

    def notify(self, key: Hashable) -> None:
        """New data (or a change that ends the wait, like a deletion) in one partition."""
        futures = self._waiting.pop(key, None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify(key)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until any key is notified or ``timeout`` seconds pass; True if notified."""
        if timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiting.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiting[key]
