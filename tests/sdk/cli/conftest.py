"""Fixtures for the command-line tool's tests: the installed ``topicwright`` script run as a
person runs it (a subprocess, its stdout, stderr and exit code), unique names, and waiting for a
condition with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The console script ``pip install`` put beside this interpreter.
SCRIPT = Path(sys.executable).parent / "topicwright"


@dataclass
class Run:
    """One finished ``topicwright`` command."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def table(self) -> list[dict[str, str]]:
        """The rows of the first table on stdout (the lines after the first one starting with an
        upper-case header, up to a blank line), as header -> cell."""
        lines = self.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.split() and line.split()[0].isupper())
        headers = lines[start].split()
        rows = []
        for line in lines[start + 1 :]:
            if not line.strip():
                break
            rows.append(dict(zip(headers, line.split(), strict=True)))
        return rows

    def __str__(self) -> str:
        command = " ".join(self.args)
        return f"topicwright {command} -> {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


class Cli:
    """Runs ``topicwright`` against one cluster (``--bootstrap-server`` added unless given)."""

    def __init__(self, bootstrap: str | None) -> None:
        self.bootstrap = bootstrap

    def __call__(
        self,
        *args: str,
        stdin: str | bytes | None = None,
        bootstrap: bool = True,
        env: dict[str, str] | None = None,
        timeout: float = 90.0,
        check: bool = True,
    ) -> Run:
        """Run a command; with ``check`` (the default) a non-zero exit fails the test."""
        command = [str(SCRIPT), *args]
        if bootstrap and self.bootstrap is not None and "--bootstrap-server" not in args and "-b" not in args:
            command += ["--bootstrap-server", self.bootstrap]
        environment = {k: v for k, v in os.environ.items() if k != "TOPICWRIGHT_BOOTSTRAP"}
        environment.update(env or {})
        data = stdin.encode() if isinstance(stdin, str) else stdin
        result = subprocess.run(command, input=data, capture_output=True, timeout=timeout, env=environment)
        run = Run(
            command[1:],
            result.returncode,
            result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"),
        )
        if check:
            assert run.returncode == 0, str(run)
        return run


@pytest.fixture(scope="session", autouse=True)
def installed_script() -> Path:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: `pip install -e .` installs the console script"
    return SCRIPT


@pytest.fixture
def name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique names (topics, groups, transactional ids) for this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:50]
    return lambda prefix: f"{prefix}-{base}-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0, interval: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy (and return that), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)
