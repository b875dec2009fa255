"""InitProducerId (key 22), idempotent case: a fresh producer id with epoch 0.

Like Kafka's TransactionCoordinator, a request without a transactional id always gets a new id
(any producer id/epoch it carries is ignored). Transactional ids belong to the transaction
coordinator of a later issue, which replaces this registration; until then they are answered with
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = 22


def handle(
    broker: Broker, ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return InitProducerIdResponse(producer_id=broker.producer_ids.next_id(), producer_epoch=0)


def error_response(request: InitProducerIdRequest, version: int, code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code)


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
