"""The streaming driver killed (SIGKILL, JVM and Python workers with it) in the middle of its
micro-batches, the broker restarted, the query restarted from its checkpoint: a read_committed
consumer finds every input record's output exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    driver = _start_driver(broker.bootstrap, source, sink, checkpoint)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and driver.poll() is None:
            exists = _exists(broker, sink)
            written = len(read_topic(broker.bootstrap, sink, "read_uncommitted")) if exists else 0
            if written >= RECORDS // 4:
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.stdout.read() if driver.stdout else ""
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    partial = len(read_topic(broker.bootstrap, sink))
    assert partial < RECORDS  # killed mid-stream

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


def _exists(broker: Any, topic: str) -> bool:
    from sdk.sync import Consumer

    with Consumer(bootstrap_servers=broker.bootstrap, allow_auto_create_topics=False) as consumer:
        return topic in consumer.topics()
