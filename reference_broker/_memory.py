"""Process-wide allocator tuning for the broker process (glibc only; elsewhere nothing happens).

A produce request of a full batch is a 1 MiB frame (its buffer is reused by the connection's next
large frame, and the records are validated and written in place), but appends that must be
copied (coordinators', small frames) and fetch reads allocate blocks of that size too. With glibc's
defaults such blocks are handed back to the kernel as soon as they are freed (they come from
``mmap``, or sit at the top of the heap past the trim threshold), so the next one faults every page
in again: measured here, before the reuse, 0.5 ms of the ~1.3 ms a 1 MiB append took, and the
produce round trip is part of librdkafka's throughput. Raising both thresholds
keeps freed memory in the process for the next request, which is what the JVM's heap does for
Kafka. The cost would be a process that never shrinks after a burst of large requests (big
fetches, many connections at once): ``ReturnFreedMemory`` gives the freed memory back to the kernel
with ``malloc_trim`` once more than ``RETURN_ABOVE_BYTES`` of it is idle in the heap, checked by a
periodic broker chore, so a burst costs its peak only while it lasts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from typing import Any

log = logging.getLogger("reference_broker")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Requests up to this size are served from the heap and their memory reused.
MMAP_THRESHOLD = 64 * 1024 * 1024
#: Freed memory at the top of the heap is kept up to this much.
TRIM_THRESHOLD = 256 * 1024 * 1024


#: Freed heap memory the process keeps for reuse between two checks; above it, it is returned.
RETURN_ABOVE_BYTES = 32 * 1024 * 1024


def _glibc() -> Any | None:
    """The C library, when it is glibc on Linux (it has ``mallopt``); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018  # glibc's, absent from musl
    except (OSError, AttributeError):
        return None
    return libc


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): sizes as ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]


class ReturnFreedMemory:
    """Hands freed heap memory back to the kernel (glibc's ``malloc_trim(0)``, which releases the
    free top of each arena and the free pages inside it) when more than ``return_above_bytes`` of
    it is free. Where the C library is not glibc, ``available`` is False and ``check`` does nothing.

    With glibc 2.33+ the free amount is read with ``mallinfo2`` so that a heap with little free
    memory is left alone (its blocks stay for reuse); on older glibc every check trims.
    """

    def __init__(self, return_above_bytes: int = RETURN_ABOVE_BYTES):
        if return_above_bytes < 0:
            raise ValueError(f"return_above_bytes must not be negative, not {return_above_bytes}")
        self.return_above_bytes = return_above_bytes
        libc = _glibc()
        self._trim = getattr(libc, "malloc_trim", None) if libc is not None else None
        if self._trim is not None:
            self._trim.argtypes = [ctypes.c_size_t]
            self._trim.restype = ctypes.c_int
        self._mallinfo2 = getattr(libc, "mallinfo2", None) if libc is not None else None
        if self._mallinfo2 is not None:
            self._mallinfo2.argtypes = []
            self._mallinfo2.restype = _MallInfo2

    @property
    def available(self) -> bool:
        """True when this process's allocator can be trimmed."""
        return self._trim is not None

    def free_bytes(self) -> int | None:
        """Freed memory kept in the heap now; None when the allocator does not tell."""
        if self._mallinfo2 is None:
            return None
        return int(self._mallinfo2().fordblks)

    def check(self) -> bool:
        """Return the freed memory to the kernel if there is enough of it; True when it trimmed."""
        if self._trim is None:
            return False
        free = self.free_bytes()
        if free is not None and free <= self.return_above_bytes:
            return False
        self._trim(0)
        return True


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse; True when it took the settings."""
    libc = _glibc()
    if libc is None:
        return False  # not glibc (e.g. musl has no mallopt): defaults stay
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not done:
        log.info("could not tune the allocator (mallopt refused); large requests will be slower")
    return done
