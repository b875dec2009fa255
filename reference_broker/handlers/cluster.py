"""DescribeCluster (key 60): this one node is the whole cluster and its controller.

Versions served and per-version notes:

- v0-2, flexible from v0. v1+ endpoint_type (KIP-919): brokers (1) are described; controller
  endpoints (2) are served only by KRaft controllers' own listeners, so they get
  MISMATCHED_ENDPOINT_TYPE, and any other type UNSUPPORTED_ENDPOINT_TYPE, with Kafka's messages.
  v2's include_fenced_brokers (KIP-1073) changes nothing: this node is never fenced.
- ``include_cluster_authorized_operations``: as Kafka's AuthHelper, the principal's operations on
  the cluster (every one without an authorizer), 0 to a principal that may not DESCRIBE it, and
  the schema's default (-2^31) when not asked; the same on a cluster's brokers and controllers
  (``cluster_authorized_operations``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reference_broker.handlers.auth import (
    CLUSTER_NAME,
    Operation,
    ResourceType,
    authorize_cluster,
    authorized_operations,
)
from reference_broker.handlers.metadata import ALL_CLUSTER_OPERATIONS, AUTHORIZED_OPS_OMITTED
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeClusterRequest, DescribeClusterResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = DescribeClusterRequest.API_KEY
ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2


def cluster_authorized_operations(broker: Any, ctx: Any, request: DescribeClusterRequest) -> int:
    """The answer's ``cluster_authorized_operations`` (Kafka's computeDescribeClusterResponse)."""
    if not request.include_cluster_authorized_operations:
        return AUTHORIZED_OPS_OMITTED
    if not authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return 0
    return authorized_operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME, ALL_CLUSTER_OPERATIONS)


def handle(broker: Broker, ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    if request.endpoint_type != ENDPOINT_BROKERS:
        # As Kafka's AuthHelper: a type it does not know, or controllers (served only by KRaft
        # controllers' own listeners); the answer keeps the schema's default endpoint type.
        known = request.endpoint_type == ENDPOINT_CONTROLLERS
        if ctx.api_version == 0:
            code = ErrorCode.INVALID_REQUEST
        else:
            code = ErrorCode.MISMATCHED_ENDPOINT_TYPE if known else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        message = (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
            if known
            else f"Unsupported endpoint type {request.endpoint_type}"
        )
        return DescribeClusterResponse(error_code=code, error_message=message)
    if getattr(broker, "metadata_publisher", None) is not None:  # cluster mode: the metadata image
        from reference_broker.cluster.metadata_publisher import describe_cluster_response

        return describe_cluster_response(broker, ctx, request)
    advertised = broker.advertised_address(ctx)
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_authorized_operations=cluster_authorized_operations(broker, ctx, request),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.node_id,
                host=advertised[0],
                port=advertised[1],
                rack=broker.config.get("broker.rack"),
            )
        ],
    )


def error_response(request: DescribeClusterRequest, version: int, code: int) -> DescribeClusterResponse:
    return DescribeClusterResponse(error_code=code)


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
