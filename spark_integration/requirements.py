"""The PySpark the integration needs, checked at import: the Python Data Source API came with
PySpark 4.0, and read limits and Trigger.AvailableNow for Python stream readers with 4.2."""

from __future__ import annotations

import re
import sys
from importlib import metadata

#: The distribution extra that installs a suitable PySpark.
EXTRA = "topicwright[spark]"
MINIMUM = (4, 0)
MINIMUM_STREAMING = (4, 2)


def version_tuple(version: str) -> tuple[int, int]:
    """``"4.3.0"`` -> ``(4, 3)``; an unreadable version -> ``(0, 0)``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def installed_pyspark() -> str | None:
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return None


def check_pyspark(installed: str | None, needed: tuple[int, int] = MINIMUM,
                  what: str = "spark_integration") -> None:
    """ImportError naming the extra to install when ``installed`` (a PySpark version, None: not
    installed) is older than ``needed``."""
    wanted = ".".join(map(str, needed))
    if installed is None:
        raise ImportError(f"{what} needs PySpark {wanted} or newer, which is not installed for "
                          f"{sys.executable}: pip install '{EXTRA}'{_WORKER_HINT}")
    if version_tuple(installed) < needed:
        raise ImportError(f"{what} needs PySpark {wanted} or newer, not {installed} "
                          f"(in {sys.executable}): pip install -U '{EXTRA}'{_WORKER_HINT}")


#: Spark starts its Python workers with ``PYSPARK_PYTHON`` (default ``python3`` on the PATH), not
#: with the driver's interpreter, so a virtual environment the driver runs in is not the workers'
#: unless it is activated or named.
_WORKER_HINT = ("; in a Spark Python worker, point PYSPARK_PYTHON (or spark.pyspark.python) at "
                "the interpreter that has the package")
