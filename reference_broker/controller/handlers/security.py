"""CreateAcls (30), DeleteAcls (31) and AlterUserScramCredentials (51) on the controller: what
brokers forward to it in cluster mode (authorized by ``reference_broker.controller.authorization``:
ALTER on the cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference_broker.controller.handlers._common import run
from reference_broker.handlers import acls, scram_credentials
from sdk.protocol.messages import AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest


def _error(build: Callable[[Any, int, int], Any], request: Any, version: int) -> Callable[[int], Any]:
    return lambda code: build(request, version, code)


async def create_acls(broker: Any, ctx: Any, request: CreateAclsRequest) -> Any:
    error = _error(acls.create_error, request, ctx.api_version)
    return await run(broker, lambda core, _now: core.acls.create_acls(request), error)


async def delete_acls(broker: Any, ctx: Any, request: DeleteAclsRequest) -> Any:
    error = _error(acls.delete_error, request, ctx.api_version)
    return await run(broker, lambda core, _now: core.acls.delete_acls(request), error)


async def alter_scram_credentials(broker: Any, ctx: Any, request: AlterUserScramCredentialsRequest) -> Any:
    error = _error(scram_credentials.alter_error, request, ctx.api_version)
    return await run(broker, lambda core, _now: core.scram.alter_credentials(request), error)


def install(registry: Any) -> None:
    registry.register(CreateAclsRequest.API_KEY, create_acls, error_response=acls.create_error)
    registry.register(DeleteAclsRequest.API_KEY, delete_acls, error_response=acls.delete_error)
    registry.register(
        AlterUserScramCredentialsRequest.API_KEY,
        alter_scram_credentials,
        error_response=scram_credentials.alter_error,
    )
