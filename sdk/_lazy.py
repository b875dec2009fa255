"""Package attributes resolved on first use (PEP 562), so importing a package loads only the
modules its importer touches: a Spark worker that needs one data-source class, or a client that
needs ``TopicPartition``, does not pay for every client, facade and message class.

Each package keeps a table ``name -> module`` (the attribute has the same name) or
``name -> (module, attribute)`` (``attribute`` empty for the module itself) and its
``TYPE_CHECKING`` imports for type checkers; a resolved value is stored in the package's
namespace, so the lookup runs once per name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

LazyTable = Mapping[str, "str | tuple[str, str]"]


def lazy_attributes(
    package: str, table: LazyTable, namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for ``table``."""

    def __getattr__(name: str) -> Any:
        try:
            entry = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module_name, attribute = (entry, name) if isinstance(entry, str) else entry
        module = importlib.import_module(module_name)
        value = getattr(module, attribute) if attribute else module
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
