"""Apache Kafka as a benchmark target: ``tests/apache_kafka.py``'s KRaft node, reached from a script.

The benchmark scripts run as files, so the project root is not on their import path; this module
puts it there and hands on what they need of the test helper (one node in a temporary directory,
removed afterwards), instead of a second copy of it. Each script skips Kafka, saying why, when
:func:`unavailable_reason` is not None (no Java or Maven, or the jars could not be fetched).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.apache_kafka import KafkaCluster, KafkaUnavailable, kafka_jars  # noqa: E402
from tests.apache_kafka import unavailable_reason as _missing_tools  # noqa: E402

__all__ = ["KafkaCluster", "running_kafka", "unavailable_reason"]


def unavailable_reason() -> str | None:
    """Why Apache Kafka cannot run here (fetching its jars with Maven the first time), or None."""
    reason = _missing_tools()
    if reason is not None:
        return reason
    try:
        kafka_jars()
    except KafkaUnavailable as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def running_kafka(**broker_properties: object) -> Iterator[KafkaCluster]:
    """One started Kafka node (``.bootstrap``, ``.nodes[0].pid``), stopped and its data removed
    on exit."""
    data_dir = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    cluster = KafkaCluster(data_dir, 1, **broker_properties)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

