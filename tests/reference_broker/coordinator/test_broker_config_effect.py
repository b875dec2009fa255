"""Broker keys take effect or are refused, never ignored: ``log.dirs`` / ``log.dir`` other than
the data directory and KIP-848 session and heartbeat settings outside their
``group.consumer.min/max`` bounds (Kafka's GroupCoordinatorConfig checks) stop the start;
``min.insync.replicas`` above the replica count counts as the replica count, as in Kafka;
``transaction.state.log.min.isr`` and ``ssl.truststore.password`` act as in Kafka."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.testing import BrokerProcess, BrokerStartError
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import CreateTopicsRequest, DescribeConfigsRequest, ProduceRequest
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient


@pytest.mark.parametrize("key", ["log.dirs", "log.dir"])
def test_a_data_directory_other_than_the_data_dir_is_refused(tmp_path: Path, key: str) -> None:
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: .* is not the data directory"):
        BrokerConfig.build(data, properties={key: str(tmp_path / "elsewhere")})
    with pytest.raises(ConfigError, match="one directory"):
        BrokerConfig.build(data, properties={key: f"{data},{tmp_path / 'second'}"})
    same = BrokerConfig.build(data, properties={key: str(tmp_path / "." / "data")})
    assert same.data_dir == data


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"log.dirs": "/var/lib/kafka/data"}, "log.dirs: '/var/lib/kafka/data' is not the data directory"),
        ({"group.consumer.session.timeout.ms": 70000},
         "group.consumer.session.timeout.ms: 70000 is outside group.consumer.min.session.timeout.ms"),
        ({"group.consumer.heartbeat.interval.ms": 4000},
         "group.consumer.heartbeat.interval.ms: 4000 is outside group.consumer.min.heartbeat.interval.ms"),
        ({"group.consumer.max.heartbeat.interval.ms": 4000},
         "group.consumer.heartbeat.interval.ms: 5000 is outside"),
    ],
)
def test_the_broker_process_refuses_to_start(properties: dict[str, object], message: str) -> None:
    broker = BrokerProcess(config=properties)
    try:
        with pytest.raises(BrokerStartError, match="exited with code") as failure:
            broker.start()
        assert message in str(failure.value)
    finally:
        broker.stop()


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker: Any) -> str:
    """Our broker, or Apache Kafka (the oracle), as a bootstrap address."""
    if request.param == "reference_broker":
        return str(broker.bootstrap)
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def _produce(bootstrap: str, topic: str, acks: int) -> tuple[int, str | None]:
    batch = RecordBatchBuilder()
    batch.append(0, b"k", b"v")
    request = ProduceRequest(acks=acks, timeout_ms=5_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch.build())])])
    with WireClient(bootstrap) as wire:
        answer = wire.request(request, 9).responses[0].partition_responses[0]
    return answer.error_code, answer.error_message


def test_min_insync_replicas_is_capped_at_the_replica_count(bootstrap: str) -> None:
    """``min.insync.replicas`` above the replication factor counts as the replication factor
    (Kafka's Partition.effectiveMinIsr): a single replica takes acks=all writes."""
    topic = f"min-isr-{uuid.uuid4().hex[:8]}"
    config = CreateTopicsRequest.CreatableTopicConfig(name="min.insync.replicas", value="2")
    creatable = CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, configs=[config])
    with WireClient(bootstrap) as wire:
        created = wire.request(CreateTopicsRequest(timeout_ms=20_000, topics=[creatable]), 5)
    assert created.topics[0].error_code == 0, created.topics[0].error_message
    deadline = time.monotonic() + 30
    answer = _produce(bootstrap, topic, -1)
    while answer[0] in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        assert time.monotonic() < deadline, "the new topic never got a leader"
        time.sleep(0.1)
        answer = _produce(bootstrap, topic, -1)
    assert answer == (0, None)


@pytest.mark.parametrize("with_truststore", [True, False])
def test_a_truststore_password_is_refused_as_kafka_refuses_it(tmp_path: Path, with_truststore: bool) -> None:
    """PEM truststores have no password: Kafka's DefaultSslEngineFactory refuses one, with or
    without a truststore, rather than ignore it."""
    from reference_broker.security.listeners import ListenerError
    from reference_broker.security.tls import server_context
    from tests.reference_broker.security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path)
    settings: dict[str, Any] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca.issue("localhost", server=True).keystore),
        "ssl.truststore.password": "secret",
    }
    if with_truststore:
        settings.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem)})
    with pytest.raises(ListenerError, match=r"^ssl\.truststore\.password: SSL trust store"):
        server_context("SSL", settings.get)
    del settings["ssl.truststore.password"]
    assert server_context("SSL", settings.get) is not None


def _topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)])
    with WireClient(bootstrap) as wire:
        result = wire.request(request, 4).results[0]
    assert result.error_code == 0, result.error_message
    return {entry.name: entry.value for entry in result.configs}


def test_transaction_state_log_min_isr_sets_the_transaction_topic_min_isr(broker_factory: Any) -> None:
    """Kafka creates ``__transaction_state`` with ``min.insync.replicas`` =
    ``transaction.state.log.min.isr``; transactions still commit on one replica (the value is
    capped at the replica count)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker = broker_factory({"transaction.state.log.min.isr": 3})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": f"min-isr-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("min-isr-topic", b"v")
    producer.commit_transaction(30)
    assert _topic_configs(broker.bootstrap, "__transaction_state")["min.insync.replicas"] == "3"
