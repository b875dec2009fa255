"""The anomaly workload of ``test_workload.py`` against Apache Kafka, the control: a fault the
checker reports here too is the workload's or the checker's mistake, not the reference broker's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tools.anomaly.test_workload import run_and_check

pytestmark = [pytest.mark.slow, pytest.mark.apache_kafka]

#: Kafka with the reference broker's test settings: killed clients' transactions aborted promptly.
KAFKA_PROPERTIES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "group.min.session.timeout.ms": 1000,
}


def test_apache_kafka_under_faults_has_no_anomalies(
    apache_kafka_factory: Callable[..., Any], tmp_path: Path
) -> None:
    node = apache_kafka_factory(**KAFKA_PROPERTIES)
    run_and_check(node.bootstrap, [node], tmp_path, seconds=35)
