"""Connection: version negotiation, pipelining, timeouts, SASL slot — against real brokers."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from sdk.client.connection import Connection, pick_version
from sdk.client.sasl import PlainMechanism
from sdk.errors import (
    KafkaConnectionError,
    ResponseTimeoutError,
    UnsupportedVersionError,
)
from sdk.protocol import messages


def _address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


async def test_negotiates_versions_with_the_mock_via_the_v0_fallback(mock_cluster):
    # librdkafka's mock speaks ApiVersions v0-2 only: our v4 request gets UNSUPPORTED_VERSION first.
    conn = Connection(*_address(mock_cluster.bootstrap))
    await conn.connect()
    try:
        assert conn.connected
        assert conn.broker_versions[18] == (0, 2)
        assert conn.version_for(18) == 2
        assert conn.version_for(0) == min(conn.broker_versions[0][1], 12)
        assert conn.version_for(3) >= 9
    finally:
        conn.close()


async def test_kip511_fallback_retries_at_the_version_the_broker_lists(kafka, proxy_factory):
    proxy = await proxy_factory(kafka.bootstrap)
    proxy.limit_api_versions(3)
    conn = Connection(*_address(proxy.bootstrap))
    await conn.connect()
    try:
        # Newest first, then what the "older broker" listed; the mock itself speaks only v0-2 and
        # its own fallback answer is malformed, so against it the client steps down to v0 too.
        expected = [4, 3, 0] if kafka.kind == "mock" else [4, 3]
        assert proxy.api_versions_seen == expected
        assert conn.connected and conn.broker_versions
        assert (await conn.request(messages.MetadataRequest(topics=[]))).brokers
    finally:
        conn.close()


async def test_negotiates_api_versions_with_the_broker(kafka):
    conn = Connection(*_address(kafka.bootstrap))
    await conn.connect()
    try:
        assert conn.version_for(3) >= 1
        response = await conn.request(messages.MetadataRequest(topics=[]))
        assert response.brokers
    finally:
        conn.close()


def test_pick_version_and_its_errors():
    assert pick_version(3, (0, 99)) == 13
    assert pick_version(0, (3, 13)) == 12  # Produce v13 is capped: it needs topic ids
    assert pick_version(3, (1, 5), max_version=4) == 4
    with pytest.raises(UnsupportedVersionError, match="no common version of Produce"):
        pick_version(0, (0, 2), broker="old-broker:9092")
    with pytest.raises(UnsupportedVersionError, match="does not support"):
        pick_version(22, None)
    error = UnsupportedVersionError("x", api_key=3)
    assert error.api_key == 3 and error.code == 35


async def test_pipelined_requests_are_matched_by_correlation_id(kafka):
    conn = Connection(*_address(kafka.bootstrap))
    await conn.connect()
    try:
        futures = [conn.send(messages.MetadataRequest(topics=[])) for _ in range(50)]
        futures.append(conn.send(messages.ApiVersionsRequest(), 0))
        assert conn.in_flight == 51
        responses = await asyncio.gather(*futures)
        assert all(isinstance(r, messages.MetadataResponse) for r in responses[:50])
        assert isinstance(responses[50], messages.ApiVersionsResponse)
        assert conn.in_flight == 0
    finally:
        conn.close()


async def test_request_timeout_closes_the_connection(mock_cluster, proxy_factory):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    conn = Connection(*_address(proxy.bootstrap), request_timeout_ms=300)
    await conn.connect()
    proxy.pause()
    first = conn.send(messages.MetadataRequest(topics=[]))
    second = conn.send(messages.MetadataRequest(topics=[]))
    started = time.monotonic()
    with pytest.raises(ResponseTimeoutError):
        await first
    # About request_timeout_ms (0.3 s); a loaded runner can add seconds, while ignoring it would
    # wait for the 30 s default or forever, far outside 10 s.
    assert 0.25 < time.monotonic() - started < 10
    with pytest.raises(KafkaConnectionError):
        await second
    assert conn.closed
    with pytest.raises(KafkaConnectionError):
        conn.send(messages.MetadataRequest(topics=[]))
    proxy.resume()


async def test_silent_server_fails_the_handshake_in_time():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = Connection("127.0.0.1", port, request_timeout_ms=200)
        with pytest.raises(ResponseTimeoutError):
            await conn.connect()
        assert conn.closed
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


async def test_refused_connection():
    conn = Connection("127.0.0.1", 1, connect_timeout_ms=500)
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        await conn.connect()


async def test_connection_cut_fails_waiting_requests(mock_cluster, proxy_factory):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    closed = []
    conn = Connection(*_address(proxy.bootstrap), on_close=lambda c, e: closed.append(e))
    await conn.connect()
    proxy.pause()
    future = conn.send(messages.MetadataRequest(topics=[]))
    await asyncio.sleep(0.05)
    proxy.cut_all()
    with pytest.raises(KafkaConnectionError):
        await future
    deadline = time.monotonic() + 10  # the close callback may run a loop turn or a loaded moment later
    while not (conn.closed and closed):
        assert time.monotonic() < deadline, "the connection was not closed"
        await asyncio.sleep(0.01)
    assert len(closed) == 1
    proxy.resume()


async def test_acks_0_style_requests_expect_no_response(mock_cluster):
    conn = Connection(*_address(mock_cluster.bootstrap))
    await conn.connect()
    try:
        assert conn.send(messages.MetadataRequest(topics=[]), expect_response=False) is None
        assert conn.in_flight == 0
    finally:
        conn.close()


async def test_sasl_against_a_broker_without_sasl_is_a_clear_error(mock_cluster):
    conn = Connection(
        *_address(mock_cluster.bootstrap),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=PlainMechanism("user", "secret"),
    )
    with pytest.raises(UnsupportedVersionError, match="SaslHandshake"):
        await conn.connect()


def test_plain_token():
    assert PlainMechanism("user", "pässword").initial_response() == b"\0user\0p\xc3\xa4ssword"
    assert PlainMechanism("u", "p", authorization_id="admin").initial_response() == b"admin\0u\0p"
