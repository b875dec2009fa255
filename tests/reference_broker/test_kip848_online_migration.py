"""Online upgrade and downgrade of a non-empty group (KIP-848, ``group.consumer.migration.policy``,
BIDIRECTIONAL by default in Kafka 4.1), with confluent-kafka members of both protocols in one
group: a classic member reads; a consumer-protocol member joins (the classic group becomes a
consumer group, the classic member stays in it through JoinGroup/SyncGroup/Heartbeat); the
consumer-protocol member leaves (the group becomes classic again). With a synchronous commit after
every record, every record is consumed, and none twice unless the commit after its first
consumption failed.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerFactory

pytestmark = [pytest.mark.slow]

PARTITIONS = 4
RECORDS = 300
TIMEOUT_S = 90.0


@pytest.fixture(params=["reference", "apache-kafka"])
def bootstrap(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> str:
    if request.param == "apache-kafka":
        request.applymarker(pytest.mark.apache_kafka)
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return broker_factory({"num.partitions": PARTITIONS}).bootstrap


class Member:
    """A group member that records each record it reads and commits right after it."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **({"session.timeout.ms": 10_000} if protocol == "classic" else {}),
            }
        )
        self.consumer.subscribe([topic])
        #: (when, partition, offset, whether the commit after it succeeded)
        self.consumed: list[tuple[float, int, int, bool]] = []

    def poll(self) -> None:
        msg = self.consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            return
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        try:
            self.consumer.commit(message=msg, asynchronous=False)
            committed = True
        except confluent_kafka.KafkaException:
            committed = False
        self.consumed.append((time.monotonic(), partition, offset, committed))


def _group_type(admin: AdminClient, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(10).type


def _until(members: list[Member], done: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for member in members:
            member.poll()


def test_a_group_upgrades_and_downgrades_online_without_losing_or_repeating_records(bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:8]
    topic, group = f"migration-{tag}", f"migration-group-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})

    def produce(numbers: range) -> None:
        for i in numbers:
            producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

    classic = Member(bootstrap, group, topic, "classic")
    members = [classic]
    modern: Member | None = None
    try:
        produce(range(RECORDS // 3))
        _until(members, lambda: len(classic.consumed) >= RECORDS // 6, "the classic member's first records")
        modern = Member(bootstrap, group, topic, "consumer")
        members.append(modern)
        upgraded = confluent_kafka.ConsumerGroupType.CONSUMER
        _until(members, lambda: _group_type(admin, group) == upgraded, "the online upgrade")
        produce(range(RECORDS // 3, 2 * RECORDS // 3))
        _until(members, lambda: bool(modern and modern.consumed), "the consumer-protocol member's records")
        modern.consumer.close()
        members.remove(modern)
        downgraded = confluent_kafka.ConsumerGroupType.CLASSIC
        _until(members, lambda: _group_type(admin, group) == downgraded, "the online downgrade")
        produce(range(2 * RECORDS // 3, RECORDS))
        expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)}
        everyone = [classic, modern]
        _until(
            members,
            lambda: expected <= {(p, o) for m in everyone for _, p, o, _ in m.consumed},
            "every record",
        )
    finally:
        for member in members:
            member.consumer.close()
    outcomes: dict[tuple[int, int], list[bool]] = defaultdict(list)
    assert modern is not None
    for _, partition, offset, committed in sorted(classic.consumed + modern.consumed):
        outcomes[(partition, offset)].append(committed)
    repeated = sorted(k for k, seen in outcomes.items() if len(seen) > 1 and any(seen[:-1]))
    assert repeated == [], f"records read again after a successful commit: {repeated[:10]}"
