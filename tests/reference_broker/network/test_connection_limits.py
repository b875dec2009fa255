"""Kafka's connection limits: ``max.connections``, ``max.connections.per.ip`` (and its overrides),
``connections.max.idle.ms`` and ``socket.request.max.bytes``. A connection over a limit is closed
by the broker, which stays up and keeps serving everyone else."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess, BrokerStartError
from sdk.protocol.messages import AlterClientQuotasRequest, ApiVersionsRequest, MetadataRequest
from tests.reference_broker.security.conftest import free_port
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


def _waiting(client: WireClient, seconds: float = 1.0) -> bool:
    """True if ``client``'s request got no answer and no close for ``seconds``."""
    client.sock.settimeout(seconds)
    try:
        client.sock.recv(1)
    except TimeoutError:
        return True
    except ConnectionError:
        return False
    return False


def test_a_connection_over_max_connections_waits_for_a_slot(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"max.connections": 2})
    clients = [WireClient(broker.bootstrap) for _ in range(2)]
    try:
        assert all(_served(c) for c in clients)
        with WireClient(broker.bootstrap) as extra:
            extra.send(ApiVersionsRequest(), 0)
            assert _waiting(extra), "a connection over max.connections was answered or closed"
            assert _served(clients[1]), "an open connection stopped being served"
            clients[0].close()
            extra.sock.settimeout(10)
            assert extra.receive(ApiVersionsRequest.API_KEY, 0)[1].error_code == 0
            assert _served(extra)
    finally:
        for c in clients:
            c.close()


def _two_listeners(broker_factory: BrokerFactory, **config: object) -> tuple[BrokerProcess, str, str]:
    clients_port, internal_port = free_port(), free_port()
    broker = broker_factory(
        config={
            "listeners": f"CLIENTS://127.0.0.1:{clients_port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "CLIENTS:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            **config,
        },
        port=clients_port,
    )
    return broker, f"127.0.0.1:{clients_port}", f"127.0.0.1:{internal_port}"


def test_a_listener_limit_holds_only_that_listener(broker_factory: BrokerFactory) -> None:
    broker, clients_at, internal_at = _two_listeners(
        broker_factory, **{"listener.name.clients.max.connections": 1}
    )
    with WireClient(clients_at) as first, WireClient(clients_at) as second:
        assert _served(first)
        second.send(ApiVersionsRequest(), 0)
        assert _waiting(second), "a connection over the listener's max.connections was answered or closed"
        with WireClient(internal_at) as other:
            assert _served(other), "another listener was held by this listener's limit"
        first.close()
        second.sock.settimeout(10)
        assert second.receive(ApiVersionsRequest.API_KEY, 0)[1].error_code == 0
    assert broker.running


def test_the_inter_broker_listener_is_exempt_and_closes_the_least_recent_client(
    broker_factory: BrokerFactory,
) -> None:
    broker, clients_at, internal_at = _two_listeners(broker_factory, **{"max.connections": 2})
    # Up to three rounds: a connection closed just before (the start-up probe) may still count
    # until the broker's loop reads its end, and be the one evicted; a broker that keeps the
    # least recently used connection keeps it in every round.
    for _ in range(3):
        with WireClient(clients_at) as older, WireClient(clients_at) as newer:
            assert _served(older) and _served(newer)
            assert _served(newer)  # ``older`` is now the least recently active
            with WireClient(internal_at) as internal:
                assert _served(internal), "the inter-broker listener was held to max.connections"
                # Generous: on a loaded machine the broker's loop may be slow to close the socket.
                if older.closed_by_peer(timeout=20):
                    assert _served(newer)
                    return
    raise AssertionError(
        f"the least recently used client connection was kept; broker log:\n{broker.stderr()[-4000:]}"
    )


def test_max_connection_creation_rate_slows_the_acceptor(broker_factory: BrokerFactory) -> None:
    # quota.window.num 2 of 1 s: the rate is measured over at least 1 s, so 20 connections at 4/s
    # take at least about (20 - 4) / 4 = 4 s.
    broker = broker_factory(config={"max.connection.creation.rate": 4, "quota.window.num": 2})
    with WireClient(broker.bootstrap) as steady:
        started = time.monotonic()
        for _ in range(20):
            with WireClient(broker.bootstrap, timeout=30) as client:
                assert _served(client)
            assert _served(steady), "an open connection stopped being served"
        elapsed = time.monotonic() - started
    assert elapsed >= 2.5, f"20 connections at max.connection.creation.rate 4/s took {elapsed:.1f} s"


def _set_ip_rate(bootstrap: str, ip: str | None, rate: float) -> None:
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="ip", entity_name=ip)],
                ops=[
                    AlterClientQuotasRequest.OpData(key="connection_creation_rate", value=rate, remove=False)
                ],
            )
        ],
        validate_only=False,
    )
    with WireClient(bootstrap) as admin:
        (entry,) = admin.request(request, 1).entries
        assert entry.error_code == 0, entry.error_message


class _From(WireClient):
    """A wire connection from a chosen loopback address."""

    def __init__(self, bootstrap: str, source: str):
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
        self.client_id = "wire-test"
        self._next_correlation_id = 1


@pytest.mark.parametrize("entity", ["127.0.0.1", None], ids=["own-ip", "default-ip"])
def test_connection_creation_rate_quota_closes_that_address_connections_after_a_delay(
    broker_factory: BrokerFactory, entity: str | None
) -> None:
    broker = broker_factory(config={"quota.window.num": 2})
    if entity is None:
        _set_ip_rate(broker.bootstrap, "127.0.0.2", 1000.0)  # the well-behaved client's own quota
    _set_ip_rate(broker.bootstrap, entity, 2.0)
    closed = served = attempts = 0
    # Connections as fast as the loop opens them: a loaded machine's slower loop comes nearer the
    # 2/s quota, so it opens more of them (up to 60) until five were closed.
    while closed < 5 and attempts < 60:
        attempts += 1
        with WireClient(broker.bootstrap) as client:
            client.send(ApiVersionsRequest(), 0)
            client.sock.settimeout(10)
            try:
                frame = client.sock.recv(4)
            except ConnectionError:
                frame = b""
            if frame:
                served += 1
            else:
                closed += 1
        with _From(broker.bootstrap, "127.0.0.2") as other:
            assert _served(other), "another address was throttled by this address's quota"
    assert served >= 1, "no connection was taken under the quota"
    assert closed >= 5, f"only {closed} of {attempts} connections over 2/s were closed"


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
        ("max.connection.creation.rate", -1),
        ("listener.name.plaintext.max.connections", -1),
        ("socket.listen.backlog.size", 0),
        ("queued.max.requests", 0),
        ("queued.max.request.bytes", 1000),
        ("fetch.max.bytes", 1000),
        ("quota.window.num", 0),
        ("quota.window.size.seconds", 0),
    ],
)
def test_invalid_limits_are_refused_at_start(broker_factory: BrokerFactory, key: str, value: object) -> None:
    with pytest.raises(BrokerStartError, match=key.replace(".", r"\.")):
        broker_factory(config={key: value})
