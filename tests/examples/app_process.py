"""An example app run as a user runs it: a child process whose output lines the test reads, and
what the app left in a topic.

The lines are collected by a reader thread, so a test waits for a condition over them (with a
deadline) instead of sleeping; every process started is stopped by PID at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sdk import TopicPartition
from sdk.sync import Consumer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


class AppProcess:
    """``python examples/<script> <args>``; ``lines`` holds what it printed so far (stdout and
    stderr merged)."""

    def __init__(self, script: str, args: Sequence[str]) -> None:
        self.command = [sys.executable, "-u", str(EXAMPLES / script), *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, condition: Callable[[list[str]], bool], timeout: float, what: str) -> None:
        """Wait until ``condition(lines)`` holds; fail with the output if the deadline passes or
        the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(list(self.lines)):
                return
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                if condition(list(self.lines)):
                    return
                raise AssertionError(
                    f"{self.command} exited {self.process.returncode} before {what}:\n{self.output}"
                )
            time.sleep(0.05)
        raise AssertionError(f"{self.command}: no {what} within {timeout} s:\n{self.output}")

    def wait_for_line(self, text: str, timeout: float = 60) -> None:
        self.wait_for(lambda lines: any(text in line for line in lines), timeout, repr(text))

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, as a service manager stops it; returns the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 60) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise AssertionError(f"{self.command} did not exit within {timeout} s:\n{self.output}") from exc
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        """SIGKILL (a crash); a no-op once the process has exited."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._reader.join(timeout=5)


def json_values_to_end(
    bootstrap: str, topic: str, partitions: int, *, isolation_level: str = "read_uncommitted"
) -> list[Any]:
    """The JSON values of every record of ``topic`` up to its end offsets (the last stable
    offsets for ``read_committed``), partition by partition in offset order."""
    out: list[Any] = []
    with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation_level
    ) as reader:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        reader.assign(wanted)
        ends = reader.end_offsets(wanted)
        for _ in range(300):
            if all(reader.position(tp) >= end for tp, end in ends.items()):
                break
            for records in reader.getmany(timeout_ms=200).values():
                out.extend(json.loads(r.value) for r in records)
    return out
