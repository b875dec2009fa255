"""RecordBatchBuilder on either record writer, for tests that compare the C writer with its twin."""

from __future__ import annotations

import importlib
from types import MemberDescriptorType, ModuleType
from typing import Any

from sdk.records import _writer_py, builder, writer

#: The C writer's module when it is built, else None.
C_WRITER: ModuleType | None = importlib.import_module("sdk.records._writer") if writer.COMPILED else None


def _builder_on(base: type) -> Any:
    """A RecordBatchBuilder class whose records are written by ``base`` (a RecordsWriter)."""
    if builder.RecordBatchBuilder.__bases__ == (base,):
        return builder.RecordBatchBuilder
    namespace = {
        name: value
        for name, value in vars(builder.RecordBatchBuilder).items()
        if name not in ("__dict__", "__weakref__") and not isinstance(value, MemberDescriptorType)
    }
    return type("RecordBatchBuilder", (base,), namespace)


def python_builder() -> Any:
    """RecordBatchBuilder on the Python writer."""
    return _builder_on(_writer_py.RecordsWriter)


def c_builder() -> Any:
    """RecordBatchBuilder on the C writer (only when it is built)."""
    assert C_WRITER is not None
    return _builder_on(C_WRITER.RecordsWriter)
