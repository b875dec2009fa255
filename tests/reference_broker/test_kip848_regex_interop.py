"""A regular-expression subscription of the KIP-848 protocol with a real client, on our broker and,
as the control, on Apache Kafka 4.1: confluent-kafka (librdkafka) with ``group.protocol=consumer``
subscribes to ``^<prefix>.*``, which the broker resolves. It reads every record of the matching
topics and none of the others, and a matching topic created later is picked up (the broker
refreshes the expression and bumps the group epoch) without the client doing anything. An
expression RE2 does not accept is refused with INVALID_REGULAR_EXPRESSION by both."""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import ConsumerGroupHeartbeatRequest, FindCoordinatorRequest
from tests.reference_broker.wire import WireClient

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


def test_an_invalid_regex_is_refused_as_kafka_refuses_it(bootstrap: str) -> None:
    """RE2 has no backreferences: a pattern Java's own engine would take is refused too."""
    group = f"invalid-regex-{uuid.uuid4().hex[:8]}"
    not_ready = {E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE}
    client = WireClient(bootstrap)
    try:
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        for regex in ("orders(", r"(a)\1"):
            join = ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=f"member-{uuid.uuid4().hex[:8]}",
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_regex=regex,
                topic_partitions=[],
            )
            deadline = time.monotonic() + TIMEOUT_S
            while (answer := client.request(join, 1)).error_code in not_ready:
                assert time.monotonic() < deadline, answer
                time.sleep(0.1)
            assert answer.error_code == E.INVALID_REGULAR_EXPRESSION, (regex, answer)
    finally:
        client.close()
