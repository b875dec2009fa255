"""The broker's outbound client against a real broker process: versions negotiated by
ApiVersions, pipelined requests matched to their responses, a killed peer failing the requests in
flight with ``PeerConnectionError``, and a reconnect once the peer is back."""

from __future__ import annotations

import asyncio

import pytest

from reference_broker.network.peer import PeerChannels, PeerConnection, PeerConnectionError
from reference_broker.testing import BrokerProcess
from sdk.protocol.codec import supported_versions
from sdk.protocol.messages import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.interop


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


async def test_pipelined_requests_get_their_own_responses(broker: BrokerProcess) -> None:
    host, port = _host_port(broker.bootstrap)
    conn = PeerConnection(host, port, client_id="peer-test")
    try:
        requests = [MetadataRequest(topics=[], allow_auto_topic_creation=False) for _ in range(20)]
        responses = await asyncio.gather(*(conn.send(r) for r in requests))
        assert all(isinstance(r, MetadataResponse) and r.brokers for r in responses)
        assert conn.version_for(MetadataRequest.API_KEY) <= supported_versions(MetadataRequest.API_KEY)[1]
    finally:
        await conn.close()
    with pytest.raises(PeerConnectionError):
        await conn.send(MetadataRequest(topics=[]))


async def test_a_killed_peer_fails_the_request_and_a_restarted_one_is_reconnected(
    broker: BrokerProcess,
) -> None:
    host, port = _host_port(broker.bootstrap)
    channels = PeerChannels("peer-test", connect_timeout_s=2.0, request_timeout_s=5.0)
    channels.update(1, host, port)
    try:
        assert isinstance(await channels.send(1, MetadataRequest(topics=[])), MetadataResponse)
        broker.kill()
        with pytest.raises(PeerConnectionError):
            await channels.send(1, MetadataRequest(topics=[]))
        broker.start()
        channels.update(1, *_host_port(broker.bootstrap))
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                response = await channels.send(1, MetadataRequest(topics=[]))
                break
            except PeerConnectionError:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
        assert isinstance(response, MetadataResponse)
    finally:
        await channels.close()


async def test_a_request_timing_out_leaves_no_unretrieved_exception() -> None:
    """A peer that accepts the connection and never answers: the request (here the ApiVersions
    of the connect) fails with ``PeerConnectionError`` and nothing is left for asyncio to report
    as "Future exception was never retrieved" (the timed-out request's future is failed with the
    connection's error after the caller stopped waiting on it)."""
    import gc

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    try:
        conn = PeerConnection("127.0.0.1", port, client_id="peer-test", connect_timeout_s=0.2)
        with pytest.raises(PeerConnectionError, match="timed out"):
            await conn.send(MetadataRequest(topics=[]))
        await conn.close()
        del conn
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
        server.close()
        await server.wait_closed()
    assert reported == []
