"""Kafka's framing: every request and response is a 4-byte big-endian size, then that many bytes.

The size check happens before any allocation, so a hostile or confused peer announcing a huge
frame costs us four bytes of reading, not a gigabyte buffer (Kafka's ``InvalidReceiveException``).
"""

from __future__ import annotations

import asyncio
import struct

_SIZE = struct.Struct(">i")
SIZE_PREFIX = _SIZE.size


class FrameError(Exception):
    """A size prefix the broker will not read; the connection must be closed."""


async def read_frame(reader: asyncio.StreamReader, max_size: int) -> bytes | None:
    """The next frame's payload, or None when the peer closed cleanly between frames.

    Raises ``FrameError`` for a negative or too large size and ``asyncio.IncompleteReadError``
    when the stream ends inside a frame (a truncated request).
    """
    try:
        head = await reader.readexactly(SIZE_PREFIX)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    (size,) = _SIZE.unpack(head)
    if size < 0:
        raise FrameError(f"negative frame size {size}")
    if size > max_size:
        raise FrameError(f"frame size {size} is larger than socket.request.max.bytes ({max_size})")
    return await reader.readexactly(size)


def start_frame() -> bytearray:
    """A buffer with room for the size prefix; encode the payload after it, then ``finish_frame``."""
    return bytearray(SIZE_PREFIX)


def finish_frame(buf: bytearray) -> bytearray:
    """Fill in the size prefix reserved by ``start_frame`` (no copy of the payload)."""
    _SIZE.pack_into(buf, 0, len(buf) - SIZE_PREFIX)
    return buf
