"""Kafka's broker-wide bounds on requests read and not yet handled: ``queued.max.request.bytes`` (a
memory pool taken when a request's size is read; while it is empty no connection reads, and
reading starts again once bytes come back) and ``queued.max.requests`` (pipelined requests read
ahead, broker-wide)."""

from __future__ import annotations

import struct
import threading

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.messages import ApiVersionsRequest, MetadataRequest
from tests.reference_broker.network.test_connection_limits import _waiting
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20


def test_an_empty_request_pool_stops_reading_until_bytes_come_back(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"socket.request.max.bytes": MIB, "queued.max.request.bytes": MIB})
    with WireClient(broker.bootstrap) as hog, WireClient(broker.bootstrap) as other:
        assert other.request(ApiVersionsRequest(), 0).error_code == 0
        # Half of a 1 MiB request: its size is read, so the whole pool is taken until it is handled.
        hog.send_raw(struct.pack(">i", MIB) + b"\0" * (MIB // 2))
        other.send(MetadataRequest(topics=[]), 12)
        assert _waiting(other, 2.0), "a request was read while the memory pool was empty"
        hog.close()  # the unfinished request is dropped and its bytes come back
        other.sock.settimeout(10)
        _, response = other.receive(MetadataRequest.API_KEY, 12)
        assert response.brokers
        assert other.request(ApiVersionsRequest(), 0).error_code == 0
    assert broker.running


def test_requests_larger_than_the_free_pool_are_read_while_any_is_free(broker_factory: BrokerFactory) -> None:
    # Kafka's pool is not strict: a request gets its bytes while any are free, so a client sending
    # requests of the largest size one after another is never stuck.
    broker = broker_factory(config={"socket.request.max.bytes": MIB, "queued.max.request.bytes": MIB})
    with WireClient(broker.bootstrap) as client:
        for _ in range(5):
            client.send_raw(struct.pack(">i", MIB - 4) + b"\0" * (MIB - 4))
            assert client.closed_by_peer(10), "an undecodable request did not close its connection"
            client.close()
            client = WireClient(broker.bootstrap)
        assert client.request(ApiVersionsRequest(), 0).error_code == 0


@pytest.mark.parametrize("config", [{"queued.max.requests": 1}, {"queued.max.request.bytes": 100 * MIB}])
def test_pipelined_requests_are_all_answered_in_order_under_the_bounds(
    broker_factory: BrokerFactory, config: dict[str, object]
) -> None:
    broker = broker_factory(config=config)
    errors: list[BaseException] = []

    def pipeline() -> None:
        try:
            with WireClient(broker.bootstrap) as client:
                sent = [client.send(MetadataRequest(topics=[]), 12) for _ in range(50)]
                client.sock.settimeout(30)
                got = [client.receive(MetadataRequest.API_KEY, 12)[0] for _ in sent]
                assert got == sent
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pipeline) for _ in range(4)]
    for thread in threads:
        thread.start()
    with WireClient(broker.bootstrap) as stalled:  # pipelines and never reads its answers
        for _ in range(200):
            stalled.send(MetadataRequest(topics=[]), 12)
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        with WireClient(broker.bootstrap) as other:
            assert other.request(ApiVersionsRequest(), 0).error_code == 0
