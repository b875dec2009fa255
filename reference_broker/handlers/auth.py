"""The handlers' one door to the authorizer: ``authorize(broker, ctx, operation, type, name)``.

Without an authorizer (``authorizer.class.name`` empty) every call is allowed, as in Kafka, and
costs one attribute test. The per-API choice of operation and resource is in each handler, as in
Kafka's KafkaApis; the decision itself is ``reference_broker.security.authorizer``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.security.acl import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.network.server import RequestContext

__all__ = [
    "CLUSTER_NAME",
    "Operation",
    "ResourceType",
    "authorize",
    "authorize_any",
    "authorize_cluster",
    "authorized_operations",
    "topic_denied",
]


def authorize(
    broker: Broker, ctx: RequestContext, operation: Operation, resource_type: ResourceType, name: str
) -> bool:
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    conn = ctx.connection
    return authorizer.authorize(conn.session.principal, conn.peer_host, operation, resource_type, name)


def topic_denied(broker: Broker, ctx: RequestContext, operation: Operation, name: str | None) -> bool:
    """True when an authorizer refuses ``operation`` on topic ``name`` (TOPIC_AUTHORIZATION_FAILED)."""
    if broker.authorizer is None:
        return False
    return not authorize(broker, ctx, operation, ResourceType.TOPIC, name or "")


def authorize_cluster(broker: Broker, ctx: RequestContext, operation: Operation) -> bool:
    return authorize(broker, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorize_any(
    broker: Broker, ctx: RequestContext, operation: Operation, resource_type: ResourceType
) -> bool:
    """Whether the client may do ``operation`` on some resource of the type (Kafka's
    ``authorizeByResourceType``)."""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    conn = ctx.connection
    return authorizer.authorize_any(conn.session.principal, conn.peer_host, operation, resource_type)


def authorized_operations(
    broker: Broker, ctx: RequestContext, resource_type: ResourceType, name: str, everything: int
) -> int:
    """The operations bit field for the resource; ``everything`` without an authorizer."""
    authorizer = broker.authorizer
    if authorizer is None:
        return everything
    conn = ctx.connection
    return authorizer.authorized_operations(conn.session.principal, conn.peer_host, resource_type, name)
