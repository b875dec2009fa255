"""The issue's acceptance run for the streaming sink: 100k records copied and transformed exactly
once while failures are injected, on a local-cluster with speculative execution on
(``cluster.py``), the driver in a subprocess (``stream_driver.py``):

1. first run: batch 1's second task fails after producing and before committing (its retry
   fences it); batch 2's first task stalls, so Spark launches a speculative copy, which fences
   it; the driver kills itself (SIGKILL to its process group: driver JVM, executors, Python
   workers) inside batch 3's sink commit, every task of batch 3 committed, Spark's commit log
   not yet written;
2. second run from the checkpoint (re-running batch 3, whose tasks find their markers and skip):
   the broker is SIGKILLed and restarted during batch 6, batch 8's second task stalls and is
   speculated again.

A read_committed audit then finds output == transform(input): 0 duplicates, 0 missing. Spark's
event logs show the failed and the speculative attempts really ran.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_integration import audit
from tests.spark_integration.cluster import finish_driver, speculative_successes, task_attempts
from tests.spark_integration.helpers import produce, read_topic

# Two Spark driver starts of 60-140 s on a 2-core runner: room beyond the default 300 s timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DRIVER = Path(__file__).with_name("stream_driver.py")
RECORDS = 100_000
PER_BATCH = 10_000
STALL = "10"


def bang(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, (value or b"") + b"!")]


def _start_driver(
    bootstrap: str, source: str, sink: str, checkpoint: Path, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), bootstrap, source, sink, str(checkpoint),
         "--max-offsets", str(PER_BATCH), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_100k_stream_copy_exactly_once_with_driver_kill_task_failure_speculation_and_broker_restart(
    broker_factory: Any, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": 2})
    source, sink = f"crash-in-{uuid.uuid4().hex[:8]}", f"crash-out-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, source, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    events = tmp_path / "events"

    first = _start_driver(broker.bootstrap, source, sink, checkpoint, "--cluster", str(tmp_path),
                          "--fail-before-commit", "1:1", "--slow-task", f"0:2:{STALL}",
                          "--kill-at-commit", "3")
    output = finish_driver(first, 240)
    assert first.returncode == -signal.SIGKILL, output[-3000:]
    assert (checkpoint / "offsets" / "3").exists() and not (checkpoint / "commits" / "3").exists()
    assert len(read_topic(broker.bootstrap, sink)) == 4 * PER_BATCH  # batches 0-3
    first_attempts = task_attempts(events)
    failed = [a for a in first_attempts if a["reason"] == "ExceptionFailure" and a["index"] == 1]
    assert failed, first_attempts
    assert speculative_successes(first_attempts), first_attempts

    second = _start_driver(broker.bootstrap, source, sink, checkpoint, "--cluster", str(tmp_path),
                           "--slow-task", f"1:8:{STALL}", "--available-now")
    deadline = time.monotonic() + 120
    while not (checkpoint / "offsets" / "6").exists():
        assert second.poll() is None and time.monotonic() < deadline, finish_driver(second, 1)[-3000:]
        time.sleep(0.05)
    broker.restart(kill=True)
    output = finish_driver(second, 240)
    assert second.returncode == 0, output[-3000:]
    second_attempts = [a for a in task_attempts(events) if a not in first_attempts]
    assert speculative_successes(second_attempts), second_attempts

    report = audit(broker.bootstrap, source, sink, bang)
    assert report.ok, report
    assert report.input_records == report.output_records == RECORDS
