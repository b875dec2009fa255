"""Which implementation of a hot loop ``sdk.records`` uses: its C extension or its Python twin.

Each C extension (built from ``sdk/records/_*.c`` where a compiler is present; optional in
setup.py) has a Python twin with the same results and errors, which the tests hold it to. The twin
is used where the extension was not built, and everywhere when ``TOPICWRIGHT_PURE_PYTHON=1`` is
set before the package is imported.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "load"]

#: Set to 1 to use the Python twins even where the C extensions are built.
PURE_PYTHON_ENV = "TOPICWRIGHT_PURE_PYTHON"


def load(extension: str, twin: ModuleType) -> ModuleType:
    """``sdk.records.<extension>`` (C), or ``twin`` when it is not built or not wanted."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return twin
    try:
        return importlib.import_module(f"sdk.records.{extension}")
    except ImportError:  # built without a compiler
        return twin
