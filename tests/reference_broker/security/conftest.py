"""Fixtures for the security tests: a test CA, free ports and brokers with several listeners."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from tests.reference_broker.security.certs import CertificateAuthority, Pem
from tests.reference_broker.wire import WireClient

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-pw" user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Certs:
    """The CA and the broker's certificate (valid for localhost and 127.0.0.1)."""

    def __init__(self, directory: Path):
        self.ca = CertificateAuthority(directory)
        self.server: Pem = self.ca.issue("localhost", server=True)

    def broker_ssl(self, client_auth: str = "none") -> dict[str, Any]:
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.pem),
            "ssl.client.auth": client_auth,
        }


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path / "certs")


class Ports(dict[str, int]):
    """Listener name -> port; ``address(name)`` is ``127.0.0.1:port``."""

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self[name]}"


MultiBroker = Callable[..., tuple[BrokerProcess, Ports]]


@pytest.fixture
def multi_listener_broker(broker_factory: BrokerFactory) -> Iterator[MultiBroker]:
    """``start(["PLAINTEXT", "SSL"], {...})``: a broker with one listener per security protocol
    (named after it) on free ports, and those ports."""

    def start(
        protocols: list[str], config: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[BrokerProcess, Ports]:
        ports = Ports({name: free_port() for name in protocols})
        props = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()), **(config or {})}
        return broker_factory(props, **kwargs), ports

    yield start


def plain_login(client: WireClient, user: str, password: str) -> int:
    """SASL/PLAIN on a raw connection; returns the session lifetime the broker announced."""
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2)
    assert answer.error_code == 0, answer
    return int(answer.session_lifetime_ms)
