"""Broker configs as Kafka's admin tools see them: DescribeConfigs of the broker resource reports
what the broker uses, and dynamic broker configs (cluster default and per broker) are applied
live, kept across a restart and refused for keys Kafka cannot change dynamically."""

from __future__ import annotations

import json
import uuid
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.dynamic_config import DYNAMIC_CONFIG_FILE
from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from tests.reference_broker.wire import WireClient

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


def describe(client: WireClient, resource_type: int, name: str) -> dict[str, Any]:
    request = DescribeConfigsRequest(
        include_synonyms=True,
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=None
            )
        ],
    )
    result = client.request(request, 4).results[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def alter_broker(
    client: WireClient, name: str, *changes: tuple[str, int, str | None]
) -> tuple[int, str | None]:
    op = IncrementalAlterConfigsRequest.AlterableConfig
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=BROKER,
                resource_name=name,
                configs=[
                    op(name=key, config_operation=operation, value=value) for key, operation, value in changes
                ],
            )
        ]
    )
    response = client.request(request, 1).responses[0]
    return response.error_code, response.error_message


def produce_error(bootstrap: str, topic: str, size: int) -> int | None:
    """The error code of one record of ``size`` bytes (None when it was written)."""
    outcome: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1, "no delivery report within 30 s"
    return None if outcome[0] is None else outcome[0].code()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def test_broker_describe_reports_the_values_in_use(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"node.id": 3})
    with WireClient(broker.bootstrap) as client:
        configs = describe(client, BROKER, "3")
    address = f"PLAINTEXT://{broker.bootstrap}"
    assert configs["broker.id"].value == "3" and configs["broker.id"].config_source == STATIC
    assert configs["node.id"].value == "3" and configs["node.id"].config_source == STATIC
    assert configs["listeners"].value == address and configs["listeners"].config_source == STATIC
    assert configs["advertised.listeners"].value == address
    assert configs["log.dirs"].value == str(broker.data_dir)
    assert configs["log.dirs"].config_source == STATIC
    # Only the key's own value: log.retention.ms is unset (its default comes through the hours).
    assert configs["log.retention.ms"].value is None and synonyms(configs["log.retention.ms"]) == []
    assert synonyms(configs["log.retention.hours"]) == [("log.retention.hours", "168", DEFAULT)]
    assert configs["log.cleaner.threads"].read_only is False
    assert configs["num.partitions"].read_only is True


def test_topic_synonyms_are_kafkas(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = f"synonyms-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    with WireClient(broker.bootstrap) as client:
        configs = describe(client, TOPIC, topic)
    for name in ("retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms"):
        assert synonyms(configs[name]) == [], name
        assert configs[name].config_source == DEFAULT, name
    assert synonyms(configs["cleanup.policy"]) == [("log.cleanup.policy", "delete", DEFAULT)]


def test_dynamic_broker_configs_apply_live_and_survive_a_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = f"dynamic-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    assert produce_error(broker.bootstrap, topic, 5000) is None
    with WireClient(broker.bootstrap) as client:
        assert alter_broker(
            client, "", ("message.max.bytes", SET, "2000"), ("log.cleaner.threads", SET, "2")
        ) == (
            ErrorCode.NONE,
            None,
        )
    assert produce_error(broker.bootstrap, topic, 5000) == ErrorCode.MESSAGE_TOO_LARGE
    with WireClient(broker.bootstrap) as client:
        assert alter_broker(client, "1", ("message.max.bytes", SET, "100000")) == (ErrorCode.NONE, None)
        defaults = describe(client, BROKER, "")
        topic_configs = describe(client, TOPIC, topic)
    assert produce_error(broker.bootstrap, topic, 5000) is None
    assert sorted(defaults) == ["log.cleaner.threads", "message.max.bytes"]
    assert synonyms(defaults["message.max.bytes"]) == [("message.max.bytes", "2000", DYNAMIC_DEFAULT)]
    assert topic_configs["max.message.bytes"].value == "100000"
    assert topic_configs["max.message.bytes"].config_source == DYNAMIC_BROKER

    broker.restart()
    with WireClient(broker.bootstrap) as client:
        configs = describe(client, BROKER, "1")
    assert synonyms(configs["message.max.bytes"]) == [
        ("message.max.bytes", "100000", DYNAMIC_BROKER),
        ("message.max.bytes", "2000", DYNAMIC_DEFAULT),
        ("message.max.bytes", "1048588", DEFAULT),
    ]
    assert configs["log.cleaner.threads"].value == "2"
    assert configs["log.cleaner.threads"].config_source == DYNAMIC_DEFAULT
    with WireClient(broker.bootstrap) as client:
        assert alter_broker(client, "1", ("message.max.bytes", DELETE, None)) == (ErrorCode.NONE, None)
    assert produce_error(broker.bootstrap, topic, 5000) == ErrorCode.MESSAGE_TOO_LARGE


def test_configs_kafka_cannot_change_dynamically_are_refused(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    with WireClient(broker.bootstrap) as client:
        assert alter_broker(client, "1", ("num.partitions", SET, "3"), ("broker.rack", SET, "x")) == (
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs dynamically: Set(num.partitions, broker.rack)",
        )
        code, message = alter_broker(client, "", ("log.cleaner.threads", SET, "many"))
        assert code == ErrorCode.INVALID_REQUEST and "log.cleaner.threads" in (message or "")
        legacy = AlterConfigsRequest(
            resources=[
                AlterConfigsRequest.AlterConfigsResource(
                    resource_type=BROKER,
                    resource_name="",
                    configs=[AlterConfigsRequest.AlterableConfig(name="log.dirs", value="/elsewhere")],
                )
            ]
        )
        assert client.request(legacy, 2).responses[0].error_code == ErrorCode.INVALID_REQUEST
        assert describe(client, BROKER, "") == {}


def test_a_stored_dynamic_config_no_longer_accepted_is_left_out_at_start(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    with WireClient(broker.bootstrap) as client:
        assert alter_broker(client, "", ("log.cleaner.threads", SET, "4")) == (ErrorCode.NONE, None)
    broker.terminate()
    stored_path = broker.data_dir / DYNAMIC_CONFIG_FILE
    stored = json.loads(stored_path.read_text())
    assert stored["cluster_default"] == {"log.cleaner.threads": "4"}
    stored["cluster_default"]["num.partitions"] = "7"  # not dynamic: Kafka ignores it at load
    stored_path.write_text(json.dumps(stored))
    broker.start()
    with WireClient(broker.bootstrap) as client:
        defaults = describe(client, BROKER, "")
    assert {name: entry.value for name, entry in defaults.items()} == {"log.cleaner.threads": "4"}
    assert "dynamic default config num.partitions ignored" in broker.stderr()
