"""The API index in docs/ARCHITECTURE.md lists exactly the APIs the broker registers, with their
versions and handler functions, so that finding an API's code takes one step."""

from __future__ import annotations

import re
from pathlib import Path

from reference_broker.handlers import HandlerRegistry, install_all

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
_ROW = re.compile(r"^\| (\d+) \| (\w+) \(([\d-]+)\) \| `([\w.]+)` \|", re.MULTILINE)


def _indexed() -> dict[int, tuple[str, str]]:
    section = ARCHITECTURE.read_text().split("### API index", 1)[1].split("\n## ", 1)[0]
    return {int(key): (versions, handler) for key, _name, versions, handler in _ROW.findall(section)}


def _registered() -> dict[int, tuple[str, str]]:
    registry = HandlerRegistry(None)  # type: ignore[arg-type]  # only the table is read
    install_all(registry)
    found = {}
    for h in registry.advertised():
        lo, hi = h.min_version, h.max_version
        versions = f"{lo}-{hi}" if lo != hi else f"{lo}"
        module = h.handle.__module__.rsplit(".", 1)[1]
        qualname = h.handle.__qualname__.split(".<locals>", 1)[0]
        found[h.api_key] = (versions, f"{module}.{qualname}")
    return found


def test_api_index_matches_the_registered_handlers() -> None:
    assert _indexed() == _registered()
