"""A node's own login to a peer's SASL_SSL listener, mechanism by mechanism, against a real broker
process: the connections ``reference_broker.cluster.inter_broker`` opens for replica fetches and
controller requests authenticate with the listener's JAAS credentials (PLAIN, SCRAM-SHA-256/512
with the peer's stored credential, OAUTHBEARER's unsecured token), a wrong password is refused
rather than ignored, and the peer's host name is checked against its certificate unless
``ssl.endpoint.identification.algorithm`` is empty."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.cluster.inter_broker import PeerAuthenticationError, inter_broker_security
from reference_broker.config import BrokerConfig
from reference_broker.network.peer import PeerConnectionError
from reference_broker.testing import BrokerProcess
from sdk.admin.security import UserScramCredentialUpsertion
from sdk.protocol.messages import MetadataRequest, MetadataResponse
from sdk.sync.admin import AdminClient
from tests.reference_broker.cluster.test_cluster_security import node_certificate

pytestmark = [pytest.mark.slow]

PASSWORD = "broker-secret"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _jaas(mechanism: str, password: str) -> str:
    if mechanism == "PLAIN":
        return ("org.apache.kafka.common.security.plain.PlainLoginModule required"
                f' username="broker" password="{password}" user_broker="{PASSWORD}";')
    if mechanism == "OAUTHBEARER":
        return ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
                ' unsecuredLoginStringClaim_sub="broker";')
    return (f"org.apache.kafka.common.security.scram.ScramLoginModule required"
            f' username="broker" password="{password}";')


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A broker with a PLAINTEXT listener and an INTERNAL SASL_SSL one on every address
    (0.0.0.0) serving all four mechanisms; its certificate names 127.0.0.1 only."""
    directory = tmp_path_factory.mktemp("peer")
    ca, keystore = node_certificate(directory / "certs", addresses=["127.0.0.1"])
    plain, internal = _free_port(), _free_port()
    tls = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
    }
    properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://0.0.0.0:{internal}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.internal.plain.sasl.jaas.config": _jaas("PLAIN", PASSWORD),
        **tls,
    }
    with BrokerProcess(directory / "data", properties, plain) as broker:
        admin = AdminClient(bootstrap_servers=broker.bootstrap)
        admin.start()
        try:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):  # one alteration per user a request
                errors = admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion("broker", mechanism, PASSWORD)]
                )
                assert errors == {"broker": None}
        finally:
            admin.close()
        yield {"port": internal, "tls": tls, "directory": directory}


def _client_security(peer: dict[str, Any], mechanism: str, password: str = PASSWORD,
                     **settings: Any) -> Any:
    """What a node configured with ``settings`` uses towards brokers on its INTERNAL listener."""
    config = BrokerConfig.build(peer["directory"] / f"client-{mechanism}", properties={
        "listeners": f"PLAINTEXT://127.0.0.1:{_free_port()},INTERNAL://127.0.0.1:{_free_port()}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": mechanism,
        "listener.name.internal.plain.sasl.jaas.config": _jaas("PLAIN", PASSWORD),
        f"listener.name.internal.{mechanism.lower()}.sasl.jaas.config": _jaas(mechanism, password),
        **peer["tls"],
        **settings,
    })
    return inter_broker_security(config)


def _metadata(security: Any, host: str, port: int) -> MetadataResponse:
    async def run() -> Any:
        channels = security.channels("login-test")
        channels.update(1, host, port)
        try:
            return await channels.send(1, MetadataRequest(topics=[]))
        finally:
            await channels.close()

    response = asyncio.run(run())
    assert isinstance(response, MetadataResponse)
    return response


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_node_logs_in_with_the_listener_credentials(peer: dict[str, Any], mechanism: str) -> None:
    response = _metadata(_client_security(peer, mechanism), "127.0.0.1", peer["port"])
    assert response.error_code == 0 and response.brokers


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused(peer: dict[str, Any], mechanism: str) -> None:
    security = _client_security(peer, mechanism, password="wrong")
    with pytest.raises(PeerAuthenticationError, match="failed"):
        _metadata(security, "127.0.0.1", peer["port"])


def test_host_name_verification_follows_endpoint_identification(peer: dict[str, Any]) -> None:
    """127.0.0.2 reaches the same listener, but the certificate does not name it."""
    with pytest.raises(PeerConnectionError, match="IP address mismatch"):
        _metadata(_client_security(peer, "PLAIN"), "127.0.0.2", peer["port"])
    unchecked = _client_security(peer, "PLAIN", **{"ssl.endpoint.identification.algorithm": ""})
    assert _metadata(unchecked, "127.0.0.2", peer["port"]).error_code == 0


def test_scram_client_refuses_a_peer_without_the_credential(tmp_path: Path) -> None:
    """The server's signature in SCRAM's last message proves the peer knows the credential; a
    forged one ends the login (the generator raises), whatever the peer says next."""
    from reference_broker.cluster.inter_broker import SaslLogin, _client_exchange, _ScramError

    exchange = _client_exchange(SaslLogin("SCRAM-SHA-256", "broker", PASSWORD))
    first = next(exchange).decode()
    nonce = first.split("r=")[1]
    exchange.send(f"r={nonce}server,s=c2FsdA==,i=4096".encode())
    with pytest.raises(_ScramError, match="server signature"):
        exchange.send(b"v=Zm9yZ2Vk")
