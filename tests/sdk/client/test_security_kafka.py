"""The SDK's TLS and SASL against Apache Kafka 4.1 (one node, a listener per setting: see
tests/kafka_security.py), with confluent-kafka as a second client on the same listeners."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from sdk.admin import AdminClient, NewTopic, UserScramCredentialDeletion, UserScramCredentialUpsertion
from sdk.admin import ScramMechanism as AdminScramMechanism
from sdk.client import Connection, KafkaClient, SaslMechanism
from sdk.client.config import ClientConfig
from sdk.client.sasl import UnsecuredJwsTokenProvider, unsecured_jws
from sdk.consumer import Consumer, TopicPartition
from sdk.errors import (
    AuthenticationError,
    SaslAuthenticationError,
    SaslAuthenticationFailedError,
    SaslMechanismRefusedError,
    SslAuthenticationError,
)
from sdk.producer import Producer
from tests.kafka_security import MECHANISMS, PASSWORD, REAUTH_MS, USER, SecureKafka

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300)]

#: Generous bound for a refused login to surface: a hang or a reconnect loop never ends.
REFUSAL_DEADLINE_S = 30


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    from tests.apache_kafka import require_apache_kafka

    require_apache_kafka()
    node = SecureKafka(tmp_path_factory.mktemp("secure-kafka"))
    try:
        node.start()
        yield node
    finally:
        node.kill()


def sdk_settings(
    kafka: SecureKafka, listener: str, mechanism: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """The SDK's security settings for ``listener`` (and ``mechanism`` on a SASL listener)."""
    protocol = {"SSL": "SSL", "MTLS": "SSL", "SASL_SSL": "SASL_SSL"}.get(listener, "SASL_PLAINTEXT")
    settings: dict[str, Any] = {"bootstrap_servers": kafka.bootstrap[listener], "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = kafka.pki.context(client_cert=listener == "MTLS")
    if mechanism is not None:
        settings["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            settings["sasl_oauth_token_provider"] = UnsecuredJwsTokenProvider(USER)
        else:
            settings["sasl_plain_username"] = USER
            settings["sasl_plain_password"] = PASSWORD
    settings.update(overrides)
    return settings


def confluent_read(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """confluent-kafka reads partition 0 of ``topic`` from the start until ``count`` values."""
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": f"peer-{uuid.uuid4().hex}", "enable.auto.commit": False, "log_level": 0}
    )
    values: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        for _ in range(60):
            for message in consumer.consume(count - len(values), timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value())
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


SECURE_CASES = [("SSL", None), ("MTLS", None)] + [
    (listener, mechanism) for listener in ("SASL_SSL", "SASL_PLAINTEXT") for mechanism in MECHANISMS
]


@pytest.mark.parametrize(("listener", "mechanism"), SECURE_CASES)
async def test_producer_consumer_and_admin_round_trip(
    kafka: SecureKafka, listener: str, mechanism: str | None
) -> None:
    settings = sdk_settings(kafka, listener, mechanism)
    topic = f"secure-{listener.lower()}-{(mechanism or 'tls').lower()}-{uuid.uuid4().hex[:6]}"
    async with AdminClient(**settings) as admin:
        assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    values = [f"{listener}-{mechanism}-{i}".encode() for i in range(20)]
    async with Producer(**settings) as producer:
        for value in values:
            await producer.send(topic, value, partition=0)
        await producer.flush()
    got: list[bytes] = []
    async with Consumer(**settings, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(60):
            while len(got) < len(values):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(record.value for record in records)
    assert got == values
    # A client nobody here wrote reads the same records through the same listener and mechanism.
    peer_config = kafka.confluent_config(listener, mechanism)
    peer = await asyncio.to_thread(confluent_read, peer_config, topic, len(values))
    assert peer == values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_a_sasl_authentication_error(kafka: SecureKafka, mechanism: str) -> None:
    settings = sdk_settings(kafka, "SASL_PLAINTEXT", mechanism, sasl_plain_password="wrong")
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SaslAuthenticationError) as info:
            async with Producer(**settings):
                pass
    assert isinstance(info.value, AuthenticationError)
    assert isinstance(info.value, SaslAuthenticationFailedError)  # aiokafka's AuthenticationFailedError
    assert mechanism in str(info.value)
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SaslAuthenticationError):
            async with AdminClient(**settings):
                pass


async def test_an_unknown_user_over_sasl_ssl_is_refused(kafka: SecureKafka) -> None:
    settings = sdk_settings(kafka, "SASL_SSL", "SCRAM-SHA-512", sasl_plain_username="mallory")
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SaslAuthenticationError):
            async with Consumer(**settings):
                pass


async def test_an_invalid_oauth_token_is_refused_with_the_brokers_reason(kafka: SecureKafka) -> None:
    class ExpiredToken:
        async def token(self) -> str:
            return unsecured_jws(USER, issued_at=0, lifetime_s=60)  # expired in 1970

    settings = sdk_settings(kafka, "SASL_PLAINTEXT", "OAUTHBEARER", sasl_oauth_token_provider=ExpiredToken())
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SaslAuthenticationError, match="invalid_token"):
            async with Producer(**settings):
                pass


