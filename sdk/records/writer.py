"""The one record writer, as the rest of the package uses it: the C writer when it is built, else
its Python twin (see :mod:`sdk.records._writer_py` for the rules both follow).

``sdk.records._writer`` is built from sdk/records/_writer.c when the package is installed where a
C compiler is present (it is ``optional`` in pyproject.toml); without it, or with the environment
variable ``TOPICWRIGHT_PURE_PYTHON=1`` set when the package is imported, ``RecordBatchBuilder``
appends with the Python writer: the same bytes, answers and errors, only slower.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sdk.records import _writer_py

__all__ = ["COMPILED", "PURE_PYTHON_ENV", "RecordsWriter"]

#: Set to 1 to use the Python twins even where the C extensions are built.
PURE_PYTHON_ENV = "TOPICWRIGHT_PURE_PYTHON"


def _load_writer() -> type[_writer_py.RecordsWriter]:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return _writer_py.RecordsWriter
    try:
        from sdk.records import _writer  # type: ignore[attr-defined]  # C, no stub
    except ImportError:  # built without a compiler: the Python twin
        return _writer_py.RecordsWriter
    return _writer.RecordsWriter


if TYPE_CHECKING:  # both writers have the twin's interface
    from sdk.records._writer_py import RecordsWriter
else:
    #: The writer ``RecordBatchBuilder`` is built on (its base class).
    RecordsWriter = _load_writer()
#: Whether the C writer is in use.
COMPILED = RecordsWriter is not _writer_py.RecordsWriter
