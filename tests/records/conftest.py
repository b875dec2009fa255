"""Fixtures of the sdk.records tests: the record reader each test runs on."""

from __future__ import annotations

from types import ModuleType

import pytest

from sdk.records import _reader_py, reader

#: The C reader when it is built, else None.
C_READER: ModuleType | None = reader.core if reader.COMPILED else None


@pytest.fixture(params=["c", "python"])
def reader_core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Everything that reads records (batches, the walk, the consumer) on the C reader, then on
    its Python twin."""
    if request.param == "c":
        if C_READER is None:
            pytest.skip("sdk.records._reader is not built")
        core = C_READER
    else:
        core = _reader_py
    monkeypatch.setattr(reader, "core", core)
    return core
