"""``commit.mode=two-phase`` in a streaming query (driver in a subprocess, ``stream_driver.py``,
on a local-cluster with speculative execution on, ``cluster.py``): batch 1's second task fails
after preparing (its retry aborts the stale prepared transaction) and its first task stalls, so
a speculative copy keeps and aborts the stalled attempt's open transaction; the driver is
SIGKILLed in batch 2's commit after recording the intent and before completing any transaction,
so nothing of batch 2 is visible; the query restarted from its checkpoint rolls the intent
forward (the re-run tasks commit it and skip) and finishes: 0 duplicates, 0 missing."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_integration import audit
from tests.spark_integration.cluster import finish_driver as finish
from tests.spark_integration.cluster import task_attempts
from tests.spark_integration.helpers import produce, read_topic
from tests.spark_integration.test_driver_crash import DRIVER, bang

pytestmark = pytest.mark.slow

RECORDS = 20_000
PER_BATCH = 5000


def _run(bootstrap: str, source: str, sink: str, checkpoint: Path, *extra: str) -> tuple[int, str]:
    """One driver run on the local-cluster (work dir and event log beside the checkpoint)."""
    import subprocess
    import sys

    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), bootstrap, source, sink, str(checkpoint), "--two-phase",
         "--cluster", str(checkpoint.parent),
         "--max-offsets", str(PER_BATCH), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    output = finish(driver, 150)
    return driver.returncode, output


def test_two_phase_stream_batch_visible_at_once_and_rolled_forward_after_a_driver_kill(
    broker_factory: Any, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": 2})
    source, sink = f"2pc-in-{uuid.uuid4().hex[:8]}", f"2pc-out-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, source, RECORDS)
    checkpoint = tmp_path / "checkpoint"

    code, output = _run(broker.bootstrap, source, sink, checkpoint, "--fail-before-commit", "1:1",
                        "--slow-task", "0:1:10", "--kill-after-intent", "2")
    assert code == -signal.SIGKILL, output[-3000:]
    assert (checkpoint / "offsets" / "2").exists() and not (checkpoint / "commits" / "2").exists()
    # Batches 0 and 1 committed; batch 2 prepared and decided, but not one record of it visible.
    assert len(read_topic(broker.bootstrap, sink)) == 2 * PER_BATCH
    attempts = task_attempts(tmp_path / "events")
    assert [a for a in attempts if a["speculative"] and a["reason"] == "Success"], attempts
    # Read uncommitted: batch 2's prepared records, and the failed attempt's aborted ones.
    assert len(read_topic(broker.bootstrap, sink, "read_uncommitted")) > 3 * PER_BATCH

    code, output = _run(broker.bootstrap, source, sink, checkpoint, "--available-now")
    assert code == 0, output[-3000:]
    report = audit(broker.bootstrap, source, sink, bang)
    assert report.ok, report
    assert report.input_records == report.output_records == RECORDS
