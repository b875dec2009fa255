"""``topicwright transactions`` with producers killed by SIGKILL in the middle of a transaction.

On the reference broker the coordinator knows the dead producer's transaction: ``find-hanging``
(Kafka's rule) does not report it, a ``read_committed`` reader waits at it, and the coordinator's
timeout aborts it, after which the reader moves past. ``abort`` (KIP-664's WriteTxnMarkers, which
both brokers take from a client when no authorizer is configured, as Kafka does) ends it on the
partition at once, without waiting for that timeout. On Apache Kafka without partition
verification a producer that wrote a transactional batch without adding the partition leaves a
truly hanging transaction: ``find-hanging`` finds it (as Kafka's own ``kafka-transactions.sh
find-hanging`` does), ``abort`` ends it, and the ``read_committed`` reader moves past it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli, wait_for

PRODUCERS = Path(__file__).with_name("producers.py")
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"


@pytest.fixture
def killed_producer() -> Iterator[Callable[..., dict[str, Any]]]:
    """``killed_producer(kind, *args)``: run producers.py, wait for its transaction to be open,
    kill it with SIGKILL and return what it printed."""
    started: list[subprocess.Popen[str]] = []

    def run(kind: str, *args: str) -> dict[str, Any]:
        process = subprocess.Popen(
            [sys.executable, str(PRODUCERS), kind, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()  # the producer prints once its records are written
        if not line:
            process.wait(timeout=10)
            raise AssertionError(
                f"the producer exited first: {process.stderr.read() if process.stderr else ''}"
            )
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        return dict(json.loads(line))

    try:
        yield run
    finally:
        for process in started:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def committed_values(cli: Cli, topic: str) -> list[str]:
    return cli(
        "consume", "-t", topic, "--from-beginning", "-e", "--isolation", "read_committed"
    ).stdout.splitlines()


def test_a_killed_producers_transaction_is_the_coordinators_to_abort(
    broker_factory: Any, name: Any, killed_producer: Any
) -> None:
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    cli, topic, tid = Cli(broker.bootstrap), name("txn"), name("tid")
    cli("topics", "create", "--topic", topic, "--partitions", "1")
    killed_producer("sdk", broker.bootstrap, topic, tid, "15000")
    cli("produce", "-t", topic, "--partition", "0", stdin="after\n")

    listed = {t["transactional_id"]: t for t in cli("transactions", "list", "--json").json()}
    assert listed[tid]["state"] == "Ongoing"
    described = cli("transactions", "describe", "--transactional-id", tid, "--json").json()
    assert described["state"] == "Ongoing" and described["partitions"] == [[topic, 0]]
    # Two producers wrote there: the dead one's transaction is open from offset 0; "after" is not
    # transactional.
    producers = cli("transactions", "describe-producers", "-t", topic, "-p", "0", "--json").json()
    open_ones = {p["producer_id"]: p["start_offset"] for p in producers if p["start_offset"] >= 0}
    assert len(producers) == 2 and open_ones == {described["producer_id"]: 0}
    # Its coordinator will write the partition's marker: not hanging, however long it is open.
    assert (
        cli("transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0", "--json").json()
        == []
    )
    assert committed_values(cli, topic) == []  # the reader waits at the open transaction
    for usage in (
        ["transactions", "abort", "-t", topic, "-p", "0"],
        ["transactions", "abort", "-t", topic, "-p", "0", "--producer-id", "1"],
        ["transactions", "find-hanging"],
        ["transactions", "find-hanging", "-p", "0"],
    ):
        refused = cli(*usage, check=False)
        assert refused.returncode == 2 and refused.stderr.startswith("topicwright: error: "), str(refused)

    # The coordinator aborts it at its timeout; the committed reader then moves past it.
    wait_for(
        lambda: committed_values(cli, topic) == ["after"], "the timed-out transaction's abort", timeout=90
    )
    states: list[str] = []

    def abort_completed() -> bool:
        states.append(cli("transactions", "describe", "--transactional-id", tid, "--json").json()["state"])
        return states[-1] in ("CompleteAbort", "Empty")

    wait_for(abort_completed, "the coordinator's abort to complete", timeout=30)
    assert "Ongoing" not in states, states
    missing = cli("transactions", "describe", "--transactional-id", name("nobody"), check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The session's reference broker or Apache Kafka node, neither with an authorizer."""
    node = request.getfixturevalue("broker" if request.param == "reference" else "apache_kafka")
    return str(node.bootstrap)


