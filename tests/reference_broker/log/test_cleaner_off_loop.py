"""The log cleaner works beside the broker's clients: a real broker process compacts a partition of
tens of megabytes while a client keeps doing produce/fetch round trips, a topic deleted during a
pass and a broker stopped during one leave no stray file and raise nothing."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.interop

#: small records in many batches: cleaning them takes the cleaner a while (records are decoded)
RECORDS = 250_000
KEYS = 20_000
SEGMENT_BYTES = 4 * 1024 * 1024
BROKER_CONFIG = {"log.cleaner.backoff.ms": 50}
DEADLINE_S = 60.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    admin = _admin(bootstrap)  # kept alive until the answer (a collected client drops it)
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(30)


def _delete(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    admin.delete_topics([topic])[topic].result(30)


def _fill(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """A compacted topic nothing is cleaned in yet (dirty ratio 1.0), filled with ``RECORDS``
    records over ``KEYS`` keys; returns each key's latest value."""
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0",
              "segment.bytes": str(SEGMENT_BYTES)}
    _create(bootstrap, topic, config)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 64 * 1024,
        "queue.buffering.max.messages": RECORDS, "acks": "all"})
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    latest: dict[bytes, bytes] = {}
    for i in range(RECORDS):
        key, value = b"key-%05d" % (i % KEYS), b"value-%07d-" % i + b"x" * 60
        latest[key] = value
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    return latest


