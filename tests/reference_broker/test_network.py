"""The network layer against hostile and unusual input, over raw sockets on the shared broker.

Every test that breaks a connection also checks that a second, well-behaved connection is still
served: one bad client must never take the broker down.
"""

from __future__ import annotations

import os
import socket
import struct
import uuid

import pytest

from reference_broker.testing import BrokerProcess
from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, ProduceRequest
from tests.reference_broker.wire import WireClient, fetch_request


def assert_still_serving(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        response = client.request(ApiVersionsRequest(), 0)
        assert response.error_code == 0


def advertised(response: ApiVersionsResponse) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(broker: BrokerProcess, version: int) -> None:
    request = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0")
    with WireClient(broker.bootstrap) as client:
        response = client.request(request, version)
    assert response.error_code == 0
    apis = advertised(response)
    assert apis[18] == (0, 4)
    for key in (0, 1, 2, 3, 19, 20, 21, 22, 32, 33, 37, 44, 60):
        assert key in apis, key
    # The transaction coordinator's APIs (EndTxn v5: transaction protocol v2).
    assert (apis[24], apis[25], apis[26], apis[28]) == ((0, 5), (0, 4), (0, 5), (0, 5))


def test_api_versions_invalid_software_name(broker: BrokerProcess) -> None:
    request = ApiVersionsRequest(client_software_name="bad name!", client_software_version="1")
    with WireClient(broker.bootstrap) as client:
        assert client.request(request, 3).error_code == ErrorCode.INVALID_REQUEST


def test_api_versions_too_new_gets_v0_fallback(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        header = struct.pack(">hhi", 18, 99, 4242) + struct.pack(">h", 4) + b"test" + b"\x00" * 5
        client.send_raw(struct.pack(">i", len(header)) + header)
        cid, response = decode_response(18, 0, client.read_frame())
        assert cid == 4242
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert advertised(response) == {18: (0, 4)}
        # The connection stays usable: the client retries with a version it now knows.
        retry = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0")
        assert client.request(retry, 3).error_code == 0


def test_unknown_api_key_closes_connection(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        body = struct.pack(">hhi", 999, 0, 7) + struct.pack(">h", -1)
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    assert_still_serving(broker)


def test_unsupported_version_of_known_api_closes_connection(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        body = struct.pack(">hhi", 3, 99, 7) + struct.pack(">h", -1)
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.closed_by_peer()
    assert_still_serving(broker)


@pytest.mark.parametrize("size", [-1, 2**31 - 1, 100 * 1024 * 1024 + 1])
def test_bad_size_prefix_closes_connection(broker: BrokerProcess, size: int) -> None:
    with WireClient(broker.bootstrap) as client:
        client.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert client.closed_by_peer()
    assert_still_serving(broker)


def test_truncated_frame_then_disconnect(broker: BrokerProcess) -> None:
    payload = encode_request(MetadataRequest(topics=None), 12, 1, "t")
    with socket.create_connection((broker.host, broker.port)) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload[: len(payload) // 2])
    assert_still_serving(broker)


def test_body_shorter_than_header_says(broker: BrokerProcess) -> None:
    payload = encode_request(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="x" * 50)]), 12, 1, "t"
    )
    cut = payload[:-20]
    with WireClient(broker.bootstrap) as client:
        client.send_raw(struct.pack(">i", len(cut)) + cut)
        assert client.closed_by_peer()
    assert_still_serving(broker)


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(broker: BrokerProcess, seed: int) -> None:
    junk = os.urandom(64 + seed * 97)
    with WireClient(broker.bootstrap) as client:
        client.send_raw(junk)
        client.closed_by_peer(timeout=1.0)
    assert_still_serving(broker)


def test_random_bytes_inside_valid_frame(broker: BrokerProcess) -> None:
    for api_key, version in [(0, 9), (1, 12), (3, 12), (19, 7), (32, 4)]:
        body = struct.pack(">hhi", api_key, version, 5) + struct.pack(">h", 1) + b"x" + os.urandom(200)
        with WireClient(broker.bootstrap) as client:
            client.send_raw(struct.pack(">i", len(body)) + body)
            try:
                client.read_frame()  # an error answer is acceptable too
            except (ConnectionError, TimeoutError, OSError):
                pass
    assert_still_serving(broker)


def test_pipelined_requests_answered_in_order(broker: BrokerProcess) -> None:
    topic = f"pipeline-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        sent = []
        for i in range(30):
            if i % 3 == 0:
                sent.append(
                    (
                        3,
                        12,
                        client.send(
                            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12
                        ),
                    )
                )
            else:
                sent.append(
                    (
                        18,
                        3,
                        client.send(
                            ApiVersionsRequest(client_software_name="p", client_software_version="1"), 3
                        ),
                    )
                )
        for api_key, version, cid in sent:
            got, _ = client.receive(api_key, version)
            assert got == cid


def test_acks_zero_produce_gets_no_response(broker: BrokerProcess) -> None:
    topic = f"acks0-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        from sdk.records import RecordBatchBuilder

        builder = RecordBatchBuilder()
        builder.append(0, b"k", b"v")
        request = ProduceRequest(
            acks=0,
            timeout_ms=1000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())],
                )
            ],
        )
        client.send(request, 9)
        # The next response on the connection is the ApiVersions one, not a produce response.
        cid = client.send(ApiVersionsRequest(), 0)
        got, _ = client.receive(18, 0)
        assert got == cid


