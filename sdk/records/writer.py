"""The one record writer, as the rest of the package uses it: the C writer when it is built, else
its Python twin (see :mod:`sdk.records._writer_py` for the rules both follow).

``sdk.records._writer`` is built from sdk/records/_writer.c when the package is installed where a
C compiler is present (it is ``optional`` in setup.py); without it, or with the environment
variable ``TOPICWRIGHT_PURE_PYTHON=1`` set when the package is imported, ``RecordBatchBuilder``
appends with the Python writer: the same bytes, answers and errors, only slower.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from sdk.records import _writer_py

__all__ = ["COMPILED", "PURE_PYTHON_ENV", "RecordSizer", "RecordsWriter"]

#: Set to 1 to use the Python twins even where the C extensions are built.
PURE_PYTHON_ENV = "TOPICWRIGHT_PURE_PYTHON"


def _load_core() -> ModuleType:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return _writer_py
    try:
        from sdk.records import _writer  # type: ignore[attr-defined]  # C, no stub
    except ImportError:  # built without a compiler: the Python twin
        return _writer_py
    return _writer


#: The writer module in use (the C one or its twin).
core: ModuleType = _load_core()
#: Whether the C writer is in use.
COMPILED = core is not _writer_py

if TYPE_CHECKING:  # both writers have the twin's interface
    from sdk.records._writer_py import RecordSizer, RecordsWriter
else:
    #: The writer ``RecordBatchBuilder`` is built on (its base class).
    RecordsWriter = core.RecordsWriter
    #: ``record_size_bound`` with a limit, for the producer's size check of every record.
    RecordSizer = core.RecordSizer
