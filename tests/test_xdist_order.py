"""Under pytest-xdist the modules are handed out slowest first, each module whole.

``tests/conftest.py`` orders a worker's collection so that xdist (``--dist loadfile
--no-loadscope-reorder``) starts the modules with ``slow`` tests first, then Apache Kafka ones,
then other interop, then unit: the run then ends on short modules spread over every worker
instead of on one long one. Checked on a small suite of its own that uses the real conftest, with
one worker, where the run order is exactly the order xdist hands the modules out.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
INI = """[pytest]
addopts = -p no:cacheprovider -p no:randomly
markers =
    unit: no process
    interop: real processes
    apache_kafka: Kafka itself
    slow: tens of seconds
"""
MODULES = {
    # Collected in this (alphabetical) order; xdist's own reordering would put b_many first.
    "test_a_unit.py": "def test_a1():\n    pass\n\n\ndef test_a2():\n    pass\n",
    "test_b_many.py": "".join(f"def test_b{i}():\n    pass\n\n\n" for i in range(5)),
    "test_c_interop.py": "import subprocess\n\n\ndef test_c1():\n    assert subprocess\n",
    "test_d_slow.py": (
        "import pytest\n\n\ndef test_d1():\n    pass\n\n\n"
        "@pytest.mark.slow\ndef test_d2():\n    pass\n\n\ndef test_d3():\n    pass\n"
    ),
}


def run_order(suite: Path, *args: str) -> list[str]:
    """The tests of ``suite`` in the order they ran (``-v`` report lines), as ``module::test``."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", *args], cwd=suite, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return re.findall(r"(test_\w+\.py::test_\w+)", "\n".join(
        line for line in result.stdout.splitlines() if "PASSED" in line
    ))


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(CONFTEST, tests / "conftest.py")
    (tmp_path / "pytest.ini").write_text(INI)
    for name, text in MODULES.items():
        (tests / name).write_text(text)
    return tmp_path


def test_an_xdist_worker_runs_the_slow_module_first_then_interop_then_unit(suite: Path) -> None:
    order = run_order(suite, "-n", "1", "--dist", "loadfile", "--no-loadscope-reorder")
    modules = list(dict.fromkeys(test.split("::")[0] for test in order))
    assert modules == ["test_d_slow.py", "test_c_interop.py", "test_a_unit.py", "test_b_many.py"], order
    # A module keeps its own order.
    assert [t for t in order if "test_d_slow" in t] == [f"test_d_slow.py::test_d{i}" for i in (1, 2, 3)]


def test_a_run_without_xdist_keeps_the_collection_order(suite: Path) -> None:
    order = run_order(suite)
    assert order == sorted(order), order
