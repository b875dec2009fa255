"""Fetch responses are bounded: by ``fetch.max.bytes`` and the request's ``max_bytes`` (KIP-74, at
least one batch for progress), and in memory: a connection that pipelines fetches and never reads
the answers gets one response prepared at a time, so the broker's resident memory stays bounded
while a well-behaved producer and consumer keep working beside it."""

from __future__ import annotations

import socket
import struct
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerFactory
from sdk.protocol.codec import encode_request
from sdk.protocol.messages import FetchRequest
from sdk.records import iter_batches
from tests.reference_broker.network.clients import produce_and_consume
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 8


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def _fill(bootstrap: str, topic: str, per_partition: int, batch_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": batch_bytes,
            "compression.type": "none",
        }
    )
    value = b"x" * 1000
    for partition in range(PARTITIONS):
        for _ in range(per_partition // len(value)):
            while True:
                try:
                    producer.produce(topic, value=value, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(60) == 0


def _all_partitions(topic: str, max_bytes: int, partition_max: int) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                topic_id=uuid.UUID(int=0),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=p, fetch_offset=0, partition_max_bytes=partition_max
                    )
                    for p in range(PARTITIONS)
                ],
            )
        ],
    )


def test_fetch_max_bytes_caps_a_response_but_returns_at_least_one_batch(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(config={"fetch.max.bytes": 64 * 1024})
    topic = f"cap-{uuid.uuid4().hex[:8]}"
    _fill(broker.bootstrap, topic, 256 * 1024, 16 * 1024)
    with WireClient(broker.bootstrap) as client:
        response = client.request(_all_partitions(topic, 50 << 20, 10 << 20), 12)
        sizes = [len(p.records or b"") for t in response.responses for p in t.partitions]
        batch = max(
            b.size_in_bytes
            for b in iter_batches(
                next(bytes(p.records) for t in response.responses for p in t.partitions if p.records)
            )
        )
        assert 0 < sum(sizes) <= 64 * 1024 + batch, sizes
        # A budget smaller than the first batch still returns that batch (progress, KIP-74).
        tiny = client.request(_all_partitions(topic, 10, 10), 12)
        first = [len(p.records or b"") for t in tiny.responses for p in t.partitions]
        assert first[0] > 0 and sum(first[1:]) == 0, first


def test_unread_pipelined_fetches_keep_the_broker_memory_bounded(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    assert broker.pid is not None
    topic = f"hoard-{uuid.uuid4().hex[:8]}"
    _fill(broker.bootstrap, topic, 4 << 20, 512 * 1024)  # 32 MiB over 8 partitions
    baseline = rss_bytes(broker.pid)
    request = _all_partitions(topic, 50 << 20, 8 << 20)  # each answer: the whole 32 MiB
    frames = b"".join(
        struct.pack(">i", len(p)) + p
        for p in (encode_request(request, 12, cid, "hoarder") for cid in range(64))
    )
    host, _, port = broker.bootstrap.rpartition(":")
    hoarders = []
    try:
        for _ in range(2):
            sock = socket.create_connection((host, int(port)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.setblocking(False)
            try:
                sock.send(frames)  # as much as the broker takes; never read
            except BlockingIOError:
                pass
            hoarders.append(sock)
        # Beside them, a producer and a consumer do their work.
        quiet = f"quiet-{uuid.uuid4().hex[:8]}"
        import time

        assert produce_and_consume(broker.bootstrap, quiet, 2000, time.monotonic() + 90) == 2000
        peak = rss_bytes(broker.pid)
        # 64 x 2 unread answers of 32 MiB would be 4 GiB; one at a time per connection is
        # a few of them at most.
        assert peak - baseline < 256 << 20, (baseline, peak)
        assert broker.running
    finally:
        for sock in hoarders:
            sock.close()
    with WireClient(broker.bootstrap) as client:  # nothing stored was lost
        response = client.request(_all_partitions(topic, 50 << 20, 8 << 20), 12)
        assert sum(len(p.records or b"") for t in response.responses for p in t.partitions) >= 32 << 20
