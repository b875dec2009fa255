"""Kafka's connection limits: ``max.connections``, ``max.connections.per.ip`` (and its overrides),
``connections.max.idle.ms`` and ``socket.request.max.bytes``. A connection over a limit is closed
by the broker, which stays up and keeps serving everyone else."""

from __future__ import annotations

import struct
import time

import pytest

from reference_broker.testing import BrokerFactory, BrokerStartError
from sdk.protocol.messages import ApiVersionsRequest, MetadataRequest
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.timeout(120)


def _served(client: WireClient) -> bool:
    try:
        client.request(ApiVersionsRequest(), 0)
    except (ConnectionError, OSError):
        return False
    return True


def test_connections_over_the_per_ip_limit_are_closed(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"max.connections.per.ip": 2})
    first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    try:
        assert _served(first) and _served(second)
        with WireClient(broker.bootstrap) as third:
            assert third.closed_by_peer(), "a third connection from one address was kept"
        second.close()
        deadline = time.monotonic() + 10
        while True:  # the freed slot is taken by the next connection
            with WireClient(broker.bootstrap) as again:
                if _served(again):
                    break
            assert time.monotonic() < deadline, "no connection accepted after one closed"
            time.sleep(0.05)
        assert _served(first)
    finally:
        first.close()
        second.close()


def test_a_per_ip_override_replaces_the_default(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(
        config={"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "127.0.0.1:3"}
    )
    clients = [WireClient(broker.bootstrap) for _ in range(3)]
    try:
        assert all(_served(c) for c in clients)
        with WireClient(broker.bootstrap) as fourth:
            assert fourth.closed_by_peer()
    finally:
        for c in clients:
            c.close()


def test_connections_over_max_connections_are_closed(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"max.connections": 2})
    clients = [WireClient(broker.bootstrap) for _ in range(2)]
    try:
        assert all(_served(c) for c in clients)
        with WireClient(broker.bootstrap) as extra:
            assert extra.closed_by_peer()
        assert all(_served(c) for c in clients)
    finally:
        for c in clients:
            c.close()


def test_idle_connections_are_closed_and_busy_ones_kept(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"connections.max.idle.ms": 600})
    with WireClient(broker.bootstrap) as idle, WireClient(broker.bootstrap) as busy:
        assert _served(idle)
        deadline = time.monotonic() + 20
        idle.sock.settimeout(0.05)
        closed = False
        while time.monotonic() < deadline and not closed:
            assert _served(busy), "a connection in use was closed as idle"
            try:
                closed = idle.sock.recv(1) == b""
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = True
        assert closed, "an idle connection was kept past connections.max.idle.ms"


def test_an_oversized_request_closes_its_connection_only(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"socket.request.max.bytes": 4096})
    with WireClient(broker.bootstrap) as polite, WireClient(broker.bootstrap) as abuser:
        abuser.send_raw(struct.pack(">i", 5000) + b"\0" * 5000)
        assert abuser.closed_by_peer()
        assert polite.request(MetadataRequest(topics=[]), 12).brokers
    assert broker.running


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max.connections.per.ip.overrides", "localhost"),
        ("max.connections.per.ip.overrides", "127.0.0.1:many"),
        ("max.connections.per.ip", -1),
        ("max.connections", -1),
        ("fetch.max.bytes", 1000),
        ("quota.window.num", 0),
        ("quota.window.size.seconds", 0),
    ],
)
def test_invalid_limits_are_refused_at_start(broker_factory: BrokerFactory, key: str, value: object) -> None:
    with pytest.raises(BrokerStartError, match=key.replace(".", r"\.")):
        broker_factory(config={key: value})
