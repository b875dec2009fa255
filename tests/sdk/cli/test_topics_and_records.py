"""``topicwright topics``, ``produce`` and ``consume`` on the reference broker, run as a person
runs them; what they wrote is read back by confluent-kafka (librdkafka, written elsewhere), and
mistakes end with a clear message and the documented exit code."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka

from .conftest import SCRIPT, Cli

EXIT_FAILURE, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def read_back(
    bootstrap: str, topic: str, partitions: int, expected: int, committed: bool = False
) -> list[Any]:
    """Every record of ``topic`` as confluent-kafka reads it (once ``expected`` arrived)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cli-oracle",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        records: list[Any] = []
        import time

        deadline = time.monotonic() + 30
        while len(records) < expected:
            assert time.monotonic() < deadline, f"read only {len(records)} of {expected}"
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                records.append(msg)
        return records
    finally:
        consumer.close()


def test_topic_created_described_altered_and_deleted(broker: Any, name: Any) -> None:
    cli, topic = Cli(broker.bootstrap), name("orders")
    created = cli(
        "topics", "create", "--topic", topic, "--partitions", "3", "--config", "retention.ms=3600000"
    )
    assert created.stdout.strip() == f"Created topic {topic}."
    assert topic in cli("topics", "list").stdout.split()
    [described] = cli("topics", "describe", "--topic", topic, "--json").json()
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert described["configs"] == {"retention.ms": "3600000"}
    table = cli("topics", "describe", "--topic", topic)
    assert "PartitionCount: 3" in table.stdout and [row["PARTITION"] for row in table.table()] == [
        "0",
        "1",
        "2",
    ]

    cli(
        "topics",
        "alter-configs",
        "--topic",
        topic,
        "--set",
        "cleanup.policy=compact",
        "--delete",
        "retention.ms",
    )
    [described] = cli("topics", "describe", "--topic", topic, "--json").json()
    assert described["configs"] == {"cleanup.policy": "compact"}
    cli("topics", "add-partitions", "--topic", topic, "--partitions", "4")
    assert len(cli("topics", "describe", "--topic", topic, "--json").json()[0]["partitions"]) == 4

    again = cli("topics", "create", "--topic", topic, check=False)
    assert again.returncode == EXIT_FAILURE and f"topic {topic!r} already exists" in again.stderr
    cli("topics", "create", "--topic", topic, "--if-not-exists")
    cli("topics", "delete", "--topic", topic)
    assert topic not in cli("topics", "list").stdout.split()
    gone = cli("topics", "delete", "--topic", topic, check=False)
    assert gone.returncode == EXIT_FAILURE and "does not exist" in gone.stderr
    cli("topics", "delete", "--topic", topic, "--if-exists")


def test_produce_and_consume_round_trip_keys_headers_and_json(broker: Any, name: Any, tmp_path: Path) -> None:
    cli, topic = Cli(broker.bootstrap), name("events")
    cli("topics", "create", "--topic", topic, "--partitions", "2")
    lines = "user-1:login\nuser-2:café\nuser-1:logout:late\n"
    produced = cli(
        "produce",
        "-t",
        topic,
        "--key-separator",
        ":",
        "-H",
        "source=cli",
        "-H",
        "trace=a=b",
        "--json",
        stdin=lines,
    )
    assert "Produced 3 records" in produced.stderr
    acks = produced.json_lines()
    assert len(acks) == 3 and all(a["topic"] == topic and a["offset"] >= 0 for a in acks)

    oracle = read_back(broker.bootstrap, topic, 2, 3)
    assert sorted((m.key(), m.value()) for m in oracle) == [
        (b"user-1", b"login"),
        (b"user-1", b"logout:late"),
        (b"user-2", "café".encode()),
    ]
    assert all(m.headers() == [("source", b"cli"), ("trace", b"a=b")] for m in oracle)
    # One key, one partition: the default partitioner keeps a key's records in order.
    assert len({m.partition() for m in oracle if m.key() == b"user-1"}) == 1

    consumed = cli("consume", "-t", topic, "--from-beginning", "--exit-at-end", "--json")
    documents = consumed.json_lines()
    assert "Consumed 3 records." in consumed.stderr
    by_offset = {(d["partition"], d["offset"]): d for d in documents}
    for message in oracle:
        document = by_offset[(message.partition(), message.offset())]
        assert document["topic"] == topic
        assert document["key"] == message.key().decode() and document["value"] == message.value().decode()
        assert document["timestamp"] == message.timestamp()[1]
        assert document["headers"] == [{"key": "source", "value": "cli"}, {"key": "trace", "value": "a=b"}]

    plain = cli("consume", "-t", topic, "--from-beginning", "-e", "--print-key", "--key-separator", "=")
    assert sorted(plain.stdout.splitlines()) == ["user-1=login", "user-1=logout:late", "user-2=café"]
    assert (
        len(cli("consume", "-t", topic, "--from-beginning", "-e", "--max-messages", "2").stdout.splitlines())
        == 2
    )

    # Binary values from a file, to one partition; JSON shows them as base64.
    data = tmp_path / "records.bin"
    data.write_bytes(b"\xff\xfe\r\n" + b"plain\n")
    cli("produce", "-t", topic, "--file", str(data), "--partition", "1")
    tail = cli("consume", "-t", topic, "-p", "1", "--offset", "0", "-e", "--json").json_lines()[-2:]
    assert tail[0]["value_encoding"] == "base64" and base64.b64decode(tail[0]["value"]) == b"\xff\xfe"
    assert tail[1]["value"] == "plain" and "value_encoding" not in tail[1] and tail[1]["key"] is None


