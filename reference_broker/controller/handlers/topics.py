"""CreateTopics (19), CreatePartitions (37), DeleteTopics (20) on the controller: what brokers
forward to it in cluster mode."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from sdk.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


def _create_topics_error(request: CreateTopicsRequest, code: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        topics=[
            CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=code) for t in request.topics
        ]
    )


def _create_partitions_error(request: CreatePartitionsRequest, code: int) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code)
            for t in request.topics
        ]
    )


def _delete_topics_error(request: DeleteTopicsRequest, code: int) -> DeleteTopicsResponse:
    Result = DeleteTopicsResponse.DeletableTopicResult
    names = [t.name for t in request.topics] if request.topics else list(request.topic_names)
    return DeleteTopicsResponse(responses=[Result(name=name, error_code=code) for name in names])


async def create_topics(broker: Any, ctx: Any, request: CreateTopicsRequest) -> Any:
    return await run(
        broker,
        lambda core, _now: core.replication.create_topics(request),
        lambda code: _create_topics_error(request, code),
    )


async def create_partitions(broker: Any, ctx: Any, request: CreatePartitionsRequest) -> Any:
    return await run(
        broker,
        lambda core, _now: core.replication.create_partitions(request),
        lambda code: _create_partitions_error(request, code),
    )


async def delete_topics(broker: Any, ctx: Any, request: DeleteTopicsRequest) -> Any:
    version = ctx.api_version
    return await run(
        broker,
        lambda core, _now: core.replication.delete_topics(request, version),
        lambda code: _delete_topics_error(request, code),
    )


def install(registry: Any) -> None:
    registry.register(
        CreateTopicsRequest.API_KEY,
        create_topics,
        error_response=lambda req, _v, code: _create_topics_error(req, code),
    )
    registry.register(
        CreatePartitionsRequest.API_KEY,
        create_partitions,
        error_response=lambda req, _v, code: _create_partitions_error(req, code),
    )
    registry.register(
        DeleteTopicsRequest.API_KEY,
        delete_topics,
        error_response=lambda req, _v, code: _delete_topics_error(req, code),
    )
