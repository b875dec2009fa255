"""AlterConfigs (33) and IncrementalAlterConfigs (44) on the controller: the topic config changes
brokers forward to it in cluster mode."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from sdk.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)


def _error(response_cls: Any, request: Any, code: int) -> Any:
    return response_cls(
        responses=[
            response_cls.AlterConfigsResourceResponse(
                error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
            )
            for r in request.resources
        ]
    )


async def alter_configs(broker: Any, ctx: Any, request: AlterConfigsRequest) -> Any:
    return await run(
        broker,
        lambda core, _now: core.configs.alter_configs(request, incremental=False),
        lambda code: _error(AlterConfigsResponse, request, code),
    )


async def incremental_alter_configs(broker: Any, ctx: Any, request: IncrementalAlterConfigsRequest) -> Any:
    return await run(
        broker,
        lambda core, _now: core.configs.alter_configs(request, incremental=True),
        lambda code: _error(IncrementalAlterConfigsResponse, request, code),
    )


def install(registry: Any) -> None:
    for message, handle, response_cls in (
        (AlterConfigsRequest, alter_configs, AlterConfigsResponse),
        (IncrementalAlterConfigsRequest, incremental_alter_configs, IncrementalAlterConfigsResponse),
    ):
        registry.register(
            message.API_KEY,
            handle,
            error_response=lambda req, _v, code, cls=response_cls: _error(cls, req, code),
        )
