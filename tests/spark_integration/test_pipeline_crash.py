"""The issue's acceptance run for ``run_exactly_once``: 100k records consumed, transformed and
produced exactly once while failures are injected, on a local-cluster with speculative execution
on (``cluster.py``), the driver in a subprocess (``pipeline_driver.py``, rounds of at most 10k
offsets per input partition):

1. first run: every round's partition-1 task fails after producing and before committing (its
   retry fences it); the task holding record k10000 stalls, so Spark launches a speculative
   copy, which fences it; the transform SIGKILLs the driver's process group (driver JVM,
   executors, Python workers) at record k60000, in the middle of a round, its transaction open;
2. the first driver's work directory is deleted: ``run_exactly_once`` keeps no checkpoint, the
   restarted driver has nothing but the group's committed offsets; in its second round the broker
   is SIGKILLed and restarted; the task holding record k90000 stalls and is speculated.

A read_committed audit then finds output == transform(input): 0 duplicates, 0 missing.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_integration import audit
from tests.spark_integration.cluster import finish_driver, speculative_successes, task_attempts
from tests.spark_integration.helpers import produce

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("pipeline_driver.py")
RECORDS = 100_000


def bang(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, (value or b"") + b"!")]


def _start(bootstrap: str, source: str, sink: str, group: str, workdir: Path, events: Path,
           *hooks: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), bootstrap, source, sink, group, str(workdir), str(events),
         "--max-records", "10000", *hooks],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_100k_run_exactly_once_with_driver_kill_task_failures_speculation_and_broker_restart(
    broker_factory: Any, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": 2})
    source, sink, group = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("pc-in", "pc-out", "pc-group"))
    produce(broker.bootstrap, source, RECORDS)
    events = tmp_path / "events"

    first = _start(broker.bootstrap, source, sink, group, tmp_path / "run1", events,
                   "--fail-before-commit", "1", "--slow-at", "k10000", "--kill-at", "k60000")
    output = finish_driver(first, 150)
    assert first.returncode == -signal.SIGKILL, output[-3000:]
    partial = audit(broker.bootstrap, source, sink, bang)
    assert partial.duplicates == partial.unexpected == 0, partial
    assert 0 < partial.output_records < RECORDS, partial
    first_attempts = task_attempts(events)
    failed = [a for a in first_attempts if a["reason"] == "ExceptionFailure" and a["index"] == 1]
    assert failed, first_attempts
    assert speculative_successes(first_attempts), first_attempts
    shutil.rmtree(tmp_path / "run1")

    second = _start(broker.bootstrap, source, sink, group, tmp_path / "run2", events, "--slow-at", "k90000")
    assert second.stdout is not None
    lines = []
    for line in second.stdout:
        lines.append(line)
        if line.startswith("round:"):
            break
    broker.restart(kill=True)
    output = "".join(lines) + finish_driver(second, 150)
    assert second.returncode == 0, output[-3000:]
    assert output.count("round:") >= 2, output[-3000:]
    assert speculative_successes([a for a in task_attempts(events) if a not in first_attempts])

    report = audit(broker.bootstrap, source, sink, bang)
    assert report.ok, report
    assert report.input_records == report.output_records == RECORDS
