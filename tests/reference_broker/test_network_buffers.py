"""Large frames' receive buffers: reused for a connection's next large frame, never while in use.

A produce request larger than the small-frame limit is received into a buffer of its own, which
the connection keeps for its next large frame once nothing refers to the last one. Produce
checks and writes the records where they were received, so reusing a buffer that something
still reads would hand it another request's bytes: these tests pin both sides.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.network import server as server_module
from reference_broker.testing import InProcessBroker, run_in_process
from sdk.protocol.codec import encode_request
from sdk.protocol.messages import MetadataRequest, ProduceRequest
from sdk.records import RecordBatch, RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient

PRODUCE = 0


def _as_sent(batch: bytes | bytearray | memoryview) -> bytes:
    """A batch without what the leader assigns on append: its base offset (bytes 0-7) and its
    partition leader epoch (bytes 12-15, stamped by the leader as Kafka's is)."""
    raw = bytes(batch)
    return raw[8:12] + raw[16:]


@pytest.fixture
def runner() -> Iterator[InProcessBroker]:
    with run_in_process(config={"num.partitions": 1}) as broker:
        yield broker


def batch(tag: int, size: int) -> bytes:
    """About ``size`` bytes of records whose values all say ``tag``."""
    builder = RecordBatchBuilder()
    value = b"%06d" % tag * 16
    for i in range(max(1, size // (len(value) + 10))):
        builder.append(1_700_000_000_000 + i, None, value)
    return builder.build()


def produce_request(topic: str, records: bytes) -> ProduceRequest:
    partition = ProduceRequest.PartitionProduceData(index=0, records=records)
    return ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
    )


def create(client: WireClient, topic: str) -> None:
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)


def stored_batches(client: WireClient, topic: str) -> list[RecordBatch]:
    """Every batch of partition 0, fetched back and CRC-checked."""
    batches = list(iter_batches(client.fetch_all(topic)))
    for found in batches:
        found.validate()
    return batches


def test_large_frames_of_changing_sizes_on_one_connection(runner: InProcessBroker) -> None:
    """Pipelined produce requests, each larger or smaller than the buffer left by the one before,
    are stored exactly as sent (a reused buffer holds stale bytes past the new frame's end)."""
    topic = f"sizes-{uuid.uuid4().hex[:8]}"
    sizes = [300_000, 100_000, 500_000, 70_000, 300_000, 500_000]
    sent = [batch(tag, size) for tag, size in enumerate(sizes)]
    with WireClient(runner.bootstrap) as client:
        create(client, topic)
        frames = []
        for cid, records in enumerate(sent):
            payload = encode_request(produce_request(topic, records), 9, cid, "sizes")
            frames.append(struct.pack(">i", len(payload)) + payload)
        client.send_raw(b"".join(frames))
        for cid in range(len(sent)):
            got, response = client.receive(PRODUCE, 9)
            assert got == cid
            assert response.responses[0].partition_responses[0].error_code == 0
        stored = stored_batches(client, topic)
    assert len(stored) == len(sent)
    next_offset = 0
    for records, found in zip(sent, stored, strict=True):
        assert found.base_offset == next_offset
        assert _as_sent(found.raw) == _as_sent(records)  # all but what the leader assigns
        next_offset = found.next_offset


def connection_spare(runner: InProcessBroker) -> tuple[int, int] | None:
    """Identity and size of the one connection's spare buffer.

    Not the buffer itself: a reference held here would be one the broker sees, and a buffer
    something refers to is never reused.
    """
    (spare,) = runner.call(lambda: [conn._spare for conn in runner.broker.server._connections])
    found = None if spare is None else (id(spare), len(spare))
    del spare
    return found


def test_a_large_frame_buffer_is_reused(runner: InProcessBroker) -> None:
    """After a large produce the connection holds its buffer for the next one: if something kept
    a reference to every request (a log call, a cache), the reuse would silently stop.

    The second frame is larger than the small-frame receive buffer, so it always takes the
    large-frame path, and smaller than the first, so the spare fits it: a new buffer would have
    the second frame's size, the reused one keeps the first's.
    """
    topic = f"reuse-{uuid.uuid4().hex[:8]}"
    first, second = batch(1, 400_000), batch(2, 300_000)
    assert len(second) > server_module._RECV_BUFFER
    with WireClient(runner.bootstrap) as client:
        create(client, topic)
        client.request(produce_request(topic, first), 9)
        spare = connection_spare(runner)
        assert spare is not None and spare[1] > len(first)
        client.request(produce_request(topic, second), 9)
        assert connection_spare(runner) == spare  # the same buffer served the second request
        assert [_as_sent(b.raw) for b in stored_batches(client, topic)] == [_as_sent(first), _as_sent(second)]


def test_a_request_still_referred_to_keeps_its_buffer(runner: InProcessBroker) -> None:
    """A handler that keeps the request (views of its records) keeps its buffer: the next large
    frame gets another one, and the kept records still read as they arrived."""
    kept: list[Any] = []
    registry = runner.broker.registry
    produce = registry._handlers[PRODUCE]

    def keeping(broker: Any, ctx: Any, request: ProduceRequest) -> Any:
        kept.append(request)
        return produce.handle(broker, ctx, request)

    runner.call(lambda: registry._handlers.__setitem__(PRODUCE, dataclasses.replace(produce, handle=keeping)))
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    first, second = batch(1, 300_000), batch(2, 300_000)
    with WireClient(runner.bootstrap) as client:
        create(client, topic)
        client.request(produce_request(topic, first), 9)
        offered = connection_spare(runner)
        client.request(produce_request(topic, second), 9)
        then = connection_spare(runner)
    # The first buffer is alive (the kept request refers to it), so a different id is a
    # different buffer.
    assert offered is not None and then is not None and then[0] != offered[0]
    assert _as_sent(kept[0].topic_data[0].partition_data[0].records) == _as_sent(first)
    assert _as_sent(kept[1].topic_data[0].partition_data[0].records) == _as_sent(second)


def test_small_frames_reach_produce_writable(runner: InProcessBroker) -> None:
    """Produce requests smaller than the receive buffer, pipelined in one send, are each cut into a
    writable buffer of their own: their records reach the log as a writable view, so they are
    validated and written in place instead of copied first (as ``bytes`` they were), and each is
    stored exactly as sent."""
    writable: list[bool] = []
    registry = runner.broker.registry
    produce = registry._handlers[PRODUCE]

    def noting(broker: Any, ctx: Any, request: ProduceRequest) -> Any:
        writable.append(not request.topic_data[0].partition_data[0].records.readonly)
        return produce.handle(broker, ctx, request)

    runner.call(lambda: registry._handlers.__setitem__(PRODUCE, dataclasses.replace(produce, handle=noting)))
    topic = f"small-{uuid.uuid4().hex[:8]}"
    sent = [batch(tag, 20_000) for tag in range(3)]
    with WireClient(runner.bootstrap) as client:
        create(client, topic)
        frames = []
        for cid, records in enumerate(sent):
            payload = encode_request(produce_request(topic, records), 9, cid, "small")
            assert len(payload) < server_module._SMALL_FRAME
            frames.append(struct.pack(">i", len(payload)) + payload)
        client.send_raw(b"".join(frames))
        for cid in range(len(sent)):
            got, response = client.receive(PRODUCE, 9)
            assert got == cid and response.responses[0].partition_responses[0].error_code == 0
        stored = stored_batches(client, topic)
    assert writable == [True, True, True]
    assert [_as_sent(b.raw) for b in stored] == [_as_sent(records) for records in sent]
