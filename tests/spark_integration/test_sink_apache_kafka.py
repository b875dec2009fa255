"""The exactly-once sink against Apache Kafka 4.1 (``tests/apache_kafka.py``), the broker users run:
a reused ``transactional.id.prefix`` is refused there too, and a streaming copy whose driver is
SIGKILLed inside a batch's sink commit (every task committed, Spark's commit log not written) and
restarted from its checkpoint ends with every record once. Kafka 4.1 has no two-phase commit
(InitProducerId v5 at most), so ``commit.mode=two-phase`` is tested on the reference broker
only."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from spark_integration import audit
from tests.spark_integration.cluster import finish_driver
from tests.spark_integration.helpers import finished, names, produce, read_topic, start_copy
from tests.spark_integration.test_driver_crash import DRIVER, bang

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow]

RECORDS = 60
COPY_RECORDS = 3000
PER_BATCH = 1000


def test_a_reused_prefix_is_refused_on_apache_kafka(spark: Any, apache_kafka: Any, tmp_path: Path) -> None:
    bootstrap = apache_kafka.bootstrap
    source, first_sink, second_sink, prefix = names("ak-reuse")
    produce(bootstrap, source, RECORDS)
    finished(start_copy(spark, bootstrap, source, first_sink, tmp_path / "first", prefix))
    assert len(read_topic(bootstrap, first_sink)) == RECORDS

    second = start_copy(spark, bootstrap, source, second_sink, tmp_path / "second", prefix)
    with pytest.raises(StreamingQueryException, match=r"new 'transactional\.id\.prefix'"):
        second.awaitTermination(120)
    assert read_topic(bootstrap, second_sink, "read_uncommitted") == []


def _driver(bootstrap: str, source: str, sink: str, checkpoint: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), bootstrap, source, sink, str(checkpoint),
         "--max-offsets", str(PER_BATCH), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_stream_copy_on_apache_kafka_is_exactly_once_across_a_driver_kill(
    apache_kafka: Any, tmp_path: Path
) -> None:
    bootstrap = apache_kafka.bootstrap
    tag = uuid.uuid4().hex[:8]
    source, sink = f"ak-eos-in-{tag}", f"ak-eos-out-{tag}"
    produce(bootstrap, source, COPY_RECORDS)
    checkpoint = tmp_path / "checkpoint"

    first = _driver(bootstrap, source, sink, checkpoint, "--kill-at-commit", "1")
    output = finish_driver(first, 150)
    assert first.returncode == -signal.SIGKILL, output[-3000:]
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()
    assert len(read_topic(bootstrap, sink)) == 2 * PER_BATCH  # batch 1 committed by its tasks

    second = _driver(bootstrap, source, sink, checkpoint, "--available-now")
    output = finish_driver(second, 150)
    assert second.returncode == 0, output[-3000:]
    report = audit(bootstrap, source, sink, bang)
    assert report.ok, report
    assert report.input_records == report.output_records == COPY_RECORDS
