"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49): the broker's client quotas
(``reference_broker.quotas``), as ``kafka-configs --entity-type clients|users|ips`` reads and
changes them.

Errors as Kafka's: a bad filter answers INVALID_REQUEST for the whole describe; each altered entity
gets its own error (INVALID_REQUEST with Kafka's message for a bad entity, key or value), and
``validate_only`` checks without storing.

In cluster mode (``controller.quorum.voters`` set) a broker forwards AlterClientQuotas to the
active controller (``controller/client_quota_control.py``), which decides it with
``decide_alterations`` against the committed quotas and writes ClientQuotaRecords; every node's
quota store holds its metadata image's quotas, which DescribeClientQuotas and enforcement read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from reference_broker.config import quorum_configured
from reference_broker.quotas import Entity, QuotaError, checked_changes, make_entity
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

DescribeEntry = DescribeClientQuotasResponse.EntryData
AlterEntry = AlterClientQuotasResponse.EntryData


def describe(
    broker: Broker, ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        found = broker.quotas.store.describe(components, request.strict)
    except QuotaError as exc:
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), entries=None
        )
    return DescribeClientQuotasResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        entries=[
            DescribeEntry(
                entity=[DescribeEntry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[DescribeEntry.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            )
            for entity, values in found
        ],
    )


def decide_alterations(
    entries: Iterable[Any],
) -> tuple[list[AlterEntry], list[tuple[Entity, dict[str, float | None]]]]:
    """AlterClientQuotas' answer per entry and the accepted changes (entity, key -> new value or
    None for removal): a bad entity, key or value, or an entity given twice, is refused with
    INVALID_REQUEST and changes nothing. A single node and a cluster's controller both decide
    here (Kafka's ClientQuotaControlManager.alterClientQuotas)."""
    results, accepted = [], []
    seen: set[Entity] = set()
    for entry in entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        code, message = ErrorCode.NONE, None
        try:
            entity = make_entity(pairs)
            if entity in seen:
                raise QuotaError(f"Ignoring duplicate entity {dict(entity)}")
            seen.add(entity)
            ops = [(op.key, op.value, op.remove) for op in entry.ops]
            accepted.append((entity, checked_changes(entity, ops)))
        except QuotaError as exc:
            code, message = ErrorCode.INVALID_REQUEST, str(exc)
        results.append(
            AlterEntry(
                error_code=code,
                error_message=message,
                entity=[AlterEntry.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
            )
        )
    return results, accepted


def alter(
    broker: Broker, ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    results, accepted = decide_alterations(request.entries)
    if not request.validate_only:
        for entity, changes in accepted:
            broker.quotas.store.apply(entity, changes)
    return AlterClientQuotasResponse(entries=results)


async def _forward_alter(
    broker: Broker, ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    from reference_broker.cluster.broker_lifecycle import forward_to_controller

    if not request.entries:
        return AlterClientQuotasResponse(entries=[])
    response: AlterClientQuotasResponse = await forward_to_controller(
        broker, ctx, request, lambda code: alter_error(request, ctx.api_version, code)
    )
    return response


def _describe_error(
    request: DescribeClientQuotasRequest, version: int, code: int
) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(error_code=code, error_message=None, entries=None)


def alter_error(request: AlterClientQuotasRequest, version: int, code: int) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(
        entries=[
            AlterEntry(
                error_code=code,
                error_message=None,
                entity=[
                    AlterEntry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ],
            )
            for entry in request.entries
        ]
    )


def install(registry: HandlerRegistry) -> None:
    registry.register(DescribeClientQuotasRequest.API_KEY, describe, error_response=_describe_error)
    handle: Any = alter
    if registry.broker is not None and quorum_configured(registry.broker.config.settings):
        handle = _forward_alter
    registry.register(AlterClientQuotasRequest.API_KEY, handle, error_response=alter_error)
