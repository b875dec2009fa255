"""SASL on SASL_PLAINTEXT listeners with peer clients: PLAIN, SCRAM-SHA-256/512 (credentials made
with AlterUserScramCredentials and kept across a restart), OAUTHBEARER (unsecured JWS); a wrong
password is an authentication error; before authentication nothing but ApiVersions and the SASL
exchange is served (Kafka closes the connection); re-authentication (KIP-368) and the session
lifetime; SaslHandshake v0 with raw tokens."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from reference_broker.testing import BrokerProcess
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from tests.reference_broker.security.conftest import PLAIN_JAAS, Certs, MultiBroker, Ports
from tests.reference_broker.wire import WireClient

SASL_CONFIG = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}


def _sasl(ports: Ports, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": ports.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _round_trip(conf: dict[str, Any], count: int = 5) -> list[bytes]:
    """Produce ``count`` records to a new topic and read them back with a group consumer."""
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf)
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _auth_error(conf: dict[str, Any]) -> KafkaError:
    """The error a client reports when the broker refuses its credentials."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)  # error callbacks are served by poll
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    return auth[0]


def test_plain_with_confluent_kafka_and_a_wrong_password(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    assert _round_trip(_sasl(ports, "PLAIN", "alice", "alice-pw")) == [f"m{i}".encode() for i in range(5)]
    error = _auth_error(_sasl(ports, "PLAIN", "alice", "wrong"))
    assert "Invalid username or password" in error.str()


def test_plain_with_kafka_python_and_aiokafka(multi_listener_broker: MultiBroker) -> None:
    import aiokafka
    import kafka
    from kafka.errors import KafkaError as KafkaPythonError

    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    bootstrap = ports.address("SASL_PLAINTEXT")
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    common = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob"}
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, sasl_plain_password="bob-pw", **common)
    producer.send(topic, b"hello").get(timeout=30)
    producer.close()
    with pytest.raises(KafkaPythonError):
        kafka.KafkaProducer(
            bootstrap_servers=bootstrap, sasl_plain_password="nope", max_block_ms=5000, **common
        )

    async def consume() -> bytes:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            sasl_plain_password="bob-pw",
            auto_offset_reset="earliest",
            **common,
        )
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), 30)).value
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == b"hello"


def _add_scram_users(admin_conf: dict[str, Any], users: dict[str, str], mechanism: ScramMechanism) -> None:
    admin = AdminClient(admin_conf)
    upserts = [
        UserScramCredentialUpsertion(
            name, ScramCredentialInfo(mechanism, 8192), password.encode(), os.urandom(16)
        )
        for name, password in users.items()
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)


@pytest.mark.parametrize(
    ("mechanism", "scram"),
    [("SCRAM-SHA-256", ScramMechanism.SCRAM_SHA_256), ("SCRAM-SHA-512", ScramMechanism.SCRAM_SHA_512)],
)
def test_scram_credentials_from_the_admin_api_survive_a_restart(
    multi_listener_broker: MultiBroker, mechanism: str, scram: ScramMechanism
) -> None:
    broker, ports = multi_listener_broker(["PLAINTEXT", "SASL_PLAINTEXT"], SASL_CONFIG)
    admin_conf = {"bootstrap.servers": ports.address("PLAINTEXT")}
    _add_scram_users(admin_conf, {"carol": "carol-pw"}, scram)
    admin = AdminClient(admin_conf)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(scram, 8192)]
    assert _round_trip(_sasl(ports, mechanism, "carol", "carol-pw"), 3) == [b"m0", b"m1", b"m2"]
    assert "Authentication failed" in _auth_error(_sasl(ports, mechanism, "carol", "wrong")).str()
    _auth_error(_sasl(ports, mechanism, "nobody", "x"))

    broker.restart()
    assert _round_trip(_sasl(ports, mechanism, "carol", "carol-pw"), 1) == [b"m0"]


def test_scram_with_kafka_python_and_aiokafka(multi_listener_broker: MultiBroker) -> None:
    import aiokafka
    import kafka

    _, ports = multi_listener_broker(["PLAINTEXT", "SASL_PLAINTEXT"], SASL_CONFIG)
    _add_scram_users(
        {"bootstrap.servers": ports.address("PLAINTEXT")}, {"dave": "dave-pw"}, ScramMechanism.SCRAM_SHA_512
    )
    bootstrap = ports.address("SASL_PLAINTEXT")
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    common = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "dave",
        "sasl_plain_password": "dave-pw",
    }
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **common)
    producer.send(topic, b"scram").get(timeout=30)
    producer.close()

    async def consume() -> bytes:
        consumer = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **common
        )
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), 30)).value
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == b"scram"


