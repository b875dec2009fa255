"""BrokerRegistration (62), BrokerHeartbeat (63), AllocateProducerIds (67)."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from sdk.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)


def _registration_error(code: int) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(error_code=code, broker_epoch=-1)


def _heartbeat_error(code: int) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(error_code=code, is_fenced=True)


def _producer_ids_error(code: int) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(error_code=code)


async def broker_registration(broker: Any, ctx: Any, request: BrokerRegistrationRequest) -> Any:
    return await run(broker, lambda core, now: core.cluster.register(request, now), _registration_error)


async def broker_heartbeat(broker: Any, ctx: Any, request: BrokerHeartbeatRequest) -> Any:
    return await run(broker, lambda core, now: core.cluster.heartbeat(request, now), _heartbeat_error)


async def allocate_producer_ids(broker: Any, ctx: Any, request: AllocateProducerIdsRequest) -> Any:
    return await run(
        broker, lambda core, _now: core.cluster.allocate_producer_ids(request), _producer_ids_error
    )


def install(registry: Any) -> None:
    for message, handle, error in (
        (BrokerRegistrationRequest, broker_registration, _registration_error),
        (BrokerHeartbeatRequest, broker_heartbeat, _heartbeat_error),
        (AllocateProducerIdsRequest, allocate_producer_ids, _producer_ids_error),
    ):
        registry.register(
            message.API_KEY, handle, error_response=lambda _req, _version, code, error=error: error(code)
        )
