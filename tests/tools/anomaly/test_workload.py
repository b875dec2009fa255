"""The anomaly workload, bounded: about a minute of producers, transactional clients and group
consumers under every fault (broker SIGKILL and SIGSTOP, client SIGKILL and SIGSTOP, consumers
joining and leaving), then the checker over the whole history must find nothing.

Against the reference broker here, and against Apache Kafka as the control in
``test_workload_kafka.py`` (a file of its own, so the two runs go to different test workers): a
fault the checker reports on Kafka too is the workload's or the checker's mistake, not the broker's.
The long form is ``benchmarks/anomaly_soak.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from tools.anomaly.__main__ import REFERENCE_BROKER_CONFIG
from tools.anomaly.checker import check
from tools.anomaly.nemesis import FAULTS, Node, ReferenceBrokerNode
from tools.anomaly.workload import RunResult, WorkloadConfig, run_workload

pytestmark = pytest.mark.slow


def run_and_check(
    bootstrap: str,
    nodes: Sequence[Node],
    run_dir: Path,
    seconds: float,
    faults: Sequence[str] = FAULTS,
    **config_fields: Any,
) -> RunResult:
    config = WorkloadConfig(
        duration=seconds,
        faults=faults,
        fault_interval=(1.0, 3.0),
        fault_hold=(0.5, 2.0),
        min_faults=len(faults),  # every fault kind at least once, however slow restarts are
        **config_fields,
    )
    result = run_workload(bootstrap, nodes, run_dir, config)
    report = check(result.history)
    summary = (
        f"{result.seconds:.0f} s, {result.faults} faults, {result.client_restarts} client kills, "
        f"crashed: {result.crashed}\n{report.render(examples=5)}\nhistory: {result.history_path}"
    )
    print(summary)
    assert report.valid, summary
    assert not result.crashed, summary  # a client that died by itself: its log in run_dir says why
    injected = {op.fields["fault"] for op in result.history if op.f == "nemesis"}
    assert injected == set(faults), summary
    assert report.stats["txns-committed"] > 20 and report.stats["final-read"] > 1000, summary
    return result


def test_reference_broker_under_faults_has_no_anomalies(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(config=REFERENCE_BROKER_CONFIG)
    run_and_check(broker.bootstrap, [ReferenceBrokerNode(broker)], tmp_path, seconds=45)
