"""The Apache Kafka fixture itself: a node starts, serves a peer client, survives kill -9."""

from __future__ import annotations

import uuid
from typing import Any

import confluent_kafka
import pytest

pytestmark = pytest.mark.apache_kafka


def _round_trip(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < count:
            message = consumer.poll(30)
            assert message is not None, f"timed out after {len(values)} records"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_node_serves_a_peer_client(apache_kafka: Any) -> None:
    topic = f"fixture-{uuid.uuid4().hex[:8]}"
    assert _round_trip(apache_kafka.bootstrap, topic, 100) == [str(i).encode() for i in range(100)]


@pytest.mark.slow
def test_a_killed_node_restarts_with_its_data(apache_kafka_factory: Any) -> None:
    node = apache_kafka_factory(**{"log.flush.interval.messages": 1})
    topic = f"fixture-{uuid.uuid4().hex[:8]}"
    _round_trip(node.bootstrap, topic, 10)
    pid = node.pid
    node.restart(kill=True)
    assert node.pid != pid
    assert _round_trip(node.bootstrap, topic, 20)[:10] == [str(i).encode() for i in range(10)]