def test_failed_acks_zero_produce_closes_connection(broker: BrokerProcess) -> None:
    from sdk.records import RecordBatchBuilder

    builder = RecordBatchBuilder()
    builder.append(0, b"k", b"v")
    request = ProduceRequest(
        acks=0,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=f"missing-{uuid.uuid4().hex[:8]}",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())],
            )
        ],
    )
    with WireClient(broker.bootstrap) as client:
        client.send(request, 9)
        assert client.closed_by_peer()
    assert_still_serving(broker)


def _frame(request: object, version: int, correlation_id: int) -> bytes:
    payload = encode_request(request, version, correlation_id, "burst")
    return struct.pack(">i", len(payload)) + payload


def test_answers_written_by_the_read_callback_keep_request_order(broker: BrokerProcess) -> None:
    """Synchronous handlers' answers are written straight from the read callback only when
    nothing is queued before them: behind a waiting Fetch they wait their turn, and each burst's
    answers still come back in request order with the produce offsets in request order."""
    from sdk.records import RecordBatchBuilder

    topic = f"burst-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)

        def produce(n: int) -> ProduceRequest:
            builder = RecordBatchBuilder()
            builder.append(0, None, b"record-%d" % n)
            partition = ProduceRequest.PartitionProduceData(index=0, records=builder.build())
            return ProduceRequest(
                acks=-1,
                timeout_ms=1000,
                topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
            )

        # min_bytes is never satisfied here: the fetch waits its whole max_wait.
        waiting_fetch = fetch_request(topic, max_wait_ms=400, min_bytes=1 << 20)
        burst = [
            (0, 9, produce(0)),
            (0, 9, produce(1)),
            (1, 12, waiting_fetch),
            (0, 9, produce(2)),
            (3, 12, MetadataRequest(topics=None)),
            (0, 9, produce(3)),
            (18, 3, ApiVersionsRequest(client_software_name="b", client_software_version="1")),
        ]
        client.send_raw(b"".join(_frame(req, version, cid) for cid, (_, version, req) in enumerate(burst)))
        offsets = []
        for cid, (api_key, version, _) in enumerate(burst):
            got, response = client.receive(api_key, version)
            assert got == cid
            if api_key == 0:
                partition = response.responses[0].partition_responses[0]
                assert partition.error_code == 0
                offsets.append(partition.base_offset)
        assert offsets == [0, 1, 2, 3]
        # And a second burst on the now idle connection is answered the same way.
        client.send_raw(b"".join(_frame(produce(n), 9, 100 + n) for n in range(4, 10)))
        assert [client.receive(0, 9)[0] for _ in range(6)] == list(range(104, 110))
