"""``log.segment.delete.delay.ms`` / ``file.delete.delay.ms`` on a real broker process: segments
retention removes stay as ``.deleted`` files for the delay, then go (at once with a delay of 0);
a deleted topic's ``-delete`` directory waits the broker-level delay; a kill -9 while files wait
leaves a broker that starts and removes them (Kafka's LocalLog / LogManager / LogLoader)."""

from __future__ import annotations

import datetime
import re
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from reference_broker.testing import BrokerFactory, BrokerProcess  # noqa: E402

BROKER_DELAY_MS = 3_000
BROKER_CONFIG = {"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": BROKER_DELAY_MS}
DEADLINE_S = 60
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _create(broker: BrokerProcess, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    small = {"internal.segment.bytes": "1024", "retention.ms": "1"}
    admin.create_topics([NewTopic(topic, 1, 1, config={**small, **config})])[topic].result(20)


def _produce(broker: BrokerProcess, topic: str, count: int = 40) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, key=b"k", value=b"%d" % i + b"x" * 100)
        producer.poll(0)
    assert producer.flush(30) == 0


def _wait(condition, what: str, broker: BrokerProcess) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{broker.stderr()[-4000:]}")
        time.sleep(0.05)


def _first_segment_gone(directory: Path) -> bool:
    return not (directory / "00000000000000000000.log").exists()


def _deleted(directory: Path) -> set[str]:
    if not directory.exists():
        return set()
    return {p.name for p in directory.iterdir() if p.name.endswith(".deleted")}


def _logged_at(broker: BrokerProcess, message: str) -> datetime.datetime | None:
    for line in broker.stderr().splitlines():
        match = _LOG_TIME.match(line)
        if match and line.endswith(message):
            return datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return None


def test_removed_segments_wait_as_deleted_files_then_go(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(BROKER_CONFIG)
    tag = uuid.uuid4().hex[:8]
    waits, zero, default = f"waits-{tag}", f"zero-{tag}", f"default-{tag}"
    _create(broker, waits, {"file.delete.delay.ms": "600000"})
    _create(broker, zero, {"file.delete.delay.ms": "0"})
    _create(broker, default, {})
    for topic in (waits, zero, default):
        _produce(broker, topic)
    waits_dir, zero_dir, default_dir = (broker.data_dir / f"{t}-0" for t in (waits, zero, default))

    # 10 minutes: every file of the first segment is there, renamed.
    first = {"00000000000000000000" + s + ".deleted" for s in SUFFIXES}
    _wait(lambda: first <= _deleted(waits_dir), "the first segment's files renamed .deleted", broker)
    assert not (waits_dir / "00000000000000000000.log").exists()

    # 0: the first segment's files are gone when retention reports removing it.
    _wait(lambda: f"{zero}-0: deleted" in broker.stderr(), "retention of the zero-delay topic", broker)
    assert not [p.name for p in zero_dir.iterdir() if p.name.startswith("00000000000000000000.")]

    # The broker default (3 s): the removal comes no sooner than the delay after the rename.
    pattern = re.compile(rf"({re.escape(default)}-0 segment\(s\) at 0(?:, \d+)*) renamed \.deleted;"
                         rf" their files go in {BROKER_DELAY_MS} ms$", re.MULTILINE)
    _wait(lambda: pattern.search(broker.stderr()) is not None, "retention of the default topic", broker)
    what = pattern.search(broker.stderr()).group(1)  # type: ignore[union-attr]
    _wait(lambda: _logged_at(broker, f"deleted {what}") is not None, "the delayed removal", broker)
    _assert_waited(broker, f"{what} renamed .deleted; their files go in {BROKER_DELAY_MS} ms",
                   f"deleted {what}")
    assert not [name for name in _deleted(default_dir) if name.startswith("00000000000000000000.")]

    # A deleted topic's directory waits the broker delay as <topic>-0.<uuid>-delete, then goes.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([default])[default].result(20)
    assert not default_dir.exists()
    renamed_dir = re.compile(
        rf"({re.escape(default)}-0\.[0-9a-f]{{32}}-delete) goes in {BROKER_DELAY_MS} ms$", re.MULTILINE)
    _wait(lambda: renamed_dir.search(broker.stderr()) is not None, "the topic directory renamed", broker)
    doomed = renamed_dir.search(broker.stderr()).group(1)  # type: ignore[union-attr]
    _wait(lambda: not (broker.data_dir / doomed).exists(), "removal of the deleted topic's directory", broker)
    _wait(lambda: _logged_at(broker, f"deleted {doomed}") is not None, "the directory removal logged", broker)
    _assert_waited(broker, f"{doomed} goes in {BROKER_DELAY_MS} ms", f"deleted {doomed}")

    # kill -9 while the 10-minute files wait: the restarted broker removes them at start.
    assert first <= _deleted(waits_dir)
    broker.restart(kill=True)
    assert _deleted(waits_dir) == set()
    assert "Traceback" not in broker.stderr()


def _assert_waited(broker: BrokerProcess, scheduled: str, done: str) -> None:
    """The removal was logged at least the delay after it was scheduled (log times are ms)."""
    start, end = _logged_at(broker, scheduled), _logged_at(broker, done)
    assert start is not None and end is not None
    assert (end - start).total_seconds() >= BROKER_DELAY_MS / 1000 - 0.002, (start, end)
