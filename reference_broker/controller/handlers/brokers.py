"""BrokerRegistration (62), BrokerHeartbeat (63), AllocateProducerIds (67) and the controllers'
own ControllerRegistration (70, KIP-919)."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
)

#: Kafka's Errors.message() of the codes a ControllerRegistration is refused with before it
#: reaches the controller (its getErrorResponse sets the error's default message)
_DEFAULT_MESSAGES: dict[int, str] = {
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


def _registration_error(code: int) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(error_code=code, broker_epoch=-1)


def _heartbeat_error(code: int) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(error_code=code, is_fenced=True)


def _producer_ids_error(code: int) -> AllocateProducerIdsResponse:
    return AllocateProducerIdsResponse(error_code=code)


def _controller_registration_error(code: int) -> ControllerRegistrationResponse:
    return ControllerRegistrationResponse(error_code=code, error_message=_DEFAULT_MESSAGES.get(code))


async def broker_registration(broker: Any, ctx: Any, request: BrokerRegistrationRequest) -> Any:
    return await run(broker, lambda core, now: core.cluster.register(request, now), _registration_error)


async def broker_heartbeat(broker: Any, ctx: Any, request: BrokerHeartbeatRequest) -> Any:
    return await run(broker, lambda core, now: core.cluster.heartbeat(request, now), _heartbeat_error)


async def allocate_producer_ids(broker: Any, ctx: Any, request: AllocateProducerIdsRequest) -> Any:
    return await run(
        broker, lambda core, _now: core.cluster.allocate_producer_ids(request), _producer_ids_error
    )


async def controller_registration(broker: Any, ctx: Any, request: ControllerRegistrationRequest) -> Any:
    return await run(
        broker, lambda core, _now: core.cluster.register_controller(request), _controller_registration_error
    )


def install(registry: Any) -> None:
    for message, handle, error in (
        (BrokerRegistrationRequest, broker_registration, _registration_error),
        (BrokerHeartbeatRequest, broker_heartbeat, _heartbeat_error),
        (AllocateProducerIdsRequest, allocate_producer_ids, _producer_ids_error),
        (ControllerRegistrationRequest, controller_registration, _controller_registration_error),
    ):
        registry.register(
            message.API_KEY, handle, error_response=lambda _req, _version, code, error=error: error(code)
        )
