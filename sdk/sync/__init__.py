"""Blocking facades over the asyncio clients, for scripts, notebooks and Spark executors.

Every facade in a process shares one event loop running on a daemon thread (``sdk.sync._loop``:
started on first use, and started anew in a forked child, where the parent's thread does not
exist). The async client does all the I/O there; the calling threads only serialize and hand
records over, through the async client's public entry points.

Thread safety: every method may be called from any thread, concurrently. Records sent from one
thread keep their order; records from different threads interleave in no defined order. Methods
must not be called from the shared loop's own thread (for example from an interceptor or a
delivery callback), because they would wait for that thread.

The facades are resolved lazily (PEP 562): a process that needs one of them (a Spark worker
reading with ``Consumer``) does not load the others' async clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._lazy import lazy_attributes
from sdk.sync._loop import LoopThread, shared_loop

if TYPE_CHECKING:
    from sdk.sync.admin import AdminClient
    from sdk.sync.consumer import Consumer
    from sdk.sync.producer import DeliveryFuture, Producer

#: Public name -> the module defining it.
_LAZY: dict[str, str] = {
    "AdminClient": "sdk.sync.admin",
    "Consumer": "sdk.sync.consumer",
    "DeliveryFuture": "sdk.sync.producer",
    "Producer": "sdk.sync.producer",
}

__all__ = ["AdminClient", "Consumer", "DeliveryFuture", "LoopThread", "Producer", "shared_loop"]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
