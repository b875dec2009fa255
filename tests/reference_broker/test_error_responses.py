"""A request whose handler fails is answered with the API's error response, and the connection
stays usable: every API the broker serves has an error builder (closing the connection is left
to the one case where the client reads no answer, Produce with acks=0)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from pathlib import Path
from typing import Any

from reference_broker.broker import Broker
from reference_broker.config import BrokerConfig
from reference_broker.handlers import HandlerRegistry, install_all
from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    ApiVersionsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
)


def test_every_registered_api_has_an_error_builder() -> None:
    registry = HandlerRegistry(None)  # type: ignore[arg-type]  # only the table is read
    install_all(registry)
    missing = [h.api_key for h in registry.advertised() if h.error_response is None]
    assert missing == []


def _fail(*args: object) -> None:
    raise RuntimeError("handler failure forced by the test")


async def _failing_request_then_api_versions(broker: Broker, request: Any, version: int) -> Any:
    """Send ``request`` (its handler raises) and an ApiVersions behind it on one connection; the
    error answer to the first, after checking the second is answered too."""
    reader, writer = await asyncio.open_connection(broker.host, broker.port)
    try:
        for correlation_id, (req, v) in enumerate([(request, version), (ApiVersionsRequest(), 0)], start=1):
            payload = encode_request(req, v, correlation_id, "error-responses")
            writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        _, failed = decode_response(type(request).API_KEY, version, await reader.readexactly(size))
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        versions: Any = decode_response(ApiVersionsRequest.API_KEY, 0, await reader.readexactly(size))[1]
        assert versions.error_code == ErrorCode.NONE
        return failed
    finally:
        writer.close()


async def _with_failing_handler(tmp_path: Path, request: Any, version: int) -> Any:
    config = BrokerConfig.build(tmp_path, port=0)
    async with Broker(config) as broker:
        api_key = type(request).API_KEY
        handler = broker.registry._handlers[api_key]
        broker.registry._handlers[api_key] = dataclasses.replace(handler, handle=_fail, synchronous=True)
        return await _failing_request_then_api_versions(broker, request, version)


async def test_failing_describe_transactions_answers_each_id_with_an_error(tmp_path: Path) -> None:
    request = DescribeTransactionsRequest(transactional_ids=["txn-a", "txn-b"])
    answer = await _with_failing_handler(tmp_path, request, 0)
    assert [(s.transactional_id, s.error_code) for s in answer.transaction_states] == [
        ("txn-a", ErrorCode.UNKNOWN_SERVER_ERROR),
        ("txn-b", ErrorCode.UNKNOWN_SERVER_ERROR),
    ]


async def test_failing_describe_producers_answers_each_partition_with_an_error(tmp_path: Path) -> None:
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name="orders", partition_indexes=[0, 2])]
    )
    answer = await _with_failing_handler(tmp_path, request, 0)
    assert [
        (t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions
    ] == [("orders", 0, ErrorCode.UNKNOWN_SERVER_ERROR), ("orders", 2, ErrorCode.UNKNOWN_SERVER_ERROR)]

