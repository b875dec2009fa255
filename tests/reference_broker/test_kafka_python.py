"""kafka-python against the shared broker: produce, assign-mode consume, admin topics and configs."""

from __future__ import annotations

import uuid

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402
from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError  # noqa: E402

from reference_broker.testing import BrokerProcess  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_produce_and_consume(broker: BrokerProcess) -> None:
    """Two rounds while one consumer stays assigned: kafka-python uses incremental fetch sessions
    (KIP-227), so the second round arrives through incremental responses."""
    topic = unique("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=30_000,  # only a failing run waits this long for a missing record
        fetch_max_wait_ms=100,
    )
    try:
        tp = TopicPartition(topic, 0)
        records = []
        for round_ in range(2):
            futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(100)]
            producer.flush(20)
            offsets = [f.get(20).offset for f in futures]
            assert offsets == list(range(round_ * 100, round_ * 100 + 100))
            if round_ == 0:
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
            for record in consumer:
                records.append(record)
                if len(records) == 100 * (round_ + 1):
                    break
        assert [(r.offset, r.key, r.value) for r in records] == [
            (n * 100 + i, b"k%d" % i, b"v%d" % i) for n in range(2) for i in range(100)
        ]
        assert consumer.end_offsets([tp])[tp] == 200
    finally:
        consumer.close()
        producer.close(5)


def test_admin_topics_and_configs(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    topic = unique("kp-admin")
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=2,
                    replication_factor=1,
                    topic_configs={"retention.bytes": "1048576"},
                )
            ]
        )
        assert topic in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic(unique("kp-rf"), num_partitions=1, replication_factor=2)])

        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        entries = described["topic"][topic]
        assert entries["retention.bytes"]["value"] == "1048576"
        assert entries["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert entries["cleanup.policy"]["value"] == "delete"
        assert entries["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert set(modified["topic"][topic]) == {"retention.bytes"}

        admin.create_partitions({topic: NewPartitions(total_count=3)})
        (meta,) = admin.describe_topics([topic])
        assert len(meta["partitions"]) == 3

        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
    finally:
        admin.close()
