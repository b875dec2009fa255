"""The one record writer, as the rest of the package uses it: the C writer when it is built, else
its Python twin (see :mod:`sdk.records._writer_py` for the rules both follow).

``sdk.records._writer`` is built from sdk/records/_writer.c when the package is installed where a
C compiler is present (it is ``optional`` in setup.py); without it, or with the environment
variable ``TOPICWRIGHT_PURE_PYTHON=1`` set when the package is imported, ``RecordBatchBuilder``
appends with the Python writer: the same bytes, answers and errors, only slower.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from sdk.records import _writer_py
from sdk.records._native import PURE_PYTHON_ENV, load

__all__ = ["COMPILED", "PURE_PYTHON_ENV", "RecordSizer", "RecordsWriter"]

#: The writer module in use (the C one or its twin).
core: ModuleType = load("_writer", _writer_py)
#: Whether the C writer is in use.
COMPILED = core is not _writer_py

if TYPE_CHECKING:  # both writers have the twin's interface
    from sdk.records._writer_py import RecordSizer, RecordsWriter
else:
    #: The writer ``RecordBatchBuilder`` is built on (its base class).
    RecordsWriter = core.RecordsWriter
    #: ``record_size_bound`` with a limit, for the producer's size check of every record.
    RecordSizer = core.RecordSizer
