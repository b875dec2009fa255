"""Kafka 4's default bound on future timestamps, checked against Apache Kafka as the control.

``log.message.timestamp.after.max.ms`` is one hour by default in Kafka 4 (KIP-1005): a producer
whose clock runs two hours ahead gets INVALID_TIMESTAMP, on the reference broker as on Kafka.
"""

from __future__ import annotations

import time
import uuid

import pytest

from reference_broker.testing import BrokerFactory

confluent_kafka = pytest.importorskip("confluent_kafka")

HOUR_MS = 3_600_000


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "reference_broker":
        return broker_factory().bootstrap
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def produce_at(bootstrap: str, topic: str, timestamp_ms: int) -> int:
    """The error code of producing one record stamped ``timestamp_ms`` (0 when it was stored)."""
    outcome: list[int] = []
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "message.send.max.retries": 0, "message.timeout.ms": 20000}
    )
    producer.produce(
        topic,
        b"v",
        timestamp=timestamp_ms,
        on_delivery=lambda err, _msg: outcome.append(0 if err is None else err.code()),
    )
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def test_a_record_two_hours_ahead_is_refused_and_one_minute_ahead_is_stored(bootstrap: str) -> None:
    topic = f"ts-{uuid.uuid4().hex[:8]}"
    now = int(time.time() * 1000)
    assert produce_at(bootstrap, topic, now + 60_000) == 0
    assert produce_at(bootstrap, topic, now + 2 * HOUR_MS) == confluent_kafka.KafkaError.INVALID_TIMESTAMP
