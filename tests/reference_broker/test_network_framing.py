"""Frame reading and response writing over raw sockets: sizes and splits the server must handle.

The server reads small frames out of one receive buffer and gives large ones (over 64 KiB) their
own buffer as soon as the size prefix is in; responses go out in request order, several at a
time, with large record data passed to the transport uncopied. These tests send frames whole,
byte by byte, in odd pieces and pipelined together, and check every answer and every byte.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

from reference_broker.testing import BrokerProcess
from sdk.protocol.codec import encode_request
from sdk.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    ProduceRequest,
)
from sdk.records import RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient


def _topic(client: WireClient) -> str:
    name = f"framing-{uuid.uuid4().hex[:8]}"
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), 12)
    return name


def _batch(records: int, size: int, tag: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(records):
        builder.append(1_000 + i, None, tag + (b"%06d" % i) * (size // 6))
    return builder.build()


def _produce(topic: str, batch: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


def _frame(request: object, version: int, correlation_id: int) -> bytes:
    payload = encode_request(request, version, correlation_id, "framing-test")
    return struct.pack(">i", len(payload)) + payload


def test_large_produce_sent_in_odd_pieces(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        topic = _topic(client)
        batch = _batch(2_000, 500, b"a")  # about 1 MiB: received into its own buffer
        frame = _frame(_produce(topic, batch), 9, 77)
        pieces = [1, 2, 1, 3, 70_000, 5, 300_000, 1]
        pos = 0
        for size in pieces:
            client.send_raw(frame[pos : pos + size])
            pos += size
            time.sleep(0.01)
        client.send_raw(frame[pos:])
        cid, response = client.receive(0, 9)
        assert cid == 77
        assert response.responses[0].partition_responses[0].error_code == 0
        stored = client.fetch_all(topic)  # several MiB back: written from the log's buffers
    [got] = list(iter_batches(stored))
    assert [r.value for r in got] == [r.value for r in next(iter_batches(batch))]


def test_byte_by_byte_small_frame(broker: BrokerProcess) -> None:
    frame = _frame(ApiVersionsRequest(client_software_name="slow", client_software_version="1"), 3, 5)
    with WireClient(broker.bootstrap) as client:
        for i in range(len(frame)):
            client.send_raw(frame[i : i + 1])
        cid, response = client.receive(18, 3)
        assert cid == 5 and response.error_code == 0


def test_pipelined_small_and_large_frames_in_one_send(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        topic = _topic(client)
        batches = [_batch(400, 300, b"b"), _batch(3, 10, b"c"), _batch(900, 200, b"d")]
        plan = [
            (18, 3, ApiVersionsRequest(client_software_name="p", client_software_version="1")),
            (0, 9, _produce(topic, batches[0])),
            (3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])),
            (0, 9, _produce(topic, batches[1])),
            (18, 3, ApiVersionsRequest(client_software_name="p", client_software_version="1")),
            (0, 9, _produce(topic, batches[2])),
            (18, 0, ApiVersionsRequest()),
        ]
        client.send_raw(b"".join(_frame(req, ver, 100 + i) for i, (_, ver, req) in enumerate(plan)))
        offsets = []
        for i, (api_key, version, _) in enumerate(plan):
            cid, response = client.receive(api_key, version)
            assert cid == 100 + i
            if api_key == 0:
                part = response.responses[0].partition_responses[0]
                assert part.error_code == 0
                offsets.append(part.base_offset)
        assert offsets == [0, 400, 403]
        stored = list(iter_batches(client.fetch_all(topic)))
    assert [b.record_count for b in stored] == [400, 3, 900]


def test_disconnect_inside_a_large_frame(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        topic = _topic(client)
    frame = _frame(_produce(topic, _batch(1_000, 500, b"e")), 9, 1)
    with socket.create_connection((broker.host, broker.port)) as sock:
        sock.sendall(frame[: len(frame) // 2])
    with WireClient(broker.bootstrap) as client:
        assert client.request(ApiVersionsRequest(), 0).error_code == 0
        assert client.fetch_all(topic) == b""  # the cut request was never applied


def test_answers_still_come_after_the_client_stops_sending(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        topic = _topic(client)
        client.send_raw(_frame(_produce(topic, _batch(200, 1_000, b"f")), 9, 9))
        client.sock.shutdown(socket.SHUT_WR)
        cid, response = client.receive(0, 9)
        assert cid == 9 and response.responses[0].partition_responses[0].error_code == 0
        assert client.closed_by_peer()
