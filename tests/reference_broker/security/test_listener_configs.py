"""Per-listener settings (``listener.name.<listener>.<key>``) in DescribeConfigs of the broker, as
Apache Kafka 4.1 reports them: each configured one is listed under its own name, static and
read-only, typed like the broker key it overrides, without documentation, with that key's
synonym chain after its own entry, and a sensitive one (a JAAS config) null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdk.protocol.messages import DescribeConfigsRequest
from tests.reference_broker.security.conftest import PLAIN_JAAS, Certs, MultiBroker, free_port
from tests.reference_broker.wire import WireClient

BROKER = 4


def listener_settings(certs: Certs) -> dict[str, str]:
    """Two secured listeners' own settings beside broker-wide values of some of the same keys."""
    return {
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs.server.keystore),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(certs.ca.pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "ssl.keystore.location": str(certs.ca.issue("other", server=True).keystore),
    }


def describe_listener_entries(bootstrap: str) -> dict[str, tuple[Any, ...]]:
    """The broker resource's ``listener.name.*`` entries, every field the response carries."""
    request = DescribeConfigsRequest(
        include_synonyms=True,
        include_documentation=True,
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=BROKER, resource_name="1", configuration_keys=None
            )
        ],
    )
    with WireClient(bootstrap) as client:
        result = client.request(request, 4).results[0]
    assert result.error_code == 0, result
    return {
        entry.name: (
            entry.value,
            entry.config_source,
            entry.read_only,
            entry.is_sensitive,
            entry.config_type,
            entry.documentation,
            [(s.name, s.value, s.source) for s in entry.synonyms],
        )
        for entry in result.configs
        if entry.name.startswith("listener.name.")
    }


def test_per_listener_settings_are_described(certs: Certs, multi_listener_broker: MultiBroker) -> None:
    settings = listener_settings(certs)
    _, ports = multi_listener_broker(["PLAINTEXT", "SASL_PLAINTEXT", "SSL"], settings)
    entries = describe_listener_entries(ports.address("PLAINTEXT"))
    assert set(entries) == {key for key in settings if key.startswith("listener.name.")}
    static, default = 4, 5
    assert entries["listener.name.ssl.ssl.client.auth"] == (
        "required", static, True, False, 2, None,
        [("listener.name.ssl.ssl.client.auth", "required", static), ("ssl.client.auth", "none", default)],
    )
    assert entries["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        None, static, True, True, 9, None,
        [("listener.name.sasl_plaintext.plain.sasl.jaas.config", None, static)],
    )


@pytest.mark.apache_kafka
@pytest.mark.slow
def test_per_listener_settings_are_described_as_kafka_does(
    certs: Certs, multi_listener_broker: MultiBroker, tmp_path: Path
) -> None:
    """The control: Apache Kafka with the same listeners and settings describes the same entries."""
    from tests.apache_kafka import KafkaCluster, require_apache_kafka

    require_apache_kafka()
    settings = listener_settings(certs)
    _, ports = multi_listener_broker(["PLAINTEXT", "SASL_PLAINTEXT", "SSL"], settings)
    ours = describe_listener_entries(ports.address("PLAINTEXT"))

    sasl_port, ssl_port = free_port(), free_port()
    cluster = KafkaCluster(tmp_path / "kafka", 1)
    node = cluster.nodes[0]
    secured = f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}"
    node._properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
            + secured,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}," + secured,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
            **settings,
        }
    )
    try:
        cluster.start()
        kafkas = describe_listener_entries(node.bootstrap)
    finally:
        cluster.kill()
    assert ours == kafkas
