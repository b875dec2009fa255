"""A real broker process with a small ``log.cleaner.dedupe.buffer.size`` compacts a topic of many
more distinct keys than its key map holds, over several passes, to what a client then reads: the
latest value of every key at its own offset; and its resident memory does not follow the keys."""

from __future__ import annotations

import re
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

#: just above Kafka's floor of 1 MiB a cleaner thread: a map full at 41,249 keys
DEDUPE_BUFFER = 1_100_000
MAP_KEYS = int(DEDUPE_BUFFER // 24 * 0.9)
BROKER_CONFIG = {"log.cleaner.backoff.ms": 50, "log.cleaner.dedupe.buffer.size": DEDUPE_BUFFER}
SEGMENT_BYTES = 1024 * 1024
DEADLINE_S = 180.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> dict[bytes, int]:
    """Produce ``records`` in order, all acknowledged; returns each key's latest offset."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 256 * 1024,
        "queue.buffering.max.messages": len(records) + 1, "queue.buffering.max.kbytes": 1 << 20,
        "acks": "all", "enable.idempotence": False, "max.in.flight.requests.per.connection": 1})
    offsets: dict[bytes, int] = {}
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            offsets[msg.key()] = max(offsets.get(msg.key(), -1), msg.offset())

    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0 and not failures, failures[:3]
    return offsets


def _filled_topic(bootstrap: str, records: list[tuple[bytes, bytes]]) -> tuple[str, dict[bytes, int]]:
    """A compacted topic nothing is cleaned in yet (dirty ratio 1.0) holding ``records``, then
    enough records of one other key that all of them lie in inactive segments."""
    topic = f"keymap-{uuid.uuid4().hex[:8]}"
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0",
              "segment.bytes": str(SEGMENT_BYTES)}
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    filler = [(b"filler", b"f" * 1000)] * (SEGMENT_BYTES // 1000 + 100)
    return topic, _produce(bootstrap, topic, records + filler)


def _start_cleaning(bootstrap: str, topic: str) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry(
        "min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET)])
    admin = _admin(bootstrap)  # kept alive until the answer (a collected client drops it)
    admin.incremental_alter_configs([resource])[resource].result(30)


def _active_base(directory: Path) -> int:
    return max(int(p.name[:20]) for p in directory.glob("*.log") if p.name[:20].isdigit())


def _checkpoint(directory: Path) -> int:
    try:
        return int((directory / "cleaner-offset-checkpoint").read_text().strip())
    except (FileNotFoundError, ValueError):
        return -1


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _wait_cleaned(broker: Any, directory: Path, sample: list[int]) -> None:
    """Until the cleaner checkpoint reaches the active segment; appends VmRSS samples (KiB)."""
    target = _active_base(directory)
    deadline = time.monotonic() + DEADLINE_S
    while _checkpoint(directory) < target:
        assert time.monotonic() < deadline, f"not cleaned in {DEADLINE_S} s:\n{broker.stderr()[-3000:]}"
        sample.append(_status_kib(broker.pid, "VmRSS"))
        time.sleep(0.02)


def _read_all(bootstrap: str, topic: str) -> list[tuple[Any, Any, Any]]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
        "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        rows: list[tuple[Any, Any, Any]] = []
        while True:
            messages = consumer.consume(10_000, 10)
            assert messages, "no partition EOF within 10 s"
            for msg in messages:
                error: Any = msg.error()
                if error is not None:
                    assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                    return rows
                rows.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def test_more_distinct_keys_than_the_map_holds_are_compacted_over_several_passes(
        broker_factory: Any) -> None:
    broker = broker_factory(BROKER_CONFIG)
    keys = MAP_KEYS + MAP_KEYS // 4
    rounds = [(b"key-%06d" % i, b"round-%d-%06d" % (r, i)) for r in (1, 2) for i in range(keys)]
    topic, latest = _filled_topic(broker.bootstrap, rounds)
    directory = broker.data_dir / f"{topic}-0"
    _start_cleaning(broker.bootstrap, topic)
    _wait_cleaned(broker, directory, [])

    rows = _read_all(broker.bootstrap, topic)
    keyed = [row for row in rows if row[1] != b"filler"]
    assert len(keyed) == keys
    assert all(value.startswith(b"round-2-") for _, _, value in keyed)
    assert {key: offset for offset, key, _ in keyed} == {k: o for k, o in latest.items() if k != b"filler"}
    # Each pass stopped where its map filled, and the next went on from there.
    stops = [int(m) for m in re.findall(rf"{topic}-0: the cleaner's key map is full \(\d+ keys\): cleaning"
                                        r" up to offset (\d+)", broker.stderr())]
    assert len(stops) >= 2 and stops == sorted(set(stops)), stops


def test_the_broker_s_memory_does_not_follow_the_keys_it_cleans(broker_factory: Any) -> None:
    broker = broker_factory(BROKER_CONFIG)
    keys = 25_000  # of 2 KiB each: 50 MB of distinct keys, two maps' worth of them
    records = [((b"%06d" % i) * 342, b"v") for i in range(keys)]
    topic, _ = _filled_topic(broker.bootstrap, records)
    directory = broker.data_dir / f"{topic}-0"
    before = _status_kib(broker.pid, "VmRSS")
    try:
        Path(f"/proc/{broker.pid}/clear_refs").write_text("5")  # reset VmHWM to VmRSS
        hwm_reset = True
    except OSError:
        hwm_reset = False
    samples: list[int] = [before]
    _start_cleaning(broker.bootstrap, topic)
    _wait_cleaned(broker, directory, samples)
    peak = max(max(samples), _status_kib(broker.pid, "VmHWM") if hwm_reset else 0)
    growth_mb = (peak - before) * 1024 / 1e6
    print(f"broker VmRSS before cleaning {before / 1024:.1f} MiB, peak while cleaning "
          f"{peak / 1024:.1f} MiB (+{growth_mb:.1f} MB) for {keys * 2048 / 1e6:.0f} MB of distinct keys")
    assert growth_mb < 30, f"the broker grew by {growth_mb:.1f} MB while cleaning"
    assert len(_read_all(broker.bootstrap, topic)) >= keys
