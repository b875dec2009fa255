"""Kafka's system-test clients against our broker: ``VerifiableProducer`` and ``VerifiableConsumer``.

They are the programs Kafka's own system tests judge a broker with: they print one JSON event per
acknowledged send, consumed batch and offset commit, so what they were told can be checked against
what the broker holds. The invariants checked are Kafka's:
* an idempotent producer (acks=all) survives a broker kill -9 with every acknowledged record stored
  exactly once, at the partition and offset it was acknowledged with;
* consumers of a classic group, committing synchronously after every poll, consume every record, and
  consume a record twice only when a commit covering its first consumption failed.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerFactory
from tests.oracles.kafka_tools import (
    JavaProgram,
    create_topic,
    read_topic,
    stop_all,
    text,
    wait_until,
    write_properties,
)

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.usefixtures("kafka_jars_available")]

RECORDS = 20_000
PARTITIONS = 3
PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
SIGTERM_EXIT = 143  # a JVM that ran its shutdown hooks on SIGTERM exits with 128 + 15


def _events(program: JavaProgram, name: str) -> list[dict[str, Any]]:
    return [event for event in program.events() if event.get("name") == name]


def test_idempotent_producer_keeps_every_acknowledged_record_across_a_broker_kill(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": PARTITIONS})
    topic = f"verifiable-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    config = write_properties(
        tmp_path / "producer.properties",
        {
            "enable.idempotence": True,
            "acks": "all",
            "retries": 2**31 - 1,
            "max.in.flight.requests.per.connection": 5,
            "delivery.timeout.ms": 120_000,
            "linger.ms": 5,
        },
    )
    producer = JavaProgram(
        tmp_path, "producer", PRODUCER,
        "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--max-messages", str(RECORDS), "--throughput", "4000", "--acks", "-1",
        "--producer.config", str(config),
    )
    try:
        producer.start()
        wait_until(
            lambda: len(_events(producer, "producer_send_success")) >= RECORDS // 4,
            60, "a quarter of the records acknowledged",
        )
        broker.restart(kill=True)
        assert producer.wait(150) == 0, producer.stderr()
    finally:
        stop_all([producer])

    acked = _events(producer, "producer_send_success")
    errors = _events(producer, "producer_send_error")
    assert errors == [], errors[:5]
    assert len(acked) == RECORDS, f"{len(acked)} of {RECORDS} acknowledged"
    assert _events(producer, "tool_data")[-1]["acked"] == RECORDS

    stored = read_topic(broker.bootstrap, topic, PARTITIONS)
    values = Counter(text(record) for record in stored)
    duplicates = {value: count for value, count in values.items() if count > 1}
    assert duplicates == {}, f"{len(duplicates)} values stored twice or more, e.g. {list(duplicates)[:5]}"
    at = {(record.partition(), record.offset()): text(record) for record in stored}
    misplaced = [
        event for event in acked if at.get((event["partition"], event["offset"])) != event["value"]
    ]
    assert misplaced == [], f"{len(misplaced)} acknowledged records not where acked, e.g. {misplaced[:3]}"


def _produce(bootstrap: str, topic: str, numbers: range) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in numbers:
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _consumed_offsets(consumer: JavaProgram) -> list[tuple[int, int, range, bool]]:
    """(timestamp, partition, offsets, committed) for each batch the consumer reported, in order;
    committed says whether the synchronous commit after that poll succeeded."""
    batches: list[tuple[int, int, range, bool]] = []
    pending: list[tuple[int, int, range]] = []
    for event in consumer.events():
        if event["name"] == "records_consumed":
            pending = [
                (event["timestamp"], part["partition"], range(part["minOffset"], part["maxOffset"] + 1))
                for part in event["partitions"]
            ]
        elif event["name"] == "offsets_committed":
            batches += [(*batch, bool(event["success"])) for batch in pending]
            pending = []
    batches += [(*batch, False) for batch in pending]  # killed or stopped before its commit
    return batches


def test_classic_group_of_verifiable_consumers_consumes_each_record_once(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory({"num.partitions": PARTITIONS})
    topic = f"verifiable-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    # The first member consumes half the records alone, the second joins (a rebalance hands over
    # partitions with the first member's commits), then both consume the second half.
    config = write_properties(tmp_path / "consumer.properties", {"max.poll.records": 100})
    group = f"verifiable-group-{uuid.uuid4().hex[:8]}"
    consumers = [
        JavaProgram(
            tmp_path, f"consumer-{n}", CONSUMER,
            "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group-id", group,
            "--group-protocol", "classic", "--session-timeout", "10000",
            "--consumer.config", str(config),
        )
        for n in range(2)
    ]

    def consumed() -> set[tuple[int, int]]:
        return {
            (partition, offset)
            for consumer in consumers
            for _, partition, offsets, _ in _consumed_offsets(consumer)
            for offset in offsets
        }

    try:
        _produce(broker.bootstrap, topic, range(RECORDS // 2))
        consumers[0].start()
        wait_until(lambda: len(consumed()) > 0, 60, "the first member's first records")
        consumers[1].start()
        wait_until(lambda: bool(_events(consumers[1], "partitions_assigned")), 60, "the second member joined")
        _produce(broker.bootstrap, topic, range(RECORDS // 2, RECORDS))
        wait_until(lambda: len(consumed()) >= RECORDS, 90, f"{RECORDS} records consumed by the group")
        for consumer in consumers:
            assert consumer.terminate() == SIGTERM_EXIT, consumer.stderr()
    finally:
        stop_all(consumers)

    for consumer in consumers:
        assert _events(consumer, "partitions_assigned"), f"{consumer.name} never joined the group"
        assert _events(consumer, "shutdown_complete"), consumer.stderr()
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)}
    assert consumed() == expected

    # A record may come again only after a consumption of it whose commit failed.
    commits: dict[tuple[int, int], list[bool]] = defaultdict(list)
    batches = sorted(
        (batch for consumer in consumers for batch in _consumed_offsets(consumer)),
        key=lambda batch: (batch[0], batch[1], batch[2].start),
    )
    for _, partition, offsets, committed in batches:
        for offset in offsets:
            commits[(partition, offset)].append(committed)
    unexplained = sorted(key for key, outcomes in commits.items() if all(outcomes[:-1]) and len(outcomes) > 1)
    assert unexplained == [], (
        f"{len(unexplained)} records consumed again although the commit after their earlier "
        f"consumption succeeded, e.g. {[(key, commits[key]) for key in unexplained[:5]]}"
    )
