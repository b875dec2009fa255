"""Listeners as Kafka configures them: several at once, PLAINTEXT and SSL (server certificate,
client certificates required or not), each client told the advertised address of the listener it
connected on; peer clients confluent-kafka, kafka-python, aiokafka and kcat over TLS; a listener
configuration the broker cannot serve stops it at start with an error naming the setting."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.reference_broker.security.conftest import Certs, MultiBroker, free_port


def _metadata_address(conf: dict[str, Any]) -> tuple[str, int]:
    brokers = AdminClient(conf).list_topics(timeout=15).brokers
    (meta,) = brokers.values()
    return meta.host, meta.port


def test_plaintext_and_ssl_listeners_serve_one_log_and_advertise_their_own_address(
    multi_listener_broker: MultiBroker, certs: Certs
) -> None:
    broker, ports = multi_listener_broker(["PLAINTEXT", "SSL"], certs.broker_ssl())
    # The SSL listener is advertised under the certificate's host name, PLAINTEXT as bound.
    broker.stop()
    broker.config["advertised.listeners"] = (
        f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SSL://localhost:{ports['SSL']}"
    )
    broker.start()
    ssl_conf = {
        "bootstrap.servers": f"localhost:{ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca.pem),
    }
    plain_conf = {"bootstrap.servers": ports.address("PLAINTEXT")}
    assert _metadata_address(ssl_conf) == ("localhost", ports["SSL"])
    assert _metadata_address(plain_conf) == ("127.0.0.1", ports["PLAINTEXT"])

    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = Producer(ssl_conf)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**plain_conf, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    try:
        while len(values) < 10:
            msg = consumer.poll(30)
            assert msg is not None, f"got only {values}"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(10)]


def test_required_client_certificate(multi_listener_broker: MultiBroker, certs: Certs) -> None:
    _, ports = multi_listener_broker(["SSL"], certs.broker_ssl("required"))
    client = certs.ca.issue("alice", org="Test")
    base = {
        "bootstrap.servers": f"localhost:{ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca.pem),
    }
    with_cert = {**base, "ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)}
    assert _metadata_address(with_cert) == ("127.0.0.1", ports["SSL"])
    with pytest.raises(KafkaException):
        AdminClient(base).list_topics(timeout=3)


def test_kafka_python_and_aiokafka_over_ssl(multi_listener_broker: MultiBroker, certs: Certs) -> None:
    import aiokafka
    import kafka

    _, ports = multi_listener_broker(["SSL"], {**certs.broker_ssl(), "num.partitions": 1})
    bootstrap = f"localhost:{ports['SSL']}"
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=str(certs.ca.pem)
    )
    producer.send(topic, b"from-kafka-python").get(timeout=30)
    producer.close()

    async def consume() -> list[bytes]:
        context = ssl.create_default_context(cafile=str(certs.ca.pem))
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            security_protocol="SSL",
            ssl_context=context,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), 30)
            return [msg.value]
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == [b"from-kafka-python"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_lists_metadata_over_ssl(multi_listener_broker: MultiBroker, certs: Certs) -> None:
    _, ports = multi_listener_broker(["SSL"], certs.broker_ssl())
    out = subprocess.run(
        [
            "kcat",
            "-b",
            f"localhost:{ports['SSL']}",
            "-X",
            "security.protocol=SSL",
            "-X",
            f"ssl.ca.location={certs.ca.pem}",
            "-L",
            "-m",
            "15",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert f"127.0.0.1:{ports['SSL']}" in out.stdout


def _start_with(tmp_path: Path, props: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reference_broker",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def _bad_configs(certs: Certs) -> list[tuple[dict[str, str], str]]:
    port = free_port()
    ssl_listener = {"listeners": f"SSL://127.0.0.1:{port}"}
    keystore = str(certs.server.keystore)
    return [
        ({**ssl_listener, "ssl.keystore.location": keystore}, "ssl.keystore.type: JKS"),
        (
            {**ssl_listener, "ssl.keystore.type": "PKCS12", "ssl.keystore.location": keystore},
            "ssl.keystore.type: PKCS12",
        ),
        ({**ssl_listener, "ssl.keystore.type": "PEM"}, "ssl.keystore.location"),
        (
            {**ssl_listener, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.ca.pem)},
            "ssl.keystore.location: cannot load",
        ),
        (
            {
                **ssl_listener,
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": keystore,
                "ssl.client.auth": "required",
            },
            "ssl.client.auth",
        ),
        ({"listeners": f"CLIENTS://127.0.0.1:{port}"}, "listener.security.protocol.map"),
        ({"listeners": f"PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{free_port()}"}, "listeners"),
        (
            {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "advertised.listeners": "SSL://x:1"},
            "advertised.listeners",
        ),
        ({"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}, "sasl.enabled.mechanisms: GSSAPI"),
        (
            {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        ({"listener.name.ssl.ssl.unknown.key": "x"}, "listener.name.ssl.ssl.unknown.key"),
        ({"authorizer.class.name": "com.example.MyAuthorizer"}, "authorizer.class.name"),
        ({"super.users": "alice"}, "super.users"),
    ]


def test_bad_listener_configurations_stop_the_broker_naming_the_setting(tmp_path: Path, certs: Certs) -> None:
    failures = []
    for props, expected in _bad_configs(certs):
        result = _start_with(tmp_path, props)
        if result.returncode != 2 or expected not in result.stderr:
            failures.append((props, expected, result.returncode, result.stderr[-500:]))
    assert not failures, failures


def test_describe_configs_never_shows_tls_passwords_or_keys(
    multi_listener_broker: MultiBroker, certs: Certs
) -> None:
    from confluent_kafka.admin import ConfigResource

    config = {
        **certs.broker_ssl(),
        "ssl.keystore.password": "keystore-secret",
        "ssl.key.password": "key-secret",
    }
    _, ports = multi_listener_broker(["PLAINTEXT", "SSL"], config)
    admin = AdminClient({"bootstrap.servers": ports.address("PLAINTEXT")})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([resource])[resource].result(30)
    for name in ("ssl.keystore.password", "ssl.key.password"):
        assert entries[name].is_sensitive and entries[name].value is None, entries[name]
    assert entries["ssl.keystore.location"].value == str(certs.server.keystore)
