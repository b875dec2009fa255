"""DescribeCluster (key 60): this one node is the whole cluster and its controller.

Versions served and per-version notes:

- v0-2, flexible from v0. v1+ endpoint_type (KIP-919): brokers (1) are described; controller
  endpoints (2) are served only by KRaft controllers' own listeners, so they get
  UNSUPPORTED_ENDPOINT_TYPE. v2's include_fenced_brokers (KIP-1073) changes nothing: this node is
  never fenced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeClusterRequest, DescribeClusterResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = DescribeClusterRequest.API_KEY
ENDPOINT_BROKERS = 1


def handle(
    broker: Broker, ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    if request.endpoint_type != ENDPOINT_BROKERS:
        # Controller endpoints (KIP-919) are only served by KRaft controllers' own listeners.
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            endpoint_type=request.endpoint_type,
            error_message="this listener only describes brokers",
        )
    if getattr(broker, "metadata_publisher", None) is not None:  # cluster mode: the metadata image
        from reference_broker.cluster.metadata_publisher import describe_cluster_response

        return describe_cluster_response(broker, ctx, request)
    advertised = broker.advertised_address(ctx)
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        endpoint_type=ENDPOINT_BROKERS,
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