def test_oauthbearer_unsecured_jws_with_confluent_kafka(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    conf = {
        "bootstrap.servers": ports.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=erin",
    }
    assert _round_trip(conf, 2) == [b"m0", b"m1"]


def _jws(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}."


def _oauth_token(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_expired_oauthbearer_token_is_refused_after_the_error_challenge(
    multi_listener_broker: MultiBroker,
) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert client.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1).error_code == 0
        expired = _jws({"sub": "erin", "exp": int(time.time()) - 60})
        challenge = client.request(SaslAuthenticateRequest(auth_bytes=_oauth_token(expired)), 2)
        assert challenge.error_code == 0 and json.loads(challenge.auth_bytes)["status"] == "invalid_token"
        final = client.request(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2)
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert client.closed_by_peer()


def test_unauthenticated_client_can_do_nothing(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert client.request(ApiVersionsRequest(), 0).error_code == 0
        client.send(MetadataRequest(topics=None), 12)
        assert client.closed_by_peer()
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        handshake = client.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert sorted(handshake.mechanisms) == sorted(SASL_CONFIG["sasl.enabled.mechanisms"].split(","))
        assert client.closed_by_peer()
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        client.send(MetadataRequest(topics=None), 12)  # not SaslAuthenticate: closed
        assert client.closed_by_peer()


def test_handshake_v0_then_raw_plain_token(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], SASL_CONFIG)
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0alice-pw"
        client.send_raw(len(token).to_bytes(4, "big") + token)
        assert client.read_frame() == b""
        assert client.request(MetadataRequest(topics=None), 12).brokers


def _plain_login(client: WireClient, user: str, password: str) -> int:
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2)
    assert answer.error_code == 0, answer
    return int(answer.session_lifetime_ms)


def test_session_lifetime_reauthentication_and_expiry(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["SASL_PLAINTEXT"], {**SASL_CONFIG, "connections.max.reauth.ms": 1500})
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert _plain_login(client, "alice", "alice-pw") == 1500
        assert client.request(MetadataRequest(topics=None), 12).brokers
        # Re-authentication on the same connection starts a new session ...
        assert _plain_login(client, "alice", "alice-pw") == 1500
        # ... but may not change the principal.
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-pw"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals" in answer.error_message
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        _plain_login(client, "alice", "alice-pw")
        deadline = time.monotonic() + 30
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                client.request(MetadataRequest(topics=[]), 12)
            except ConnectionError:
                closed = True
        assert closed, "the connection outlived its SASL session"


def test_confluent_kafka_reauthenticates_before_its_session_expires(
    multi_listener_broker: MultiBroker,
) -> None:
    broker, ports = multi_listener_broker(
        ["SASL_PLAINTEXT"], {**SASL_CONFIG, "connections.max.reauth.ms": 2000}
    )
    conf = _sasl(ports, "PLAIN", "alice", "alice-pw")
    producer = Producer(conf)
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 6  # three session lifetimes
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=b"x")
        sent += 1
        assert producer.flush(10) == 0
    assert sent > 0
    assert "session expired" not in broker.stderr()


def scram_proof(password: str, salt: bytes, iterations: int, auth_message: bytes) -> bytes:
    """RFC 5802's ClientProof, for the test's own SCRAM client."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def test_scram_exchange_on_the_wire_matches_rfc_5802(multi_listener_broker: MultiBroker) -> None:
    _, ports = multi_listener_broker(["PLAINTEXT", "SASL_PLAINTEXT"], SASL_CONFIG)
    _add_scram_users(
        {"bootstrap.servers": ports.address("PLAINTEXT")}, {"frank": "frank-pw"}, ScramMechanism.SCRAM_SHA_256
    )
    with WireClient(ports.address("SASL_PLAINTEXT")) as client:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
        first_bare = "n=frank,r=clientnonce"
        server_first = client.request(SaslAuthenticateRequest(auth_bytes=f"n,,{first_bare}".encode()), 2)
        attrs = dict(kv.split("=", 1) for kv in server_first.auth_bytes.decode().split(","))
        assert attrs["r"].startswith("clientnonce") and int(attrs["i"]) == 8192
        final_bare = f"c=biws,r={attrs['r']}"
        auth_message = f"{first_bare},{server_first.auth_bytes.decode()},{final_bare}".encode()
        proof = scram_proof("frank-pw", base64.b64decode(attrs["s"]), 8192, auth_message)
        final = client.request(
            SaslAuthenticateRequest(auth_bytes=f"{final_bare},p={base64.b64encode(proof).decode()}".encode()),
            2,
        )
        assert final.error_code == 0 and final.auth_bytes.startswith(b"v=")
        assert client.request(MetadataRequest(topics=None), 12).brokers


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        assert (
            client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code
            == ErrorCode.ILLEGAL_SASL_STATE
        )
        assert client.request(MetadataRequest(topics=None), 12).brokers


def test_sasl_ssl_listener_with_plain(multi_listener_broker: MultiBroker, certs: Certs) -> None:
    config = {
        **certs.broker_ssl(),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    _, ports = multi_listener_broker(["SASL_SSL"], config)
    conf = {
        "bootstrap.servers": f"localhost:{ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca.pem),
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    assert _round_trip(conf, 2) == [b"m0", b"m1"]
