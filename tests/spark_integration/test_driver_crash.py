"""The streaming driver killed (SIGKILL, JVM and Python workers with it) between the sink's
commits of a micro-batch and Spark's commit log, the broker restarted, the query restarted from
its checkpoint (re-running that batch): a read_committed consumer finds every input record's
output exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from spark_integration import audit
from tests.spark_integration.helpers import produce, read_topic

DRIVER = Path(__file__).with_name("stream_driver.py")
RECORDS = 4000


def bang(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, (value or b"") + b"!")]


def _start_driver(
    bootstrap: str, source: str, sink: str, checkpoint: Path, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), bootstrap, source, sink, str(checkpoint), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_driver_killed_mid_stream_and_broker_restarted_still_exactly_once(
    broker_factory: Any, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": 2})
    source, sink = f"crash-in-{uuid.uuid4().hex[:8]}", f"crash-out-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, source, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    # The driver kills itself (process group: JVM and Python workers too) in batch 3's sink
    # commit: every task of batch 3 committed its transaction, Spark's commit log lacks batch 3.
    driver = _start_driver(broker.bootstrap, source, sink, checkpoint, "--kill-at-commit", "3")
    try:
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == -signal.SIGKILL, output[-3000:]
    assert (checkpoint / "offsets" / "3").exists() and not (checkpoint / "commits" / "3").exists()
    assert len(read_topic(broker.bootstrap, sink)) == 4 * 400  # batches 0-3, 400 offsets each

    broker.restart()
    rerun = _start_driver(broker.bootstrap, source, sink, checkpoint, "--available-now")
    try:
        output, _ = rerun.communicate(timeout=150)
    finally:
        if rerun.poll() is None:
            os.killpg(rerun.pid, signal.SIGKILL)
    assert rerun.returncode == 0, output[-3000:]
    report = audit(broker.bootstrap, source, sink, bang)
    assert report.ok, report
    assert report.input_records == report.output_records == RECORDS