async def test_a_mechanism_the_listener_does_not_enable_is_refused_naming_the_enabled_ones(
    kafka: SecureKafka,
) -> None:
    class DigestMd5(SaslMechanism):
        name = "DIGEST-MD5"

        def initial_response(self) -> bytes:
            return b""

    settings = sdk_settings(kafka, "SASL_PLAINTEXT", sasl_mechanism=DigestMd5())
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SaslMechanismRefusedError, match="SCRAM-SHA-256") as info:
            async with Producer(**settings):
                pass
    assert isinstance(info.value, AuthenticationError)


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
async def test_a_broker_certificate_from_an_untrusted_ca_is_refused(
    kafka: SecureKafka, listener: str
) -> None:
    mechanism = "PLAIN" if listener == "SASL_SSL" else None
    settings = sdk_settings(kafka, listener, mechanism, ssl_context=kafka.pki.context(trust_other_ca=True))
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SslAuthenticationError, match="certificate verify failed") as info:
            async with Producer(**settings):
                pass
    assert isinstance(info.value, AuthenticationError)


async def test_mutual_tls_refuses_a_client_without_a_certificate(kafka: SecureKafka) -> None:
    settings = sdk_settings(kafka, "MTLS", ssl_context=kafka.pki.context(client_cert=False))
    async with asyncio.timeout(REFUSAL_DEADLINE_S):
        with pytest.raises(SslAuthenticationError):
            async with AdminClient(**settings):
                pass
    # librdkafka without a certificate is refused by the same listener too.
    config = kafka.confluent_config("MTLS")
    for key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
        del config[key]
    admin = confluent_kafka.admin.AdminClient({**config, "log_level": 0})
    with pytest.raises(confluent_kafka.KafkaException):
        await asyncio.to_thread(admin.list_topics, timeout=5)


async def produce_for(producer: Producer, topic: str, seconds: float) -> int:
    """Send acknowledged records for ``seconds`` (event-loop time); how many were sent."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    sent = 0
    while loop.time() < end:
        await producer.send_and_wait(topic, f"r{sent}".encode(), partition=0)
        sent += 1
        await asyncio.sleep(0.05)
    return sent


def leader_connection(producer: Producer, topic: str) -> Connection:
    client = producer._client
    assert client is not None
    node = client.cluster.leader_for(topic, 0)
    connection = client.connection(node)
    assert connection is not None
    return connection


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_connection_reauthenticates_before_its_session_expires(
    kafka: SecureKafka, mechanism: str
) -> None:
    settings = sdk_settings(kafka, "REAUTH", mechanism)
    topic = f"reauth-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    async with Producer(**settings) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
        connection = leader_connection(producer, topic)
        assert connection.session_lifetime_ms == REAUTH_MS
        sent = await produce_for(producer, topic, 3.5 * REAUTH_MS / 1000)
        # The broker closes a connection that sends a request after its session expired: this
        # one is still the producer's and still open after more than three lifetimes.
        assert leader_connection(producer, topic) is connection
        assert not connection.closed
        assert connection.reauthentications >= 3
    async with Consumer(**settings, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert await consumer.position(TopicPartition(topic, 0)) == 0
        await consumer.seek_to_end(TopicPartition(topic, 0))
        assert await consumer.position(TopicPartition(topic, 0)) == sent + 1


@pytest.mark.slow
async def test_without_reauthentication_the_broker_closes_the_connection(
    kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: it would see the close if re-authentication were off."""
    monkeypatch.setattr(Connection, "reauthenticates", False)
    settings = sdk_settings(kafka, "REAUTH", "PLAIN")
    topic = f"no-reauth-{uuid.uuid4().hex[:6]}"
    async with Producer(**settings) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
        connection = leader_connection(producer, topic)
        assert connection.session_lifetime_ms == REAUTH_MS
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4 * REAUTH_MS / 1000
        while not connection.closed and loop.time() < deadline:
            await producer.send_and_wait(topic, b"more", partition=0)
            await asyncio.sleep(0.05)
        assert connection.closed
        assert connection.reauthentications == 0


async def started_client(settings: dict[str, Any]) -> KafkaClient:
    """A started ``KafkaClient``, retrying while a just-created SCRAM credential is not yet
    applied by the broker (it arrives through the metadata log)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REFUSAL_DEADLINE_S
    while True:
        client = KafkaClient.from_config(ClientConfig(**settings))
        try:
            await client.start()
            return client
        except SaslAuthenticationError:
            await client.close()
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_a_credential_deleted_during_the_session_fails_the_reauthentication_fatally(
    kafka: SecureKafka,
) -> None:
    user, password = f"bob-{uuid.uuid4().hex[:6]}", "bob-secret"
    async with AdminClient(bootstrap_servers=kafka.bootstrap["PLAINTEXT"]) as admin:
        upsert = UserScramCredentialUpsertion(user, AdminScramMechanism.SCRAM_SHA_256, password)
        assert await admin.alter_user_scram_credentials([upsert]) == {user: None}
        settings = sdk_settings(
            kafka, "REAUTH", "SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=password
        )
        client = await started_client(settings)
        try:
            node = await client.wait_for_node()
            connection = await client.get_connection(node)
            assert connection.session_lifetime_ms == REAUTH_MS
            deletion = UserScramCredentialDeletion(user, AdminScramMechanism.SCRAM_SHA_256)
            assert await admin.alter_user_scram_credentials([deletion]) == {user: None}
            async with asyncio.timeout(4 * REAUTH_MS / 1000 + REFUSAL_DEADLINE_S):
                await connection.wait_closed()
                # The next connection is refused too, and whoever waits for metadata is told so.
                with pytest.raises(SaslAuthenticationError, match="SCRAM-SHA-256"):
                    await client.refresh_metadata()
        finally:
            await client.close()
