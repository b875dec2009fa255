"""A regular-expression subscription of the KIP-848 protocol with a real client, on our broker and,
as the control, on Apache Kafka 4.1: confluent-kafka (librdkafka) with ``group.protocol=consumer``
subscribes to ``^<prefix>.*``, which the broker resolves. It reads every record of the matching
topics and none of the others, and a matching topic created later is picked up (the broker
refreshes the expression and bumps the group epoch) without the client doing anything."""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerFactory

pytestmark = [pytest.mark.slow]

TIMEOUT_S = 90.0


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory().bootstrap


def _create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(name, num_partitions=2, replication_factor=1) for name in names]
    for future in admin.create_topics(topics).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, count: int) -> set[tuple[str, bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    values = {f"{topic}-{i}".encode() for i in range(count)}
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    return {(topic, v) for v in values}


def test_a_regex_subscription_reads_the_matching_topics_and_picks_up_new_ones(bootstrap: str) -> None:
    prefix = f"regex-{uuid.uuid4().hex[:8]}"
    first, second, other, later = f"{prefix}-a", f"{prefix}-b", f"other-{prefix}", f"{prefix}-c"
    _create(bootstrap, first, second, other)
    expected = _produce(bootstrap, first, 20) | _produce(bootstrap, second, 20)
    _produce(bootstrap, other, 20)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{prefix}-group",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    seen: set[tuple[str, bytes]] = set()

    def read_until(wanted: set[tuple[str, bytes]], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not wanted <= seen:
            assert time.monotonic() < deadline, f"{what}: missing {sorted(wanted - seen)[:5]}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            topic, value = msg.topic(), msg.value()
            assert topic is not None and value is not None
            seen.add((topic, value))

    try:
        consumer.subscribe([f"^{prefix}.*"])
        read_until(expected, "the matching topics' records")
        _create(bootstrap, later)
        expected |= _produce(bootstrap, later, 20)
        read_until(expected, "the records of a matching topic created after the subscription")
        assert {t for t, _ in seen} == {first, second, later}
    finally:
        consumer.close()
