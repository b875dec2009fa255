"""The benchmark scripts keep running, on workloads far too small to measure anything.

Performance is measured by running them by hand, never asserted here; these tests only catch a
script broken by a change elsewhere (a helper's signature, a renamed option), which otherwise
shows up only when somebody next wants a figure. Each checks that every row of its table is
printed, with numbers in it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"


def run_script(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def assert_line(out: str, pattern: str) -> None:
    """Some line of ``out`` matches ``pattern`` (anchored with ^ and $ per line)."""
    assert re.search(pattern, out, re.MULTILINE), out


def assert_broker_rows(out: str, partitions: int, others: tuple[str, ...], runs: int) -> None:
    """bench_broker's rows: the reference broker's (rate, MB/s, CPU, produce: preemptions) and
    each other target's, which add the ratio reference/target, its spread and the wins."""
    assert "ref/this" in out.splitlines()[1]
    for phase in ("produce", "consume"):
        figures = rf" +{NUMBER} +{NUMBER} +{NUMBER}" + (rf" +{NUMBER}" if phase == "produce" else "")
        assert_line(out, rf"^ +{partitions} +{phase} +reference{figures}$")
        ratio = rf" +{NUMBER} +{NUMBER}-{NUMBER} +\d/{runs}"
        for target in others:
            assert_line(out, rf"^ +{partitions} +{phase} +{target}{figures}{ratio}$")


def test_bench_broker_against_the_mock_prints_every_row() -> None:
    out = run_script(
        "bench_broker.py", *("--messages", "30000", "--runs", "2", "--partitions", "1", "2"),
        *("--brokers", "reference,mock"),
    )
    for partitions in (1, 2):
        assert_broker_rows(out, partitions, ("mock",), runs=2)
    assert not re.search(r"^ +\d+ +\w+ +kafka ", out, re.MULTILINE), out


@pytest.mark.apache_kafka
def test_bench_broker_against_apache_kafka_prints_every_row() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    out = run_script(
        "bench_broker.py", *("--messages", "20000", "--runs", "1", "--partitions", "2"),
        *("--brokers", "reference,kafka"),
    )
    assert_broker_rows(out, 2, ("kafka",), runs=1)


def test_bench_broker_rejects_an_unknown_broker() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_broker.py"), "--brokers", "reference,redpanda"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert result.returncode == 2 and "--brokers takes some of reference, mock, kafka" in result.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--isolate-generator needs two CPUs")
def test_bench_broker_against_a_second_reference_broker_with_the_generator_isolated() -> None:
    out = run_script(
        "bench_broker.py",
        *("--messages", "30000", "--runs", "1", "--partitions", "2"),
        *("--baseline", "reference", "--isolate-generator", "--brokers", "reference,mock"),
    )
    assert "load generator alone on CPU" in out
    assert "ref/this" in out.splitlines()[1]
    for phase in ("produce", "consume"):
        assert_line(out, rf"^ +2 +{phase} +reference +{NUMBER}")
        assert_line(out, rf"^ +2 +{phase} +reference2 +{NUMBER}")


def assert_latency_rows(out: str, broker: str) -> None:
    """bench_latency's rows for ``broker``: rate, p50 and p99 with their spreads, and on the SDK's
    row the two ratios SDK/confluent-kafka."""
    figures = rf"\| +{NUMBER} \| +{NUMBER} \| +{NUMBER}-{NUMBER} \| +{NUMBER} \| +{NUMBER}-{NUMBER} \|"
    assert_line(out, rf"^\| {broker} +\| sdk +{figures} +{NUMBER} \| +{NUMBER} \|$")
    assert_line(out, rf"^\| {broker} +\| confluent-kafka +{figures} +\| +\|$")


def test_bench_latency_on_the_reference_broker_prints_both_clients() -> None:
    out = run_script(
        "bench_latency.py", *("--rate", "500", "--seconds", "0.2", "--warm-up", "0.1", "--runs", "1"),
        *("--brokers", "reference"),
    )
    assert_latency_rows(out, "reference")
    assert not re.search(r"^\| kafka ", out, re.MULTILINE), out


@pytest.mark.apache_kafka
def test_bench_latency_on_apache_kafka_prints_both_clients() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    out = run_script(
        "bench_latency.py", *("--rate", "500", "--seconds", "0.2", "--warm-up", "0.1", "--runs", "1"),
        *("--brokers", "kafka"),
    )
    assert_latency_rows(out, "kafka")


