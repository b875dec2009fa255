"""InitProducerId (key 22), v0-6.

Without a transactional id (idempotent producers) every request gets a fresh producer id with
epoch 0, as Kafka's TransactionCoordinator does (any producer id/epoch it carries is ignored).
With one, the transaction coordinator answers (``coordinator/txn``): the id's producer id with
its epoch bumped (older producers fenced); an open transaction of the previous producer aborted
first, with a fencing epoch (the markers are written in-process, so the answer comes at once;
only a failed marker append answers CONCURRENT_TRANSACTIONS until the retry succeeds, where Kafka
always answers it and lets the client retry); KIP-360's bump with the current producer id and
epoch (v3+); transaction.max.timeout.ms checked. PRODUCER_FENCED is sent as
INVALID_PRODUCER_EPOCH before v4 (KIP-588).

v6 is KIP-939's two-phase commit, served and advertised only with the broker's
``transaction.two.phase.commit.enable`` (Kafka 4.1 advertises v6 only with its unstable versions
enabled; without either, a client sees v5 and knows two-phase commit is not offered). A v6
request without ``enable2_pc`` is an ordinary InitProducerId; ``enable2_pc`` on a broker without
the setting (reachable only in-process) is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Kafka's answer.
A 2PC transaction has no timeout (the request's is ignored). ``keep_prepared_txn`` keeps an
ongoing 2PC transaction (INVALID_TXN_STATE if the ongoing one is not 2PC) and answers its
producer id and epoch as OngoingTxnProducerId/Epoch (-1/-1 when none was open); it needs
``enable2_pc`` too (INVALID_REQUEST otherwise).
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
    enable_2pc = ctx.api_version >= 6 and request.enable2_pc
    keep_prepared = ctx.api_version >= 6 and request.keep_prepared_txn
    if enable_2pc and not broker.config.get("transaction.two.phase.commit.enable"):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if keep_prepared and not enable_2pc:
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
    expected = (request.producer_id, request.producer_epoch) if ctx.api_version >= 3 else (-1, -1)
    result = coordinator.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        *expected,
        enable_2pc=enable_2pc,
        keep_prepared=keep_prepared,
    )
    if result.error:
        return InitProducerIdResponse(error_code=fenced_for(result.error, ctx.api_version, 4))
    return InitProducerIdResponse(
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_producer_epoch,
    )


def error_response(request: InitProducerIdRequest, version: int, code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code)


def _enabled_max(broker: Broker) -> int:
    return 6 if broker.config.get("transaction.two.phase.commit.enable") else 5


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response, enabled_max=_enabled_max)
