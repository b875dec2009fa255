"""Exactly-once across a group rebalance: a member dropped from its group cannot commit (KIP-447).

Two instances of a consume-transform-produce application (``eos_group_app.py``, each a process
of its own) share a group. The first one stalls inside its first transaction, after sending its
output and before sending its offsets, for longer than ``max_poll_interval_ms``; the second one
joins meanwhile, is given every partition and copies the whole input. Then the first resumes: it
sends its offsets with ``consumer.group_metadata()`` and tries to commit. That metadata must still
name the generation and member id of its last completed join, so the group coordinator refuses
the offsets (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID), the transaction can
only be aborted, and the read_committed output holds every input record exactly once.

Run with the eager (range) and cooperative (cooperative-sticky) protocols, with dynamic members,
static members (distinct ``group_instance_id``s) and a static member replaced by a new process
with its instance id, against the reference broker and Apache Kafka.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.sdk.producer.txn_helpers import read_committed

APP = Path(__file__).with_name("eos_group_app.py")
PARTITIONS = 2
RECORDS = 60
#: The application's group timings: short, so a case takes seconds, not minutes.
MAX_POLL_INTERVAL_MS = 4000
SESSION_TIMEOUT_MS = 6000
REFERENCE_BROKER_CONFIG = {
    "num.partitions": PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"

#: Picks an event out of a process's events so far (None: not there yet).
EventMatch = Callable[[list[dict[str, Any]]], "dict[str, Any] | None"]


class AppProcess:
    """One application instance: its events (JSON lines on stdout) and its stderr log in files."""

    def __init__(self, name: str, args: list[str], directory: Path) -> None:
        self.name = name
        self.events_path = directory / f"{name}.events"
        self.log_path = directory / f"{name}.log"
        with open(self.events_path, "wb") as out, open(self.log_path, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(APP), *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL
            )

    def events(self) -> list[dict[str, Any]]:
        lines = self.events_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait_for(self, accept: EventMatch, what: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = accept(self.events())
            if found is not None:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no {what} within {timeout} s:\n{self.tail()}")

    def stop(self, timeout: float = 30) -> None:
        """The stop file is already there: wait for the process to end, kill it by PID if not."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.name} did not stop within {timeout} s:\n{self.tail()}") from None

    def tail(self, lines: int = 40) -> str:
        log = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return f"events: {self.events()}\nlog:\n{log}"


def event_named(*names: str, after: str | None = None) -> EventMatch:
    """The first event called one of ``names`` (following the first ``after`` event, if given)."""

    def accept(events: list[dict[str, Any]]) -> dict[str, Any] | None:
        start = 0
        if after is not None:
            start = next((i + 1 for i, e in enumerate(events) if e["event"] == after), len(events) + 1)
        return next((e for e in events[start:] if e["event"] in names), None)

    return accept


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=20)
    for future in futures.values():
        future.result(30)


def seed(bootstrap: str, topic: str) -> list[bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    values = [f"record-{i:03d}".encode() for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


class CommittedOffsets:
    """The group's committed offsets as an outside client reads them (stable ones only)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
             "enable.auto.commit": False, "log_level": 0}
        )
        self.partitions = [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.last: dict[int, int] = {}

    def read(self) -> dict[int, int]:
        try:
            found = self.consumer.committed(self.partitions, timeout=5)
        except confluent_kafka.KafkaException:
            return self.last  # e.g. UNSTABLE_OFFSET_COMMIT while a transaction is completing
        self.last = {tp.partition: tp.offset for tp in found if tp.error is None}
        return self.last

    def wait_for(self, wanted: dict[int, int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.read() == wanted:
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture(
    params=["reference", pytest.param("kafka", marks=pytest.mark.apache_kafka)],
)
def cluster_bootstrap(request: pytest.FixtureRequest) -> str:
    """A fresh reference broker, or the session's Apache Kafka node."""
    if request.param == "kafka":
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return str(request.getfixturevalue("broker_factory")(REFERENCE_BROKER_CONFIG).bootstrap)


@pytest.mark.slow
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("membership", ["dynamic", "static", "static-replaced"])
def test_a_member_dropped_during_its_transaction_cannot_commit_it(
    cluster_bootstrap: str, assignor: str, membership: str, tmp_path: Path
) -> None:
    bootstrap = cluster_bootstrap
    group, source, target = unique("zombie-group"), unique("zombie-in"), unique("zombie-out")
    create_topics(bootstrap, source, target)
    inputs = seed(bootstrap, source)
    ends = {p: len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)}
    resume, stop = tmp_path / "resume", tmp_path / "stop"
    instance_ids = {"dynamic": (None, None), "static": ("a", "b"), "static-replaced": ("a", "a")}[membership]

    def app(name: str, instance_id: str | None, *extra: str) -> AppProcess:
        args = [
            "--bootstrap", bootstrap, "--source", source, "--target", target, "--group", group,
            "--transactional-id", f"{group}-{name}", "--assignor", assignor,
            "--max-poll-interval-ms", str(MAX_POLL_INTERVAL_MS),
            "--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--stop-file", str(stop), *extra,
        ]
        if instance_id is not None:
            args += ["--instance-id", instance_id]
        return AppProcess(name, args, tmp_path)

    committed = CommittedOffsets(bootstrap, group, source)
    apps: list[AppProcess] = []
    try:
        slow = app("slow", instance_ids[0], "--stall-until", str(resume))
        apps.append(slow)
        stalled = slow.wait_for(event_named("stalled"), "stall inside the first transaction", 40)
        assert stalled["generation"] >= 0 and stalled["member_id"], stalled
        other = app("other", instance_ids[1])
        apps.append(other)
        # The other instance owns every partition only once the group has dropped the slow one.
        assert committed.wait_for(ends, 60), (committed.last, other.tail(), slow.tail())
        resume.touch()
        outcome = slow.wait_for(event_named("committed", "aborted", after="stalled"),
                                "outcome of the stalled transaction", 40)
        # A zombie commit moves the offsets back; wait for the copy to settle again (in vain when
        # the commit moved them back to a position nobody reads from any more).
        settled = committed.wait_for(ends, 20)
    finally:
        stop.touch()
        for process in apps:
            process.stop()
        committed.close()
    output = read_committed(bootstrap, target, RECORDS, PARTITIONS, timeout=30)
    counts = Counter(output)
    duplicates = sum(n - 1 for n in counts.values())
    missing = [v for v in inputs if b"out-" + v not in counts]
    assert (duplicates, len(missing)) == (0, 0), (
        f"{len(output)} output records for {RECORDS} inputs: {duplicates} duplicates, "
        f"{len(missing)} missing; the stalled transaction: {outcome}"
    )
    assert settled, committed.last
    assert outcome["event"] == "aborted", outcome
    assert outcome["error"] == "TransactionAbortableError", outcome
    expected_cause = "FencedInstanceIdError" if membership == "static-replaced" else "CommitFailedError"
    assert outcome["cause"] == expected_cause, outcome
