"""Log compaction as users see it: confluent-kafka produces to a compacted topic, the cleaner runs,
and a consumer reads back exactly the latest value per key at the offsets they were produced at.

The workload: keyed records with many versions per key, tombstones, a committed and an aborted
transaction, in segments rolled by ``segment.ms`` (records carry explicit timestamps far enough
apart that every phase starts a new segment on both brokers). Once the workload is written, each
further round appends one record of a new key ("sentinel") with a later timestamp, which rolls
the previous segment out of the active one and so gives the cleaner new dirty bytes; rounds go on
until the topic reads as the model says it must end (tombstones gone, as ``delete.retention.ms``
has passed since the pass that kept them), or the deadline passes. Apache Kafka runs the same
workload as the oracle: the surviving (offset, key, value) rows of the workload must be the same.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sdk.records import iter_batches

Row = tuple[int, bytes, bytes | None]

CLEANER_BROKER_CONFIG = {"log.cleaner.backoff.ms": 100}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
PHASE_MS = 5_000
DEADLINE_S = 90.0


@dataclass
class Workload:
    """What was produced: every acknowledged row, and which of them were aborted."""

    rows: list[Row] = field(default_factory=list)
    aborted: set[int] = field(default_factory=set)
    sentinels: int = 0
    sentinel_base: int = 0  # timestamp of the first sentinel, later than every workload record

    def expected(self) -> list[Row]:
        """The compacted topic: per key the newest committed row, tombstones removed."""
        latest: dict[bytes, Row] = {}
        for row in sorted(self.rows):
            if row[0] not in self.aborted:
                latest[row[1]] = row
        return sorted(r for r in latest.values() if r[2] is not None)


def _deliveries(rows: list[Row]) -> Callable[[Any, Any], None]:
    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        rows.append((msg.offset(), msg.key(), msg.value()))

    return report


def _produce(producer: Any, topic: str, records: list[tuple[bytes, bytes | None]], ts: int,
             rows: list[Row]) -> None:
    """Produce ``records`` with timestamp ``ts``; delivery reports (at flush) append to ``rows``."""
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, timestamp=ts,
                         on_delivery=_deliveries(rows))


def _versions(phase: int) -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for version in range(6):
        for key in range(8):
            out.append((b"key-%d" % key, b"p%d-v%d-k%d" % (phase, version, key)))
    return out


def run_workload(bootstrap: str, topic: str) -> Workload:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(timeout=30)
    work = Workload()
    t0 = int(time.time() * 1000)
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                      "enable.idempotence": True})
    # phase 0: versions, then tombstones for two keys (one of them is written again later)
    _produce(plain, topic, _versions(0), t0, work.rows)
    plain.flush(30)
    _produce(plain, topic, [(b"key-1", None), (b"key-2", None)], t0, work.rows)
    plain.flush(30)
    # phase 1: a committed and an aborted transaction, more versions, key-2 comes back
    for commit in (True, False):
        txn = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                        "transactional.id": f"{topic}-{commit}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        rows: list[Row] = []
        records = [(b"key-3", b"txn-%d" % commit), (b"txn-only-%d" % commit, b"txn")]
        _produce(txn, topic, records, t0 + PHASE_MS, rows)
        txn.flush(30)
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
        work.rows += rows
        if not commit:
            work.aborted.update(r[0] for r in rows)
    _produce(plain, topic, [*_versions(1)[:20], (b"key-2", b"back"), (b"key-4", None)],
             t0 + PHASE_MS, work.rows)
    plain.flush(30)
    work.sentinel_base = t0 + 2 * PHASE_MS
    return work


def _consume_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[Row]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
        "enable.partition.eof": True, "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        rows: list[Row] = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no partition EOF within 10 s"
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                return rows
            rows.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def compact_until_settled(bootstrap: str, topic: str, work: Workload) -> list[Row]:
    """Add sentinel rounds until the topic reads as ``work.expected()``; returns what was read."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + DEADLINE_S
    got: list[Row] = []
    while True:
        ts = work.sentinel_base + work.sentinels * PHASE_MS
        _produce(producer, topic, [(b"sentinel-%d" % work.sentinels, b"s")], ts, work.rows)
        producer.flush(30)
        work.sentinels += 1
        got = _consume_all(bootstrap, topic)
        if got == work.expected():
            return got
        assert time.monotonic() < deadline, (
            f"not compacted in {DEADLINE_S} s:\nread     {got}\nexpected {work.expected()}")
        time.sleep(0.3)  # a polling interval: each round rolls one more segment


