"""Small durable-file helpers shared by the log modules.

Metadata files (checkpoints, snapshots, topic metadata) are replaced atomically: write a temp file,
fsync it, rename it over the old one, fsync the directory. A crash at any point leaves either the
old or the new content, never a mix; stray ``*.tmp`` files are removed when a log is opened.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

__all__ = ["atomic_write", "fsync_dir", "os_error_text", "pread_exact", "pwrite_all", "remove_quietly"]

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    """Make renames/creations/unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """``os.pwrite`` until every byte is written (pwrite may write less than asked)."""
    size = len(data)
    if not size:
        return
    written = os.pwrite(fd, data, position)
    if written == size:  # the usual case: no view, no loop (once per append)
        return
    view = memoryview(data)[written:]
    position += written
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def pread_exact(fd: int, length: int, position: int) -> bytes:
    """Read ``length`` bytes at ``position``; fewer only at end of file."""
    data = os.pread(fd, length, position)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


#: Reads at least this large are served from a read-only mapping of the file (``read_mapped``).
MAP_MIN_BYTES = 1024 * 1024
_MAP_FLAGS = getattr(mmap, "MAP_SHARED", 0) | getattr(mmap, "MAP_POPULATE", 0)


def read_mapped(fd: int, length: int, position: int) -> bytes | memoryview:
    """``length`` bytes at ``position`` as a view of a read-only mapping; ``pread_exact`` when the
    range is small or cannot be mapped.

    A Fetch reads up to ``max.partition.fetch.bytes`` (10 MiB in the benchmark) per partition.
    ``pread`` copies that into a freshly allocated object, whose pages the kernel must fault in
    and zero first (the allocator returns large blocks to the system between fetches), before the
    socket send copies it again. Mapping the page-cache pages leaves only that last copy: the
    view goes to the transport as it is (10 MiB: about 0.1 ms instead of 2 to 7 ms). The mapping
    is never closed explicitly: it is unmapped when the last view of it is dropped (after the
    response has been sent). That is safe because a segment's bytes are only appended to while
    the broker runs (truncation happens at recovery, before anything is served), and a deleted
    segment's pages stay valid while mapped.
    """
    if length < MAP_MIN_BYTES:
        return pread_exact(fd, length, position)
    end = min(position + length, os.fstat(fd).st_size)
    if end <= position:
        return b""
    start = position - position % mmap.ALLOCATIONGRANULARITY
    try:
        mapping = mmap.mmap(fd, end - start, flags=_MAP_FLAGS, prot=mmap.PROT_READ, offset=start)
    except (OSError, ValueError, AttributeError, TypeError):  # no Unix mmap flags: plain read
        return pread_exact(fd, length, position)
    # PROT_READ pages: the view must say read-only, or a write through it would crash the broker.
    return memoryview(mapping).toreadonly()[position - start :]


def remove_quietly(path: Path) -> None:
    """Delete ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def os_error_text(exc: BaseException) -> str:
    """An OS error as clients may read it: the reason and the file's own name, never its absolute
    path (the data directory's location is the operator's business, not a client's)."""
    if not isinstance(exc, OSError) or exc.strerror is None:
        return str(exc)
    if exc.filename is None:
        return exc.strerror
    return f"{exc.strerror}: {Path(os.fsdecode(exc.filename)).name}"