def test_abort_ends_a_killed_producers_transaction_and_the_reader_moves_past(
    bootstrap: str, name: Any, killed_producer: Any
) -> None:
    cli, topic, tid = Cli(bootstrap), name("abort"), name("tid")
    cli("topics", "create", "--topic", topic, "--partitions", "1")
    killed_producer("sdk", bootstrap, topic, tid, "600000")  # its coordinator would wait 10 minutes
    cli("produce", "-t", topic, "--partition", "0", stdin="after\n")
    assert committed_values(cli, topic) == []
    [open_one] = [
        p
        for p in cli("transactions", "describe-producers", "-t", topic, "-p", "0", "--json").json()
        if p["start_offset"] >= 0
    ]
    assert open_one["start_offset"] == 0

    wrong = cli("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "1", check=False)
    assert wrong.returncode == 1 and "no open transaction starts at offset 1" in wrong.stderr, str(wrong)
    aborted = cli("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "0", "--json").json()
    assert aborted == {
        "topic": topic,
        "partition": 0,
        "producer_id": open_one["producer_id"],
        "producer_epoch": open_one["producer_epoch"],
        "coordinator_epoch": max(0, open_one["coordinator_epoch"]),
        "aborted": True,
    }

    # Offsets 0-2 aborted, 3 "after", 4 the ABORT marker: the committed reader reads past.
    wait_for(lambda: committed_values(cli, topic) == ["after"], "the reader past the aborted transaction")
    producers = cli("transactions", "describe-producers", "-t", topic, "-p", "0", "--json").json()
    assert [p["start_offset"] for p in producers] == [-1, -1], producers
    # Nothing is left to abort there.
    again = cli("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "0", check=False)
    assert again.returncode == 1 and "no open transaction starts at offset 0" in again.stderr, str(again)


def kafka_find_hanging(bootstrap: str, topic: str) -> list[dict[str, str]]:
    from tests.oracles.kafka_tools import run_tool

    result = run_tool(
        TRANSACTIONS_TOOL, "--bootstrap-server", bootstrap, "find-hanging", "--topic", topic,
        "--max-transaction-timeout", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    return [dict(zip(lines[0], cells, strict=True)) for cells in lines[1:]]


@pytest.mark.apache_kafka
def test_a_hanging_transaction_is_found_and_aborted_on_kafka(
    apache_kafka_factory: Any, name: Any, killed_producer: Any
) -> None:
    node = apache_kafka_factory(**{"transaction.partition.verification.enable": "false"})
    cli, topic, tid = Cli(node.bootstrap), name("hang"), name("tid")
    cli("topics", "create", "--topic", topic, "--partitions", "1")
    dead = killed_producer("unverified", node.bootstrap, topic, tid)
    cli("produce", "-t", topic, "--partition", "0", stdin="after\n")
    assert committed_values(cli, topic) == []  # stuck behind the hanging transaction

    [hanging] = cli(
        "transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0", "--json"
    ).json()
    assert (hanging["partition"], hanging["start_offset"]) == (0, 0)
    assert (hanging["producer_id"], hanging["producer_epoch"]) == (
        dead["producer_id"],
        dead["producer_epoch"],
    )
    [kafka_row] = kafka_find_hanging(node.bootstrap, topic)
    assert (kafka_row["ProducerId"], kafka_row["StartOffset"]) == (str(dead["producer_id"]), "0")
    table = cli("transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0").table()
    assert [(r["PRODUCER-ID"], r["START-OFFSET"]) for r in table] == [(str(dead["producer_id"]), "0")]

    wrong = cli("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "1", check=False)
    assert wrong.returncode == 1 and "no open transaction starts at offset 1" in wrong.stderr
    aborted = cli("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", "0", "--json").json()
    assert aborted["producer_id"] == dead["producer_id"] and aborted["aborted"]

    # Offsets 0-1 aborted, 2 "after", 3 the ABORT marker (or 2 the marker and 3 "after"): either way the
    # committed reader now reads past the transaction.
    wait_for(lambda: committed_values(cli, topic) == ["after"], "the reader past the aborted transaction")
    assert (
        cli("transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0", "--json").json()
        == []
    )
    assert kafka_find_hanging(node.bootstrap, topic) == []
