"""Apache Kafka with security: a test CA with server and client certificates, and one node with a
listener per security setting, so every mechanism and protocol is tested against one JVM.

Listeners of ``SecureKafka`` (``.bootstrap[name]``):

- ``PLAINTEXT``: no security (start-up check, setup).
- ``SSL``: TLS, no client certificate asked; ``MTLS``: TLS with ``ssl.client.auth=required``.
- ``SASL_SSL`` and ``SASL_PLAINTEXT``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
  (unsecured JWS tokens, Kafka's default validator).
- ``REAUTH``: SASL_PLAINTEXT with the same mechanisms and ``connections.max.reauth.ms`` =
  ``REAUTH_MS``: the broker gives every session that lifetime and closes a connection that sends a
  request after it without re-authenticating (KIP-368).

Every SASL mechanism knows user ``USER`` with password ``PASSWORD`` (PLAIN through the JAAS
config, SCRAM through ``kafka-storage format --add-scram``).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.apache_kafka import KafkaCluster, free_port

__all__ = ["MECHANISMS", "PASSWORD", "REAUTH_MS", "USER", "Pki", "SecureKafka", "make_pki"]

USER = "alice"
PASSWORD = "alice-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
REAUTH_MS = 3000
_SASL_LISTENERS = {"SASL_SSL": "SASL_SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "REAUTH": "SASL_PLAINTEXT"}
_TLS_LISTENERS = {"SSL": "SSL", "MTLS": "SSL"}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer.subject if issuer is not None else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@dataclass(frozen=True)
class Pki:
    """PEM files: the test CA, the broker's keystore, a client certificate, an unrelated CA."""

    ca: Path
    #: The broker's private key (PKCS#8) followed by its certificate: Kafka's PEM keystore.
    server_keystore: Path
    client_cert: Path
    #: The client key, encrypted with ``client_key_password``.
    client_key: Path
    client_key_password: str
    #: A CA that signed nothing the broker presents: trusting only it must fail.
    other_ca: Path

    def context(self, *, client_cert: bool = False, trust_other_ca: bool = False) -> ssl.SSLContext:
        """A client context trusting the test CA (or the unrelated one), with the client
        certificate if asked (through the SDK's own helper)."""
        from sdk.helpers import create_ssl_context

        return create_ssl_context(
            cafile=str(self.other_ca if trust_other_ca else self.ca),
            certfile=str(self.client_cert) if client_cert else None,
            keyfile=str(self.client_key) if client_cert else None,
            password=self.client_key_password if client_cert else None,
        )


def make_pki(directory: Path) -> Pki:
    """A fresh CA with a broker certificate for 127.0.0.1/localhost and a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key, server_key, client_key = _key(), _key(), _key(), _key()
    ca = _certificate("topicwright test CA", ca_key, None, ca_key)
    other = _certificate("unrelated test CA", other_key, None, other_key)
    server = _certificate("localhost", server_key, ca, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    client = _certificate("client", client_key, ca, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    password = "client-key-secret"
    files = {
        "ca.pem": _pem(ca),
        "other-ca.pem": _pem(other),
        "server-keystore.pem": _key_pem(server_key) + _pem(server) + _pem(ca),
        "client.pem": _pem(client),
        "client-key.pem": _key_pem(client_key, password.encode()),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return Pki(
        ca=directory / "ca.pem",
        server_keystore=directory / "server-keystore.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
        client_key_password=password,
        other_ca=directory / "other-ca.pem",
    )


def _jaas(mechanism: str) -> str:
    if mechanism == "PLAIN":
        return (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{USER}" password="{PASSWORD}" user_{USER}="{PASSWORD}";'
        )
    if mechanism.startswith("SCRAM"):
        return "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="broker";'
    )


class SecureKafka:
    """One Apache Kafka node with the listeners described in the module docstring."""

    def __init__(self, data_dir: Path):
        self.pki = make_pki(data_dir / "pki")
        self.cluster = KafkaCluster(data_dir / "kafka", 1)
        self.node = self.cluster.nodes[0]
        ports = {name: free_port() for name in (*_TLS_LISTENERS, *_SASL_LISTENERS)}
        self.bootstrap = {"PLAINTEXT": self.node.bootstrap} | {
            name: f"127.0.0.1:{port}" for name, port in ports.items()
        }
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"} | _TLS_LISTENERS | _SASL_LISTENERS
        advertised = ",".join(f"{name}://{address}" for name, address in self.bootstrap.items())
        properties: dict[str, object] = {
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{self.node.controller_port}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.server_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.reauth.connections.max.reauth.ms": REAUTH_MS,
        }
        for listener in _SASL_LISTENERS:
            prefix = f"listener.name.{listener.lower()}."
            properties[prefix + "sasl.enabled.mechanisms"] = ",".join(MECHANISMS)
            for mechanism in MECHANISMS:
                properties[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = _jaas(mechanism)
        self.node._properties.update(properties)
        self.node.format_args = [
            arg
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            for arg in ("--add-scram", f"{mechanism}=[name={USER},password={PASSWORD}]")
        ]

    def start(self) -> SecureKafka:
        self.cluster.start()
        return self

    def kill(self) -> None:
        self.cluster.kill()

    def confluent_config(self, listener: str, mechanism: str | None = None) -> dict[str, object]:
        """librdkafka settings for ``listener`` (and ``mechanism`` on the SASL ones)."""
        protocol = {"PLAINTEXT": "PLAINTEXT"} | _TLS_LISTENERS | _SASL_LISTENERS
        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap[listener],
            "security.protocol": protocol[listener],
        }
        if protocol[listener] in ("SSL", "SASL_SSL"):
            config["ssl.ca.location"] = str(self.pki.ca)
        if listener == "MTLS":
            config["ssl.certificate.location"] = str(self.pki.client_cert)
            config["ssl.key.location"] = str(self.pki.client_key)
            config["ssl.key.password"] = self.pki.client_key_password
        if mechanism is not None:
            config["sasl.mechanisms"] = mechanism
            if mechanism == "OAUTHBEARER":
                config["sasl.oauthbearer.config"] = f"principal={USER}"
                config["enable.sasl.oauthbearer.unsecure.jwt"] = True
            else:
                config["sasl.username"] = USER
                config["sasl.password"] = PASSWORD
        return config
