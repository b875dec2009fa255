"""InitProducerId (key 22), v0-6.

Without a transactional id (idempotent producers) every request gets a fresh producer id with
epoch 0, as Kafka's TransactionCoordinator does (any producer id/epoch it carries is ignored).
With one, the transaction coordinator answers (``coordinator/txn``): the id's producer id with
its epoch bumped (older producers fenced); an open transaction of the previous producer aborted
first, with a fencing epoch (the markers are written in-process, so the answer comes at once;
only a failed marker append answers CONCURRENT_TRANSACTIONS until the retry succeeds, where Kafka
always answers it and lets the client retry); KIP-360's bump with the current producer id and
epoch (v3+); transaction.max.timeout.ms checked. PRODUCER_FENCED is sent as
INVALID_PRODUCER_EPOCH before v4 (KIP-588). v6's two-phase commit (KIP-939, ``enable2_pc``) is
not enabled on this broker: such a request gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
answers with transaction.two.phase.commit.enable off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.handlers.transactions import fenced_for
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = InitProducerIdRequest.API_KEY


def handle(broker: Broker, ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is None:
        return InitProducerIdResponse(producer_id=broker.producer_ids.next_id(), producer_epoch=0)
    coordinator = broker.transaction_coordinator
    if coordinator is None:
        return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if ctx.api_version >= 6 and (request.enable2_pc or request.keep_prepared_txn):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    expected = (request.producer_id, request.producer_epoch) if ctx.api_version >= 3 else (-1, -1)
    result = coordinator.init_producer_id(request.transactional_id, request.transaction_timeout_ms, *expected)
    if result.error:
        return InitProducerIdResponse(error_code=fenced_for(result.error, ctx.api_version, 4))
    return InitProducerIdResponse(producer_id=result.producer_id, producer_epoch=result.producer_epoch)


def error_response(request: InitProducerIdRequest, version: int, code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code)


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
