"""The one record reader, as the rest of the package uses it: the C reader when it is built,
else its Python twin (see :mod:`sdk.records._reader_py` for the rules both follow).

``sdk.records._reader`` is built from sdk/records/_reader.c when the package is installed where a
C compiler is present (it is ``optional`` in setup.py); without it, or with the environment
variable ``TOPICWRIGHT_PURE_PYTHON=1`` set when the package is imported (as for the writer), every
reader here is the Python one, with the same results and errors, only slower.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

from sdk.records import _reader_py
from sdk.records._native import load

__all__ = ["COMPILED", "RecordsWalk", "core", "walk_records"]


#: The reader in use (``walk_records``, ``read_records``). Callers look
#: it up at each use (``reader.core``), so tests can run everything on either reader.
core: ModuleType = load("_reader", _reader_py)
#: Whether the C reader is in use.
COMPILED = core is not _reader_py


class RecordsWalk(NamedTuple):
    """What one pass over a batch's records found.

    Timestamps are deltas from the batch's ``base_timestamp`` (``None`` when there are no
    records). ``first_offset_gap`` is the index of the first record whose offset delta is not its
    index (-1 when they run 0..n-1, as a producer must write them; compaction leaves gaps in
    batches read from a log). ``first_null_key`` is the index of the first record without a key
    (-1 when all have one; compacted topics require keys).
    """

    count: int  # type: ignore[assignment]  # a field named count shadows tuple.count, by design
    min_timestamp_delta: int | None
    max_timestamp_delta: int | None
    first_offset_gap: int
    first_null_key: int


def walk_records(data: bytes | bytearray | memoryview, start: int, end: int, count: int) -> RecordsWalk:
    """Walk the ``count`` records that must fill ``data[start:end]`` exactly, without building
    them: what validating an append needs. Raises what reading the records raises."""
    return RecordsWalk._make(core.walk_records(data, start, end, count))
