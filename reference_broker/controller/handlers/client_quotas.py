"""AlterClientQuotas (49) on the controller: what brokers forward to it in cluster mode (authorized
by ``reference_broker.controller.authorization``: ALTER_CONFIGS on the cluster)."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from reference_broker.handlers import client_quotas
from sdk.protocol.messages import AlterClientQuotasRequest


async def alter_client_quotas(broker: Any, ctx: Any, request: AlterClientQuotasRequest) -> Any:
    def error(code: int) -> Any:
        return client_quotas.alter_error(request, ctx.api_version, code)

    return await run(broker, lambda core, _now: core.client_quotas.alter_client_quotas(request), error)


def install(registry: Any) -> None:
    registry.register(
        AlterClientQuotasRequest.API_KEY, alter_client_quotas, error_response=client_quotas.alter_error
    )
