"""Kafka's own Java client as a peer: ``java/ClientPeer.java`` against our broker and Apache Kafka.

The program (built here with ``javac`` against Kafka's jars, kafka-clients among them) creates and
describes a topic with the AdminClient, produces idempotently with acks=all, runs a committed, an
aborted and a committed transaction, consumes read_committed in a classic group committing as it
goes, then lists offsets (earliest, latest, latest under read_committed) and groups. It prints one
JSON line per step; the checks are the same on both brokers, so Kafka's run proves the expectations.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk.records import murmur2_partition
from tests.apache_kafka import kafka_jars
from tests.oracles.kafka_tools import java_command

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.usefixtures("kafka_jars_available")]

SOURCE = Path(__file__).parent / "java" / "ClientPeer.java"
PARTITIONS = 3
IDEMPOTENT_RECORDS = 1000
PER_TRANSACTION = 100
TRANSACTIONS = ["commit", "abort", "commit"]


@pytest.fixture(scope="module")
def client_peer_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ClientPeer compiled once for the module."""
    classes = tmp_path_factory.mktemp("client-peer")
    result = subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", str(kafka_jars() / "*"), str(SOURCE)],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return classes


def _run_peer(classes: Path, bootstrap: str) -> dict[str, dict[str, Any]]:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"java-peer-{suffix}", f"java-peer-group-{suffix}"
    command = java_command("ClientPeer", bootstrap, topic, group, f"java-peer-txn-{suffix}", quick=False)
    classpath = command.index("-cp") + 1
    command[classpath] = f"{classes}:{command[classpath]}"
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            steps[event.pop("step")] = event
    steps["names"] = {"topic": topic, "group": group}
    return steps


@pytest.mark.parametrize("side", ["ours", "kafka"])
def test_java_client_produces_transacts_consumes_and_administers(
    side: str, client_peer_classes: Path, request: pytest.FixtureRequest
) -> None:
    if side == "ours":
        with BrokerProcess() as broker:
            steps = _run_peer(client_peer_classes, broker.bootstrap)
    else:
        steps = _run_peer(client_peer_classes, request.getfixturevalue("apache_kafka").bootstrap)

    assert steps["create_topic"] == {"partitions": PARTITIONS, "leaders": [1] * PARTITIONS, "internal": False}

    # Kafka's default partitioner puts a keyed record at murmur2(key) mod partitions.
    expected_spread = Counter(
        str(murmur2_partition(f"key-{i}".encode(), PARTITIONS)) for i in range(IDEMPOTENT_RECORDS)
    )
    assert steps["idempotent_produce"] == {
        "acked": IDEMPOTENT_RECORDS,
        "distinct_positions": IDEMPOTENT_RECORDS,
        "per_partition": dict(expected_spread),
    }
    assert steps["transactional_produce"] == {"transactions": TRANSACTIONS}

    committed_records = PER_TRANSACTION * TRANSACTIONS.count("commit")
    visible = IDEMPOTENT_RECORDS + committed_records
    assert steps["consume_read_committed"] == {
        "records": visible,
        "distinct": visible,
        "idempotent": IDEMPOTENT_RECORDS,
        "committed": committed_records,
        "aborted": 0,
        "duplicates": 0,
        "assignment": PARTITIONS,
    }

    offsets = steps["list_offsets"]
    assert offsets["earliest"] == {str(p): 0 for p in range(PARTITIONS)}
    # Every record and one transaction marker per partition per transaction (each touched all).
    records_and_markers = IDEMPOTENT_RECORDS + (PER_TRANSACTION + PARTITIONS) * len(TRANSACTIONS)
    assert sum(offsets["latest"].values()) == records_and_markers
    assert offsets["latest_committed"] == offsets["latest"]

    groups = steps["list_groups"]
    assert steps["names"]["group"] in groups["groups"]
    assert groups["state"] == "Empty"
    assert groups["committed"] == offsets["latest"]
