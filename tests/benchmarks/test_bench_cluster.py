"""bench_cluster.py keeps running: its smallest workload on three reference nodes and on a
three-node Apache Kafka cluster.

As with the other benchmark scripts (``test_scripts.py``), no figure is asserted, only that every
row of the table is there with numbers in it, with the ratio column filled when both brokers ran,
and that the failover runs' read-back found every acknowledged record stored once.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"
MEASURES = (
    "produce confluent-kafka records/s",
    "produce confluent-kafka MB/s",
    "produce sdk records/s",
    "produce sdk MB/s",
    "produce confluent-kafka RF=1 records/s",
    "confluent-kafka RF=3 / RF=1 records/s",
    "e2e latency p50 ms",
    "e2e latency p99 ms",
    "failover first ack s",
    "failover rate back s",
)


def run_bench_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_cluster.py"), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )


@pytest.mark.apache_kafka
@pytest.mark.slow  # two 3-node clusters, a leader killed on each
def test_bench_cluster_compares_every_measure_and_loses_no_acknowledged_record() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    result = run_bench_cluster("--small", "--runs", "1", "--brokers", "reference,kafka")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "ref/kafka" in out.splitlines()[1]
    per_broker = rf" +{NUMBER} \| +{NUMBER}-{NUMBER} \|"
    for measure in MEASURES:
        row = rf"^\| {re.escape(measure)} +\|{per_broker}{per_broker} +{NUMBER} \|$"
        assert re.search(row, out, re.MULTILINE), f"no row {measure!r}:\n{out}"
    for broker in ("reference", "kafka"):
        check = (rf"^failover check {broker}: acked {NUMBER}, stored {NUMBER}, lost 0, duplicated 0,"
                 r" moved 0 over 1 runs: passed$")
        assert re.search(check, out, re.MULTILINE), out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--brokers", "reference,redpanda"), "--brokers takes some of reference, kafka"),
        (("--runs", "0"), "--messages, --runs and --partitions must be positive"),
        (("--failover-window", "0"), "--failover-rate and --failover-window must be positive"),
    ],
)
def test_bench_cluster_rejects_what_it_cannot_measure(args: tuple[str, ...], message: str) -> None:
    result = run_bench_cluster(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
