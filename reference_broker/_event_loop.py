"""Which asyncio event loop the broker runs on: uvloop's where it is installed, else asyncio's.

The broker is one Python thread serving every connection, so the loop's own cost per request
(readiness polling, the transport's read and write paths, callback scheduling) is paid for each
of the thousand one-partition produce requests librdkafka sends per second per partition. uvloop
runs that part in C on libuv: measured in one run against the same broker on the standard loop
(``bench_broker``'s 8-partition produce phase, librdkafka as the load generator), it took about
0.15 µs of broker CPU per message off (1.09 -> 0.94). Everything the broker
does is plain asyncio API (protocols, transports, futures), so both loops serve the same bytes;
``--event-loop asyncio`` keeps the standard loop selectable, and the tests run both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


class EventLoopError(ValueError):
    """The event loop asked for is unknown or not installed."""


def loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory for ``asyncio.Runner``: ``auto`` picks uvloop when installed, else asyncio."""
    if name not in EVENT_LOOPS:
        raise EventLoopError(f"unknown event loop {name!r}; choose one of {', '.join(EVENT_LOOPS)}")
    if name == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError as exc:
        if name == "auto":
            return asyncio.new_event_loop
        raise EventLoopError(f"event loop uvloop is not installed: {exc}") from None
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which kind of loop ``loop`` is (for the startup log line)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