def test_produce_ceiling_prints_all_three_targets() -> None:
    out = run_script("produce_ceiling.py", "--messages", "5000", "--runs", "1", "--partitions", "1")
    for target in ("reference", "no-log"):
        assert_line(out, rf"^ +1 +{target} +{NUMBER} +{NUMBER} +{NUMBER} ")
    assert_line(out, rf"^ +1 +mock +{NUMBER} +{NUMBER}")


def test_profile_broker_reports_both_phases() -> None:
    out = run_script("profile_broker.py", "--messages", "30000", "--partitions", "1", "--top", "3")
    assert_line(out, r"^produce: [\d,]+ msgs/s under the profiler$")
    assert_line(out, r"^consume: [\d,]+ msgs/s under the profiler$")
    assert "== produce, 1 partition(s)" in out and "== fetch, 1 partition(s)" in out


def test_bench_records_prints_every_codec() -> None:
    out = run_script("bench_records.py", "--records", "10", "--batches", "10", "--runs", "5")
    for step in ("build", "read"):
        assert_line(out, rf"^{step} +none +{NUMBER}")
        assert_line(out, rf"^{step} +zstd +{NUMBER}")


def test_bench_producer_compares_every_client() -> None:
    out = run_script("bench_producer.py", "--messages", "3000", "--runs", "1")
    for client in ("sdk-sync", "aiokafka", "kafka-python", "confluent-kafka"):
        assert_line(out, rf"^\| {client} +\| +{NUMBER} ")


def test_bench_consumer_compares_every_client() -> None:
    out = run_script("bench_consumer.py", "--messages", "3000", "--runs", "1")
    for client in ("sdk", "sdk-sync", "aiokafka", "kafka-python", "confluent-kafka"):
        assert_line(out, rf"^\| {client} +\| +{NUMBER} ")


def test_bench_transactions_compares_sdk_and_confluent_on_both_targets() -> None:
    out = run_script("bench_transactions.py", "--sizes", "1,10", "--transactions", "3", "--runs", "1")
    for target in ("reference", "mock"):
        for client in ("sdk", "sdk-send-many", "confluent-kafka"):
            for size in (1, 10):
                for mode in ("txn", "idem"):
                    assert_line(
                        out,
                        rf"^\| {target} +\| {client} +\| +{size} \| {mode} +\| +{NUMBER} \| +{NUMBER} "
                        rf"\| +{NUMBER} \| +{NUMBER} \|$",
                    )


def test_bench_group_times_both_clients_for_each_strategy() -> None:
    out = run_script("bench_group.py", "--runs", "1")
    for strategy in ("range", "cooperative-sticky"):
        for client in ("sdk", "confluent-kafka"):
            figures = rf"\| {NUMBER} " * 4
            assert_line(out, rf"^\| {strategy} \| {client} {figures}\|$")


def assert_group_protocol_rows(out: str, brokers: tuple[str, ...]) -> None:
    """bench_group_protocols' rows: a median and spread per broker, protocol, client and event,
    then per client and event a ratio consumer / classic for each broker, and reference / kafka
    for each protocol when both brokers ran."""
    for broker in brokers:
        for protocol in ("classic", "consumer"):
            for client in ("sdk", "confluent-kafka"):
                for event in ("join", "leave"):
                    assert_line(
                        out,
                        rf"^\| {broker} \| {protocol} \| {client} \| {event} "
                        rf"\| {NUMBER} \| {NUMBER}-{NUMBER} \|$",
                    )
    ratios = len(brokers) + (2 if len(brokers) == 2 else 0)
    for client in ("sdk", "confluent-kafka"):
        for event in ("join", "leave"):
            assert_line(out, rf"^\| {client} \| {event} " + rf"\| {NUMBER} " * ratios + r"\|$")


def test_bench_group_protocols_on_the_reference_broker_times_both_protocols() -> None:
    out = run_script("bench_group_protocols.py", "--members", "2", "--runs", "1", "--brokers", "reference")
    assert_group_protocol_rows(out, ("reference",))
    assert not re.search(r"^\| kafka ", out, re.MULTILINE), out


@pytest.mark.apache_kafka
def test_bench_group_protocols_against_apache_kafka_compares_both_brokers() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    out = run_script(
        "bench_group_protocols.py", *("--members", "2", "--runs", "1", "--brokers", "reference,kafka")
    )
    assert_group_protocol_rows(out, ("reference", "kafka"))


def test_bench_group_protocols_rejects_a_group_that_cannot_settle() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_group_protocols.py"), *("--members", "3"),
         *("--partitions", "3")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert result.returncode == 2 and "--partitions must be at least --members + 1 (4)" in result.stderr