def _start_cleaning(bootstrap: str, topic: str) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry(
        "min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET)])
    admin = _admin(bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(30)


def _wait_for_log(broker: Any, pattern: str, deadline: float) -> re.Match[str]:
    while True:
        found = re.search(pattern, broker.stderr())
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"no {pattern!r} in the broker's log:\n{broker.stderr()[-3000:]}"
        time.sleep(0.005)


def _segment_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix == ".log")


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
        "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        rows = []
        while True:
            messages = consumer.consume(10_000, 10)
            assert messages, "no partition EOF within 10 s"
            for msg in messages:
                if msg.error():
                    assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                    return rows
                rows.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


class RoundTrips(threading.Thread):
    """A well-behaved client: produces one record to its own topic, waits for the
    acknowledgement, then fetches it; records how long each round trip took."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.topic = f"probe-{uuid.uuid4().hex[:8]}"
        _create(bootstrap, self.topic)
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}",
            "fetch.wait.max.ms": 5, "enable.auto.commit": False})
        self.consumer.assign([confluent_kafka.TopicPartition(self.topic, 0, 0)])
        self.timings: list[tuple[float, float]] = []  # (start, seconds)
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        sequence = 0
        try:
            while not self.stopping.is_set():
                value = b"probe-%d" % sequence
                sequence += 1
                started = time.monotonic()
                self.producer.produce(self.topic, value, partition=0)
                if self.producer.flush(30) != 0:
                    self.errors.append("produce not acknowledged in 30 s")
                    return
                while True:
                    msg = self.consumer.poll(30)
                    if msg is None:
                        self.errors.append("record not fetched in 30 s")
                        return
                    if not msg.error() and msg.value() == value:
                        break
                self.timings.append((started, time.monotonic() - started))
        finally:
            self.consumer.close()

    def worst_between(self, start: float, end: float) -> float:
        return max(seconds for began, seconds in self.timings if start <= began + seconds and began <= end)

    def count_between(self, start: float, end: float) -> int:
        return sum(1 for began, seconds in self.timings if start <= began and began + seconds <= end)


def _clean_beside_a_probe(broker: Any) -> tuple[str, dict[bytes, bytes], float, float, int]:
    """Fills a new compacted topic, cleans it while a probe client does round trips: (topic, each
    key's latest value, seconds the pass took, the worst round trip meanwhile, round trips done
    within the pass)."""
    topic = f"big-compacted-{uuid.uuid4().hex[:8]}"
    latest = _fill(broker.bootstrap, topic)
    assert len(_segment_files(broker.data_dir / f"{topic}-0")) >= 4
    probe = RoundTrips(broker.bootstrap)
    probe.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(probe.timings) < 20:  # the client is up and running
            assert time.monotonic() < deadline and probe.is_alive(), probe.errors
            time.sleep(0.01)
        asked = time.monotonic()
        _start_cleaning(broker.bootstrap, topic)
        _wait_for_log(broker, re.escape(f"{topic}-0: cleaned offsets"), deadline)
        cleaned = time.monotonic()
        time.sleep(0.2)  # a round trip begun during the pass has ended
    finally:
        probe.stopping.set()
        probe.join(60)
    assert not probe.errors, probe.errors
    worst_s, during = probe.worst_between(asked, cleaned), probe.count_between(asked, cleaned)
    return topic, latest, cleaned - asked, worst_s, during


def test_clients_are_served_while_a_large_partition_is_cleaned(broker_factory: Any) -> None:
    broker = broker_factory(BROKER_CONFIG)
    # Served meanwhile: the worst round trip is a small part of the pass, and round trips went on.
    # A pass that holds the clients' loop does so on every attempt; the probe is one client doing
    # one round trip at a time, so a stall of the machine's scheduler (a loaded 2-core runner)
    # lengthens one round trip of one attempt: up to three passes, each on a new topic.
    measured: list[tuple[float, float, int]] = []
    while len(measured) < 3:
        topic, latest, clean_s, worst_s, during = _clean_beside_a_probe(broker)
        measured.append((clean_s, worst_s, during))
        if worst_s < clean_s / 4 and during >= 5:
            break
    assert worst_s < clean_s / 4 and during >= 5, (
        f"every pass stalled the probe (clean s, worst round trip s, round trips meanwhile): {measured}")
    directory = broker.data_dir / f"{topic}-0"
    rows = _read_all(broker.bootstrap, topic)
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(set(offsets))
    assert {key: value for _, key, value in rows} == latest  # every key's latest value, in order
    active_base = int(_segment_files(directory)[-1].name[:20])
    below = [key for offset, key, _ in rows if offset < active_base]
    assert len(below) == len(set(below)), "a superseded record survived below the active segment"
    assert not [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".swaprange"))]
    assert "Traceback" not in broker.stderr()


def test_deleting_a_topic_during_a_clean_aborts_it_and_leaves_nothing(broker_factory: Any) -> None:
    broker = broker_factory({**BROKER_CONFIG, "log.segment.delete.delay.ms": 0})  # removed at once
    topic = f"deleted-compacted-{uuid.uuid4().hex[:8]}"
    _fill(broker.bootstrap, topic)
    deadline = time.monotonic() + DEADLINE_S
    _start_cleaning(broker.bootstrap, topic)
    _wait_for_log(broker, re.escape(f"{topic}-0: cleaning offsets"), deadline)
    _delete(broker.bootstrap, topic)
    _wait_for_log(broker, re.escape(f"cleaning {topic}-0 aborted"), deadline)
    assert not [p.name for p in broker.data_dir.iterdir() if p.name.startswith(topic)]
    # The broker goes on: the same name makes a new, empty topic.
    _create(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"after", key=b"k", partition=0)
    assert producer.flush(30) == 0
    assert [(key, value) for _, key, value in _read_all(broker.bootstrap, topic)] == [(b"k", b"after")]
    assert sorted(p.name for p in (broker.data_dir / f"{topic}-0").iterdir()
                  if ".cleaned" in p.name or ".swap" in p.name) == []
    assert "Traceback" not in broker.stderr()
    assert "taking the log offline" not in broker.stderr()


def test_stopping_the_broker_during_a_clean_aborts_it_and_leaves_nothing(broker_factory: Any) -> None:
    broker = broker_factory(BROKER_CONFIG)
    topic = f"stopped-compacted-{uuid.uuid4().hex[:8]}"
    latest = _fill(broker.bootstrap, topic)
    deadline = time.monotonic() + DEADLINE_S
    _start_cleaning(broker.bootstrap, topic)
    _wait_for_log(broker, re.escape(f"{topic}-0: cleaning offsets"), deadline)
    assert broker.terminate() == 0
    log = broker.stderr()
    assert f"cleaning {topic}-0 aborted" in log, log[-3000:]
    assert "Traceback" not in log
    directory = broker.data_dir / f"{topic}-0"
    assert not [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".swaprange"))]
    broker.start()
    assert "completed the swap" not in broker.stderr()
    assert {key: value for _, key, value in _read_all(broker.bootstrap, topic)} == latest