def test_transactional_produce_is_read_committed(broker: Any, name: Any) -> None:
    cli, topic = Cli(broker.bootstrap), name("payments")
    cli("topics", "create", "--topic", topic, "--partitions", "1")
    run = cli("produce", "-t", topic, "--transactional-id", name("txn"), stdin="a\nb\nc\n")
    assert "in a committed transaction" in run.stderr
    assert [m.value() for m in read_back(broker.bootstrap, topic, 1, 3, committed=True)] == [b"a", b"b", b"c"]
    committed = cli("consume", "-t", topic, "--from-beginning", "-e", "--isolation", "read_committed")
    assert committed.stdout.splitlines() == ["a", "b", "c"]

    # A line without the separator fails the run: the transaction is aborted, nothing is committed.
    failed = cli(
        "produce",
        "-t",
        topic,
        "--transactional-id",
        name("txn"),
        "-K",
        ":",
        stdin="k:v\nno-separator\n",
        check=False,
    )
    assert failed.returncode == EXIT_FAILURE and "line 2 has no key separator" in failed.stderr
    after = cli("consume", "-t", topic, "--from-beginning", "-e", "--isolation", "read_committed")
    assert after.stdout.splitlines() == ["a", "b", "c"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_errors_are_one_clear_line_and_an_exit_code(broker: Any, name: Any, tmp_path: Path) -> None:
    cli = Cli(broker.bootstrap)
    missing = name("missing")
    for args in (
        ["produce", "-t", missing],
        ["consume", "-t", missing, "-e"],
        ["topics", "describe", "-t", missing],
        ["groups", "reset-offsets", "-g", name("g"), "-t", missing, "--to-earliest"],
    ):
        run = cli(*args, stdin="x\n", check=False)
        assert run.returncode == EXIT_FAILURE, str(run)
        assert run.stderr.strip() == f"topicwright: error: topic {missing!r} does not exist", str(run)

    unreachable = cli("topics", "list", "--bootstrap-server", f"127.0.0.1:{_closed_port()}", check=False)
    assert unreachable.returncode == EXIT_UNREACHABLE and "cannot reach the cluster" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    malformed = cli("topics", "list", "--bootstrap-server", "no-port-here", check=False)
    assert malformed.returncode == EXIT_USAGE and "expected host:port" in malformed.stderr
    nothing = cli("topics", "list", bootstrap=False, check=False)
    assert nothing.returncode == EXIT_USAGE and "TOPICWRIGHT_BOOTSTRAP" in nothing.stderr

    bad_option = cli("consume", "-t", "x", "--no-such-option", check=False)
    assert (
        bad_option.returncode == EXIT_USAGE
        and "unrecognized arguments: --no-such-option" in bad_option.stderr
    )
    conflicting = cli("consume", "-t", missing, "--group", "g", "--offset", "3", check=False)
    assert (
        conflicting.returncode == EXIT_USAGE and "--offset cannot be used with --group" in conflicting.stderr
    )

    config = tmp_path / "client.properties"
    config.write_text("security.protocol=PLAINTEXT\nbatch.size=100\nfetch.min.bytes = 1\n")
    refused = cli("topics", "list", "--command-config", str(config), check=False)
    assert refused.returncode == EXIT_USAGE
    assert "unknown or unsupported keys: batch.size, fetch.min.bytes" in refused.stderr
    config.write_text("# the SDK's names for Kafka's keys\nsecurity.protocol=PLAINTEXT\nclient.id=cli-test\n")
    assert missing not in cli("topics", "list", "--command-config", str(config)).stdout

    # A broker without ACLs (no API, or no authorizer) is a failure of the operation, in one line.
    acls = cli("acls", "list", check=False)
    assert acls.returncode == EXIT_FAILURE and len(acls.stderr.splitlines()) == 1, str(acls)
    assert "does not support this operation" in acls.stderr or "SECURITY_DISABLED" in acls.stderr


def test_bootstrap_from_the_environment_and_python_dash_m(broker: Any, name: Any) -> None:
    topic = name("env")
    Cli(None)("topics", "create", "--topic", topic, env={"TOPICWRIGHT_BOOTSTRAP": broker.bootstrap})
    module = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "--bootstrap-server", broker.bootstrap, "topics", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert module.returncode == 0 and topic in module.stdout, module.stderr
    assert SCRIPT.name == "topicwright"
