"""CLUSTER_ACTION on the requests brokers send each other, checked as Kafka's KafkaApis checks
it when an authorizer is configured.

On broker listeners, a follower's Fetch (``replica_id`` >= 0) from a principal without
CLUSTER_ACTION on the cluster gets TOPIC_AUTHORIZATION_FAILED for every partition it asked for
(KafkaApis.handleFetchRequest), so the follower never replicates. The controller listener's
checks, CLUSTER_ACTION on what only nodes send among them, are
``reference_broker.controller.authorization``'s.

WriteTxnMarkers and AddPartitionsToTxn v4+ are checked by their own handlers. The nodes'
principals (their certificate's DN, their SASL user) are expected in ``super.users``, as in
Kafka's secured clusters; the sending side logs a refusal (``inter_broker``), so a principal
missing there is visible in the node's log, not only as a cluster that never forms.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import FetchRequest, FetchResponse


def install_broker_checks(registry: Any) -> None:
    """Follower fetches on a broker listener need CLUSTER_ACTION."""
    registry.guard(FetchRequest.API_KEY, _follower_fetch_guard)


def _allowed(broker: Any, ctx: Any) -> bool:
    from reference_broker.handlers.auth import Operation, authorize_cluster

    return broker.authorizer is None or authorize_cluster(broker, ctx, Operation.CLUSTER_ACTION)


Refusal = Callable[[Any, Any, Any], Any]


def _behind(refusal: Refusal, handle: Callable[..., Any]) -> Callable[..., Any]:
    """``handle`` answering ``refusal``'s response instead when there is one, kept a plain
    ``def`` or an ``async def`` as it was (the registry runs plain ones without awaiting)."""
    if inspect.iscoroutinefunction(handle):

        async def guarded_async(broker: Any, ctx: Any, request: Any) -> Any:
            refused = refusal(broker, ctx, request)
            return refused if refused is not None else await handle(broker, ctx, request)

        return guarded_async

    def guarded_sync(broker: Any, ctx: Any, request: Any) -> Any:
        refused = refusal(broker, ctx, request)
        return refused if refused is not None else handle(broker, ctx, request)

    return guarded_sync


def _follower_fetch_guard(handle: Callable[..., Any]) -> Callable[..., Any]:
    return _behind(_follower_fetch_refusal, handle)


def _follower_fetch_refusal(broker: Any, ctx: Any, request: FetchRequest) -> FetchResponse | None:
    from reference_broker.replication.leader_fetch import follower_id

    if follower_id(request, ctx.api_version) < 0 or _allowed(broker, ctx):
        return None
    return FetchResponse(
        error_code=E.NONE,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic=topic.topic,
                topic_id=topic.topic_id,
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=p.partition,
                        error_code=E.TOPIC_AUTHORIZATION_FAILED,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ],
    )
