"""``--command-config``: Kafka client properties read as Java reads a ``.properties`` file and
mapped to the SDK's settings; every key without a mapping, and every key that would have no
effect, is a usage error naming it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sdk.cli.common import (
    BOOTSTRAP_ENV,
    UsageError,
    client_settings,
    read_properties,
    settings_from_properties,
)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return str(path)


def test_properties_syntax_comments_separators_and_continuations(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a comment\n! another\n\nsecurity.protocol = SASL_PLAINTEXT\nclient.id:tools\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="p=w;\\"x";\n',
    )
    properties = read_properties(path)
    assert properties["security.protocol"] == "SASL_PLAINTEXT"
    assert properties["client.id"] == "tools"
    assert properties["sasl.jaas.config"].endswith('username="alice" password="p=w;\\"x";')


def test_sasl_settings_from_a_jaas_line() -> None:
    settings = settings_from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="p=w;\\"x";',
            "request.timeout.ms": "5000",
        }
    )
    assert settings == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 'p=w;"x',
        "request_timeout_ms": 5000.0,
    }


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"batch.size": "1", "acks": "all"}, "unknown or unsupported keys: acks, batch.size"),
        ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism need security.protocol SASL_PLAINTEXT or SASL_SSL"),
        (
            {"ssl.truststore.location": "/x.pem"},
            "ssl.truststore.location need security.protocol SSL or SASL_SSL",
        ),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "only PEM stores can be read, not JKS"),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"},
            "--command-config: TLS stores:",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": "com.example.Login required;"},
            "sasl.jaas.config: expected",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                "username=a;",
            },
            "needs username",
        ),
        ({"request.timeout.ms": "soon"}, "request.timeout.ms: expected a number of milliseconds"),
    ],
)
def test_bad_properties_are_usage_errors_naming_the_key(properties: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        settings_from_properties(properties)
    assert message in str(raised.value)
    assert raised.value.exit_code == 2


def test_bootstrap_from_option_or_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    with pytest.raises(UsageError, match=BOOTSTRAP_ENV):
        client_settings(argparse.Namespace())
    monkeypatch.setenv(BOOTSTRAP_ENV, "a:1,b:2")
    assert client_settings(argparse.Namespace()) == {"bootstrap_servers": "a:1,b:2"}
    config = write(tmp_path, "client.id=x\n")
    given = argparse.Namespace(bootstrap_server="c:3", command_config=config)
    assert client_settings(given) == {
        "bootstrap_servers": "c:3",
        "client_id": "x",
        "security_protocol": "PLAINTEXT",
    }
    with pytest.raises(UsageError, match="cannot read"):
        client_settings(argparse.Namespace(bootstrap_server="c:3", command_config=str(tmp_path / "missing")))


def test_consumer_group_protocol_properties_map_to_the_consumer_settings() -> None:
    settings = settings_from_properties({"group.protocol": "CONSUMER", "group.remote.assignor": "uniform"})
    assert settings == {
        "security_protocol": "PLAINTEXT",
        "group_protocol": "consumer",
        "group_remote_assignor": "uniform",
    }
    with pytest.raises(UsageError, match=r"group\.protocol: expected classic or consumer, got 'eager'"):
        settings_from_properties({"group.protocol": "eager"})