def _workload_records(rows: list[Row]) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of the workload's surviving rows in offset order (each pair was produced
    once, so this names exactly which produced records survived)."""
    return [(r[1], r[2]) for r in rows if not r[1].startswith(b"sentinel-")]


@pytest.mark.interop
def test_compacted_topic_reads_as_the_latest_value_per_key(broker_factory: Any) -> None:
    broker = broker_factory(CLEANER_BROKER_CONFIG)
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    work = run_workload(broker.bootstrap, topic)
    got = compact_until_settled(broker.bootstrap, topic, work)
    produced = {r[0]: r for r in work.rows}
    assert all(produced[r[0]] == r for r in got), "a record moved to another offset"
    assert not {r[0] for r in got} & work.aborted
    assert {r[1] for r in got} >= {b"key-2", b"key-3", b"txn-only-1"}
    assert b"key-4" not in {r[1] for r in got}  # its tombstone is gone too
    assert len(got) < len(work.rows) // 4
    assert _consume_all(broker.bootstrap, topic, "read_committed") == got


@pytest.mark.interop
@pytest.mark.apache_kafka
@pytest.mark.slow
def test_compaction_keeps_the_same_rows_as_apache_kafka(
    broker_factory: Any, apache_kafka_factory: Callable[..., Any]
) -> None:
    kafka = apache_kafka_factory(**CLEANER_BROKER_CONFIG)
    ours = broker_factory(CLEANER_BROKER_CONFIG)
    results = {}
    for name, bootstrap in (("kafka", kafka.bootstrap), ("ours", ours.bootstrap)):
        topic = f"compacted-{uuid.uuid4().hex[:8]}"
        work = run_workload(bootstrap, topic)
        got = compact_until_settled(bootstrap, topic, work)
        produced = {r[0]: r for r in work.rows}
        assert all(produced[r[0]] == r for r in got), f"{name}: a record moved to another offset"
        results[name] = _workload_records(got)
    assert results["ours"] == results["kafka"]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def _records_on_disk(partition_dir: Path) -> int:
    return sum(batch.record_count for path in partition_dir.glob("*.log")
               for batch in iter_batches(path.read_bytes()))


def _cleaned_partitions(data_dir: Path, prefix: str) -> list[Path]:
    return [p.parent for p in data_dir.glob(f"{prefix}-*/cleaner-offset-checkpoint")
            if int(p.read_text()) > 0]


@pytest.mark.interop
def test_internal_topics_are_compacted_and_recover_after_restart(broker_factory: Any) -> None:
    broker = broker_factory({
        **CLEANER_BROKER_CONFIG, "log.roll.ms": 200, "log.cleaner.min.cleanable.ratio": 0.01,
        "offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1,
    })
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": "compacted-txn"})
    producer.init_transactions(30)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    deadline = time.monotonic() + DEADLINE_S
    commits = 0
    try:
        def compacted() -> bool:
            offsets = _cleaned_partitions(broker.data_dir, "__consumer_offsets")
            return (commits >= 10 and bool(offsets) and _records_on_disk(offsets[0]) < commits // 2
                    and bool(_cleaned_partitions(broker.data_dir, "__transaction_state")))

        while not compacted():
            assert time.monotonic() < deadline, "the internal topics were never cleaned"
            producer.begin_transaction()
            producer.produce(topic, key=b"k", value=b"%d" % commits, partition=0)
            producer.commit_transaction(30)
            commits += 1
            consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, commits)],
                            asynchronous=False)
            time.sleep(0.05)  # pacing: log.roll.ms rolls a segment between commits
    finally:
        consumer.close()
    assert _committed(broker.bootstrap, group, topic) == commits
    broker.restart(kill=True)
    assert _committed(broker.bootstrap, group, topic) == commits
    again = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                      "transactional.id": "compacted-txn"})
    again.init_transactions(30)  # the coordinator recovered the id from its compacted log
    again.begin_transaction()
    again.produce(topic, key=b"k", value=b"after", partition=0)
    again.commit_transaction(30)
    with pytest.raises(confluent_kafka.KafkaException):
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"fenced", partition=0)
        producer.commit_transaction(10)


@pytest.mark.slow
@pytest.mark.interop
def test_kill_9_while_the_cleaner_runs_loses_no_latest_value(broker_factory: Any) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": 10})
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    work = run_workload(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for round_ in range(6):
        ts = work.sentinel_base + work.sentinels * PHASE_MS
        _produce(producer, topic, [(b"sentinel-%d" % work.sentinels, b"s")], ts, work.rows)
        producer.flush(30)
        work.sentinels += 1
        time.sleep(0.02 * round_)  # vary where in the cleaner's work the kill lands
        broker.restart(kill=True)
        got = _consume_all(broker.bootstrap, topic)
        produced = {r[0]: r for r in work.rows}
        assert all(produced[r[0]] == r for r in got), "a record moved to another offset"
        assert set(work.expected()) <= set(got), "a key's latest value was lost"
    producer.flush(30)
    assert compact_until_settled(broker.bootstrap, topic, work) == work.expected()


@pytest.mark.parametrize("enabled", [True, False])
async def test_log_cleaner_enable_decides_whether_the_cleaner_task_runs(
    tmp_path: Path, enabled: bool
) -> None:
    from reference_broker.broker import Broker
    from reference_broker.config import BrokerConfig

    config = BrokerConfig.build(tmp_path, port=0, properties={
        "log.cleaner.enable": str(enabled).lower(), "log.cleaner.backoff.ms": 250})
    async with Broker(config) as broker:
        cleaner = broker.services.get("log-cleaner")
        assert (cleaner is not None) == enabled
        if cleaner is not None:
            assert cleaner.backoff_s == 0.25  # type: ignore[attr-defined]