@pytest.mark.slow
def test_bench_spark_compares_exactly_once_with_at_least_once() -> None:
    # Stream mode only: its branch of the script (checkpoint, trigger, micro-batches) holds more
    # that can break than batch mode's one write, and the sink's batch path has tests of its own.
    # Two of the four pipelines: ours that the others are compared with, and the JVM connector
    # (its own branch: jars, a JVM session); the other two take the exactly-once branch's path.
    # Two micro-batches per pipeline (the second resumes from the checkpoint); their size adds
    # nothing but time.
    out = run_script("bench_spark.py", "--messages", "200", "--runs", "1", "--mode", "stream",
                     "--batch", "100", "--warm-up", "0", "--variants", "exactly-once,jvm")
    for variant in ("exactly-once", "jvm"):  # no at-least-once run: its ratio column is "-"
        assert_line(out, rf"^\| reference \| stream \| {variant} +\| +{NUMBER} \| +- \| +{NUMBER} \|$")
    assert not re.search(r"^\| \w+ +\| batch ", out, re.MULTILINE), out


@pytest.mark.slow
def test_eos_soak_copies_exactly_once_through_bounces() -> None:
    out = run_script(
        "eos_soak.py", *("--messages", "2000", "--bounces", "1", "--copier", "sdk", "--timeout", "150")
    )
    for figure in ("messages", "copier kills", "broker kills", "duplicates", "missing", "order violations"):
        assert_line(out, rf"^{figure}: {NUMBER}$")
    assert_line(out, r"^duplicates: 0$")
    assert_line(out, r"^missing: 0$")
    assert_line(out, rf"^msgs/s: {NUMBER}$")
    assert out.rstrip().endswith("exact")


def assert_cleaner_row(out: str, broker: str, *, own_figure: bool) -> None:
    """bench_cleaner's row for ``broker``: cleaned and remaining MB, seconds, MB/s and its spread,
    peak and starting RSS, and the broker's own MB/s (Kafka logs one, ours does not)."""
    own = NUMBER if own_figure else "-"
    figures = rf" +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}-{NUMBER} +{NUMBER} +{NUMBER} +{own}"
    assert_line(out, rf"^ +{broker}{figures}$")


def test_bench_cleaner_on_the_reference_broker_prints_its_row() -> None:
    out = run_script(
        "bench_cleaner.py", *("--size", "4MB", "--runs", "2", "--warm-up", "0", "--brokers", "reference")
    )
    assert "peak RSS MB" in out.splitlines()[1]
    assert_cleaner_row(out, "reference", own_figure=False)
    assert not re.search(r"^ +kafka ", out, re.MULTILINE), out


@pytest.mark.apache_kafka
def test_bench_cleaner_against_apache_kafka_prints_both_rows_and_the_ratio() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    out = run_script(
        "bench_cleaner.py",
        *("--size", "4MB", "--runs", "1", "--warm-up", "2MB", "--brokers", "reference,kafka"),
    )
    assert_cleaner_row(out, "reference", own_figure=False)
    assert_cleaner_row(out, "kafka", own_figure=True)
    assert_line(
        out, rf"^reference/kafka: MB/s {NUMBER} \(min-max {NUMBER}-{NUMBER}, per run\), peak RSS {NUMBER}$"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--size", "1.5 parsecs"), "not a size: '1.5 parsecs'"),
        (("--size", "1MB"), "--size must hold at least two segments of 1048576 bytes"),
        (("--size", "8MB", "--segment-bytes", "4KiB"), "--segment-bytes must be at least 1048576"),
    ],
)
def test_bench_cleaner_rejects_a_log_it_cannot_measure(args: tuple[str, ...], message: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_cleaner.py"), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr


def assert_security_rows(out: str, broker: str) -> None:
    """bench_security's row per listener: per phase records/s, MB/s, the ratio to PLAINTEXT on
    the same broker and its spread."""
    phase = rf" +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}-{NUMBER}"
    for listener in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert_line(out, rf"^ +{broker} +{listener}{phase}{phase}$")


def test_bench_security_on_the_reference_broker_prints_every_listener() -> None:
    out = run_script(
        "bench_security.py",
        *("--messages", "5000", "--runs", "1", "--warm-up", "0", "--brokers", "reference"),
    )
    assert_security_rows(out, "reference")
    assert "ref/kafka" not in out


@pytest.mark.apache_kafka
def test_bench_security_against_apache_kafka_compares_every_listener() -> None:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    out = run_script("bench_security.py", *("--messages", "5000", "--runs", "1", "--warm-up", "2000"))
    for broker in ("reference", "kafka"):
        assert_security_rows(out, broker)
    for listener in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert_line(out, rf"^ +{listener} +{NUMBER} +{NUMBER}-{NUMBER} +{NUMBER} +{NUMBER}-{NUMBER}$")
