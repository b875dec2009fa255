"""An abusive connection beside a well-behaved one: the broker serves one request per connection at
a time and yields between them, so a connection that pipelines expensive requests (or floods
cheap ones) does not stall other clients, and what the well-behaved client stored stays stored.

Conditions, not timings: the well-behaved client must complete many round trips *while* the
abusive connection's pipelined batch is still being answered. A broker that runs a connection's
pipelined requests back to back answers the well-behaved client only after the whole batch.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.codec import encode_request
from sdk.protocol.messages import (
    ApiVersionsRequest,
    DescribeTransactionsRequest,
    MetadataRequest,
)
from tests.reference_broker.network.clients import produce_and_consume, round_trips_until
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.timeout(180)


def _frame(request: object, version: int, correlation_id: int) -> bytes:
    payload = encode_request(request, version, correlation_id, "abuser")
    return struct.pack(">i", len(payload)) + payload


def _read_responses(sock: socket.socket, count: int) -> None:
    """Read and discard ``count`` response frames."""
    buffered = bytearray()
    frames = 0
    while frames < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed by the broker")
        buffered += chunk
        while len(buffered) >= 4:
            (size,) = struct.unpack_from(">i", buffered)
            if len(buffered) < 4 + size:
                break
            del buffered[: 4 + size]
            frames += 1


def test_pipelined_expensive_requests_do_not_stall_another_connection(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    ids = [f"txn-{i:06d}" for i in range(20_000)]
    batch = b"".join(_frame(DescribeTransactionsRequest(transactional_ids=ids), 0, cid) for cid in range(64))
    host, _, port = broker.bootstrap.rpartition(":")
    with WireClient(broker.bootstrap) as polite, socket.create_connection((host, int(port))) as abuser:
        polite.request(MetadataRequest(topics=[]), 12)  # connected and served once
        done = threading.Event()
        failure: list[BaseException] = []

        def send() -> None:
            try:
                abuser.sendall(batch)
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        def abuse() -> None:
            # Sending and reading at once, as a pipelining client does: the broker holds a
            # response until it is read and reads no further request meanwhile, so a client
            # that read only after sending the whole batch would stall itself once the socket
            # buffers are full.
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            try:
                _read_responses(abuser, 64)
                sender.join(30)
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)
            finally:
                done.set()

        abuser.settimeout(60)
        thread = threading.Thread(target=abuse, daemon=True)
        thread.start()
        completed = round_trips_until(polite, done, deadline_s=120)
        thread.join(30)
        assert not failure, failure
        assert done.is_set(), "the pipelined batch was not answered in full"
        # The batch takes many seconds to answer; a fair broker answers the polite client's small
        # requests in between, not after the whole batch.
        assert completed >= 10, f"only {completed} Metadata round trips while the batch was served"
        assert broker.running


def test_a_flood_of_cheap_requests_does_not_stall_another_connection(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = f"fair-{uuid.uuid4().hex[:8]}"
    host, _, port = broker.bootstrap.rpartition(":")
    stop = threading.Event()
    floods: list[int] = []

    def flood() -> None:
        with socket.create_connection((host, int(port))) as sock:
            sock.settimeout(30)
            burst = b"".join(_frame(ApiVersionsRequest(), 0, cid) for cid in range(100))
            sent = 0
            while not stop.is_set():
                sock.sendall(burst)
                _read_responses(sock, 100)
                sent += 100
            floods.append(sent)

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        produced = produce_and_consume(broker.bootstrap, topic, 500, deadline)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert produced == 500
    assert floods and all(sent > 0 for sent in floods)
    assert broker.running
