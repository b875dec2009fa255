"""A bounded set of segments whose files are open (Kafka's lazy index, with a cap).

A segment holds up to four descriptors (``.log``, ``.index``, ``.timeindex``, ``.txnindex``), and
a broker with many partitions or many rolled segments would run out of descriptors if each kept
them for its lifetime (after which even ``accept`` fails and no client is answered). Segments open
their files when first used and register here; when more than ``capacity`` segments hold files,
the least recently used one releases them (pending index entries written first) and reopens them
on its next use. Descriptors in use stay bounded by about four times ``capacity``.

Invariants:

* Only whole-call users touch a segment's descriptors: a descriptor number is never kept across a
  call that could open another segment's files (code that must walk a segment while other
  segments open, the cleaner's reads, uses a private descriptor).
* A released segment that was written since its last fsync is fsynced through a reopened
  descriptor at its next flush (``fsync`` applies to the file, whichever descriptor asks).
* Memory mappings handed out by reads stay valid after a release (a mapping does not need the
  descriptor it was made from).
"""

from __future__ import annotations

import logging
import resource
from collections import OrderedDict
from typing import Protocol

__all__ = ["DEFAULT_CAPACITY", "SEGMENT_FILES", "OpenSegmentFiles", "raise_descriptor_limit"]

log = logging.getLogger("reference_broker.log")

#: Segments with open files by default: 4,000 descriptors at most, far below the usual hard limit.
DEFAULT_CAPACITY = 1000
_MIN_CAPACITY = 16


class _Releasable(Protocol):
    def release_files(self) -> None: ...


class OpenSegmentFiles:
    """Least-recently-used registry of the segments holding descriptors."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self._open: OrderedDict[int, _Releasable] = OrderedDict()
        self.capacity = max(_MIN_CAPACITY, capacity)

    def __len__(self) -> int:
        return len(self._open)

    def configure(self, capacity: int) -> None:
        """Change the cap (at least 16 segments); releases the excess at once."""
        self.capacity = max(_MIN_CAPACITY, capacity)
        self._shrink()

    def opened(self, segment: _Releasable) -> None:
        """``segment`` opened a file (or used one): it becomes the most recently used."""
        key = id(segment)
        if key in self._open:
            self._open.move_to_end(key)
            return
        self._open[key] = segment
        self._shrink()

    def forget(self, segment: _Releasable) -> None:
        """``segment`` closed its files itself."""
        self._open.pop(id(segment), None)

    def _shrink(self) -> None:
        while len(self._open) > self.capacity:
            _, victim = self._open.popitem(last=False)
            try:
                victim.release_files()
            except OSError as exc:  # its descriptors are closed all the same
                log.error("writing a segment's index entries before closing its files failed: %s", exc)


#: The process's registry (one broker per process; in-process test brokers share it).
SEGMENT_FILES = OpenSegmentFiles()


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as Kafka's start scripts advise);
    returns the ``(soft, hard)`` limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard
