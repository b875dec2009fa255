"""Security settings and the SASL mechanisms' messages, without a broker (the exchanges against
Apache Kafka are in test_security_kafka.py)."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from sdk.admin import AdminClient
from sdk.client.sasl import (
    OAuthBearerMechanism,
    PlainMechanism,
    ScramMechanism,
    UnsecuredJwsTokenProvider,
    create_mechanism,
    unsecured_jws,
)
from sdk.consumer import Consumer
from sdk.errors import ConfigError, SaslAuthenticationError, SaslStateError
from sdk.helpers import create_ssl_context
from sdk.producer import Producer
from tests.kafka_security import make_pki

# RFC 7677 section 3: the SCRAM-SHA-256 exchange of user "user" with password "pencil".
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class FixedNonceScram(ScramMechanism):
    """SCRAM with the RFC's client nonce, to replay its published exchange."""

    def _new_nonce(self) -> str:
        return RFC7677_CLIENT_NONCE


def test_scram_sha_256_reproduces_the_rfc_7677_exchange() -> None:
    scram = FixedNonceScram("SCRAM-SHA-256", "user", "pencil")
    assert scram.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.evaluate_challenge(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    assert not scram.complete
    assert scram.evaluate_challenge(RFC7677_SERVER_FINAL) is None
    assert scram.complete
    # A new exchange (re-authentication) starts over with a fresh client-first message.
    assert scram.initial_response().startswith(b"n,,n=user,r=")
    assert not scram.complete


def test_scram_refuses_a_server_that_does_not_know_the_credential() -> None:
    scram = FixedNonceScram("SCRAM-SHA-256", "user", "not-pencil")
    scram.initial_response()
    scram.evaluate_challenge(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        scram.evaluate_challenge(RFC7677_SERVER_FINAL)


@pytest.mark.parametrize(
    ("server_first", "error"),
    [
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "fewer than the minimum 4096"),
        (b"r=someoneElsesNonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "malformed"),
        (b"garbage", "malformed"),
    ],
)
def test_scram_refuses_a_bad_server_first_message(server_first: bytes, error: str) -> None:
    scram = FixedNonceScram("SCRAM-SHA-512", "user", "pencil")
    scram.initial_response()
    with pytest.raises(SaslStateError, match=error):
        scram.evaluate_challenge(server_first)


def test_scram_escapes_the_user_name() -> None:
    scram = FixedNonceScram("SCRAM-SHA-512", "a=b,c", "pw")
    assert scram.initial_response() == b"n,,n=a=3Db=2Cc,r=" + RFC7677_CLIENT_NONCE.encode()


def _decode_segment(segment: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    return data


def test_unsecured_jws_is_kafkas_unsigned_token() -> None:
    header, payload, signature = unsecured_jws("alice", lifetime_s=60, scope="s1", issued_at=1000).split(".")
    assert _decode_segment(header) == {"alg": "none"}
    assert _decode_segment(payload) == {"sub": "alice", "iat": 1000, "exp": 1060, "scope": "s1"}
    assert signature == ""


class ProviderWithExtensions(UnsecuredJwsTokenProvider):
    def __init__(self, extensions: dict[str, str]):
        super().__init__("alice")
        self._extensions = extensions

    def extensions(self) -> dict[str, str]:
        return self._extensions


async def test_oauthbearer_sends_the_providers_token_and_extensions() -> None:
    mechanism = OAuthBearerMechanism(ProviderWithExtensions({"traceId": "abc 1"}))
    await mechanism.prepare()
    message = mechanism.initial_response()
    assert message.startswith(b"n,,\x01auth=Bearer ")
    assert message.endswith(b"\x01traceId=abc 1\x01\x01")
    token = message[len(b"n,,\x01auth=Bearer ") :].split(b"\x01")[0].decode()
    assert _decode_segment(token.split(".")[1])["sub"] == "alice"
    assert mechanism.evaluate_challenge(b"") is None
    assert mechanism.complete


async def test_oauthbearer_answers_a_refusal_so_the_broker_can_end_the_exchange() -> None:
    mechanism = OAuthBearerMechanism(UnsecuredJwsTokenProvider("alice"))
    await mechanism.prepare()
    mechanism.initial_response()
    assert mechanism.evaluate_challenge(b'{"status":"invalid_token"}') == b"\x01"
    assert not mechanism.complete
    assert mechanism.server_error == '{"status":"invalid_token"}'


@pytest.mark.parametrize("extensions", [{"auth": "x"}, {"bad key": "x"}, {"k": "\x00"}])
async def test_oauthbearer_refuses_extensions_kafka_would_refuse(extensions: dict[str, str]) -> None:
    mechanism = OAuthBearerMechanism(ProviderWithExtensions(extensions))
    with pytest.raises(ConfigError, match="sasl_oauth_token_provider"):
        await mechanism.prepare()


async def test_oauthbearer_takes_a_plain_function_provider_too() -> None:
    class SyncProvider:
        def token(self) -> str:
            return "opaque-token"

    mechanism = OAuthBearerMechanism(SyncProvider())
    await mechanism.prepare()
    assert mechanism.initial_response() == b"n,,\x01auth=Bearer opaque-token\x01\x01"


def test_each_connection_gets_its_own_mechanism_instance() -> None:
    template = create_mechanism("SCRAM-SHA-256", username="u", password="p")
    first, second = template.copy(), template.copy()
    assert first is not second and isinstance(first, ScramMechanism)
    first.initial_response()
    assert not second.complete


def test_a_sasl_protocol_without_a_mechanism_uses_plain_as_aiokafka() -> None:
    producer = Producer(
        bootstrap_servers="h:1", security_protocol="SASL_PLAINTEXT",
        sasl_plain_username="u", sasl_plain_password="p",
    )
    assert producer.config.sasl_mechanism is None
    assert isinstance(create_mechanism("PLAIN", username="u", password="p"), PlainMechanism)


class NoToken:
    pass


BAD_SETTINGS = [
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-1", "sasl_plain_username": "u",
      "sasl_plain_password": "p"}, "sasl_mechanism"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": 5}, "sasl_mechanism"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_password": "p"},
     "sasl_plain_username"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "u"},
     "sasl_plain_password"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "",
      "sasl_plain_password": "p"}, "sasl_plain_username"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"}, "sasl_oauth_token_provider"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
      "sasl_oauth_token_provider": NoToken()}, "sasl_oauth_token_provider"),
    ({"security_protocol": "PLAINTEXT", "ssl_context": ssl.create_default_context()}, "ssl_context"),
    ({"security_protocol": "SASL_PLAINTEXT", "ssl_context": ssl.create_default_context(),
      "sasl_plain_username": "u", "sasl_plain_password": "p"}, "ssl_context"),
    ({"security_protocol": "SSL", "ssl_context": "/etc/ca.pem"}, "ssl_context"),
    ({"security_protocol": "SSL", "sasl_plain_username": "u"}, "sasl_plain_username"),
    ({"security_protocol": "PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256"}, "sasl_mechanism"),
    ({"security_protocol": "PLAINTEXT", "sasl_oauth_token_provider": UnsecuredJwsTokenProvider("a")},
     "sasl_oauth_token_provider"),
]


@pytest.mark.parametrize(("settings", "option"), BAD_SETTINGS)
@pytest.mark.parametrize("client", [Producer, Consumer, AdminClient])
def test_bad_security_settings_fail_at_construction_naming_the_option(
    client: Any, settings: dict[str, Any], option: str
) -> None:
    with pytest.raises(ConfigError) as info:
        client(bootstrap_servers="127.0.0.1:1", **settings)
    assert info.value.option == option


def test_create_ssl_context_loads_a_ca_and_an_encrypted_client_key(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    context = create_ssl_context(
        cafile=str(pki.ca), certfile=str(pki.client_cert), keyfile=str(pki.client_key),
        password=pki.client_key_password,
    )
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    trusted = [cert["subject"] for cert in context.get_ca_certs()]
    assert trusted == [((("commonName", "topicwright test CA"),),)]  # only the given CA
    assert create_ssl_context(cadata=pki.ca.read_text()).get_ca_certs() == context.get_ca_certs()


def test_create_ssl_context_names_the_option_it_cannot_use(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cafile": str(tmp_path / "missing.pem")}, "cafile"),
        ({"keyfile": str(pki.client_key)}, "keyfile"),
        ({"password": "x"}, "password"),
        ({"certfile": str(pki.client_cert), "keyfile": str(pki.client_key), "password": "wrong"}, "certfile"),
        ({"crlfile": str(tmp_path / "missing.crl")}, "crlfile"),
    ]
    for arguments, option in cases:
        with pytest.raises(ConfigError) as info:
            create_ssl_context(**arguments)
        assert info.value.option == option
