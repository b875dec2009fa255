"""confluent-kafka (librdkafka) against the shared broker: idempotent produce, assign-mode consume,
admin topics and configs.

Consumers use ``assign()`` with explicit offsets: the group coordinator arrives in a later issue,
and librdkafka's assign mode needs no group APIs as long as nothing is committed.
"""

from __future__ import annotations

import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic  # noqa: E402

from reference_broker.testing import BrokerFactory, BrokerProcess  # noqa: E402

TIMEOUT = 20


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = admin_for(broker)  # must outlive the future: destroying it cancels the request
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    futures[name].result(TIMEOUT)


def consume_all(
    broker: BrokerProcess, topic: str, partitions: int, expected: int, isolation: str = "read_uncommitted"
) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("unused"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages = []
        for _ in range(200):
            batch = consumer.consume(num_messages=1000, timeout=0.2)
            for msg in batch:
                assert msg.error() is None, msg.error()
                messages.append(msg)
            if len(messages) >= expected:
                break
        return messages
    finally:
        consumer.close()


def test_idempotent_produce_and_consume(broker: BrokerProcess) -> None:
    assert "event loop uvloop" in broker.stderr()  # the default where uvloop is installed
    produce_and_consume_idempotently(broker)


def test_standard_event_loop_serves_the_same(broker_factory: BrokerFactory) -> None:
    """``--event-loop asyncio``, the loop used where uvloop is missing, serves clients alike."""
    broker = broker_factory(event_loop="asyncio")
    assert "event loop asyncio" in broker.stderr()
    produce_and_consume_idempotently(broker)


def produce_and_consume_idempotently(broker: BrokerProcess) -> None:
    topic = unique("ck-idem")
    create_topic(broker, topic, partitions=3)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    delivered: list = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(300):
        producer.produce(
            topic,
            key=f"k{i % 17}".encode(),
            value=f"v{i}".encode(),
            on_delivery=on_delivery,
            headers=[("h", b"x")],
        )
    assert producer.flush(TIMEOUT) == 0
    assert len(delivered) == 300
    for p in range(3):
        offsets = sorted(o for part, o, _, _ in delivered if part == p)
        assert offsets == list(range(len(offsets)))

    messages = consume_all(broker, topic, 3, 300)
    assert sorted((m.partition(), m.offset(), m.key(), m.value()) for m in messages) == sorted(delivered)
    assert all(m.headers() == [("h", b"x")] for m in messages)


@pytest.mark.parametrize("idempotent", [False, True])
def test_keyless_records_on_a_compacted_topic_fail_alone(broker: BrokerProcess, idempotent: bool) -> None:
    """librdkafka reads KIP-467's record_errors: the keyless records fail with INVALID_RECORD,
    the keyed ones of the same batch with _INVALID_DIFFERENT_RECORD, and nothing is stored."""
    topic = unique("ck-compact")
    create_topic(broker, topic, config={"cleanup.policy": "compact"})
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "enable.idempotence": idempotent}
    )
    outcomes: dict[bytes, str | None] = {}

    def delivered(err: object, msg: object) -> None:
        outcomes[msg.value()] = err.name() if err else None  # type: ignore[attr-defined]

    for i, key in enumerate([b"k0", None, b"k2", None, b"k4"]):
        producer.produce(topic, b"v%d" % i, key=key, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    assert outcomes == {
        b"v0": "_INVALID_DIFFERENT_RECORD",
        b"v1": "INVALID_RECORD",
        b"v2": "_INVALID_DIFFERENT_RECORD",
        b"v3": "INVALID_RECORD",
        b"v4": "_INVALID_DIFFERENT_RECORD",
    }
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("unused")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
    finally:
        consumer.close()
    assert (low, high) == (0, 0)


def test_compressed_produce(broker: BrokerProcess) -> None:
    topic = unique("ck-codec")
    create_topic(broker, topic)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "compression.codec": codec, "linger.ms": 20}
        )
        for i in range(50):
            producer.produce(topic, value=f"{codec}-{i}".encode() * 10)
        assert producer.flush(TIMEOUT) == 0
    messages = consume_all(broker, topic, 1, 200)
    assert [m.offset() for m in messages] == list(range(200))
    assert messages[-1].value() == b"zstd-49" * 10


def test_admin_create_list_delete_topics(broker: BrokerProcess) -> None:
    admin = admin_for(broker)
    topic = unique("ck-admin")
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(TIMEOUT)
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert len(metadata.topics[topic].partitions) == 4
    assert metadata.controller_id == metadata.orig_broker_id or metadata.controller_id >= 0

    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT)
    assert info.value.args[0].name() == "TOPIC_ALREADY_EXISTS"

    with pytest.raises(KafkaException) as info:
        bad = unique("ck-rf")
        admin.create_topics([NewTopic(bad, num_partitions=1, replication_factor=3)])[bad].result(TIMEOUT)
    assert info.value.args[0].name() == "INVALID_REPLICATION_FACTOR"

    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(TIMEOUT)
    assert len(admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) == 6

    admin.delete_topics([topic], operation_timeout=10)[topic].result(TIMEOUT)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics


def test_admin_describe_and_alter_configs(broker: BrokerProcess) -> None:
    admin = admin_for(broker)
    topic = unique("ck-config")
    create_topic(broker, topic, config={"retention.ms": "123456", "cleanup.policy": "delete"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].value == str(1 << 30)

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "999", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([change])[change].result(TIMEOUT)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == "999"

    node = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = admin.describe_configs([node])[node].result(TIMEOUT)
    assert broker_configs["num.partitions"].value == "1"
    assert broker_configs["socket.request.max.bytes"].value == str(100 * 1024 * 1024)


def test_describe_cluster(broker: BrokerProcess) -> None:
    admin = admin_for(broker)
    cluster = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert cluster.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, broker.host, broker.port)]
    assert cluster.cluster_id
