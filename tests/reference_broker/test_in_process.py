"""The in-process forms (``async with Broker`` and ``run_in_process``) and failure handling inside it."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from pathlib import Path

import pytest

from reference_broker.broker import Broker
from reference_broker.config import BrokerConfig
from reference_broker.testing import run_in_process
from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import ApiVersionsRequest, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest
from tests.reference_broker.wire import WireClient


async def roundtrip(host: str, port: int, request: object, version: int, correlation_id: int = 1) -> object:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = encode_request(request, version, correlation_id, "in-process")  # type: ignore[arg-type]
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        cid, response = decode_response(type(request).API_KEY, version, await reader.readexactly(size))  # type: ignore[attr-defined]
        assert cid == correlation_id
        return response
    finally:
        writer.close()


async def test_async_context_manager(tmp_path: Path) -> None:
    config = BrokerConfig.build(tmp_path, port=0, properties={"num.partitions": 2})
    async with Broker(config) as broker:
        assert broker.port != 0
        response = await roundtrip(
            broker.host,
            broker.port,
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="inproc")]),
            12,
        )
        assert len(response.topics[0].partitions) == 2  # type: ignore[attr-defined]
    assert (tmp_path / "inproc-0" / ".clean_shutdown").exists()


async def _explode_async(*args: object) -> None:
    raise RuntimeError("boom")


def _explode(*args: object) -> None:
    raise RuntimeError("boom")


@pytest.mark.parametrize("explode", [_explode, _explode_async], ids=["def", "async-def"])
async def test_handler_exception_answers_unknown_server_error(tmp_path: Path, explode: object) -> None:
    config = BrokerConfig.build(tmp_path, port=0)
    async with Broker(config) as broker:
        handler = broker.registry._handlers[2]
        broker.registry._handlers[2] = dataclasses.replace(
            handler, handle=explode, synchronous=explode is _explode
        )
        request = ListOffsetsRequest(
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="t",
                    partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                )
            ]
        )
        reader, writer = await asyncio.open_connection(broker.host, broker.port)
        for cid, (req, version) in enumerate([(request, 7), (ApiVersionsRequest(), 0)], start=1):
            payload = encode_request(req, version, cid, "x")
            writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, failed = decode_response(2, 7, await reader.readexactly(size))
        assert failed.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        (size,) = struct.unpack(">i", await reader.readexactly(4))  # the connection survived
        _, ok = decode_response(18, 0, await reader.readexactly(size))
        assert ok.error_code == 0
        writer.close()


def test_run_in_process_thread() -> None:
    with (
        run_in_process(config={"auto.create.topics.enable": False}) as runner,
        WireClient(runner.bootstrap) as client,
    ):
        response = client.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")]), 12
        )
        assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert runner.call(lambda: runner.broker.logs.topic("nope")) is None


def _unencodable(*args: object) -> ListOffsetsResponse:
    return ListOffsetsResponse(topics="not a list of topics")  # type: ignore[arg-type]


async def _unencodable_async(*args: object) -> ListOffsetsResponse:
    return _unencodable()


@pytest.mark.parametrize("answer", [_unencodable, _unencodable_async], ids=["def", "async-def"])
async def test_response_that_cannot_be_encoded_closes_only_that_connection(
    tmp_path: Path, answer: object
) -> None:
    """A response (and its error response) the codec refuses: the answers before it still go out,
    then that connection closes; the broker keeps serving others."""
    config = BrokerConfig.build(tmp_path, port=0)
    async with Broker(config) as broker:
        handler = broker.registry._handlers[2]
        broker.registry._handlers[2] = dataclasses.replace(
            handler,
            handle=answer,
            synchronous=answer is _unencodable,
            error_response=lambda request, version, code: _unencodable(),
        )
        reader, writer = await asyncio.open_connection(broker.host, broker.port)
        for cid, (req, version) in enumerate([(ApiVersionsRequest(), 0), (ListOffsetsRequest(), 7)], start=1):
            payload = encode_request(req, version, cid, "x")
            writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, ok = decode_response(18, 0, await reader.readexactly(size))
        assert ok.error_code == 0
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing more sent
        writer.close()
        response = await roundtrip(broker.host, broker.port, ApiVersionsRequest(), 0)
        assert response.error_code == 0  # type: ignore[attr-defined]
