"""DescribeTopicPartitions (key 75, KIP-966): topic metadata with a partition limit and a cursor.

Kafka 4's ``kafka-topics --describe`` and admin clients use it instead of Metadata, so that a
topic of many partitions can be read in pages. As Kafka's ``DescribeTopicPartitionsRequestHandler``
and ``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``:

- Topics are answered in name order, starting at the cursor's topic (and, for that topic, at the
  cursor's partition); named topics must include the cursor's topic (else INVALID_REQUEST).
- At most ``min(ResponsePartitionLimit, max.request.partition.size.limit)`` partitions are
  answered; ``NextCursor`` then names the first partition left out (a topic cut short, or the
  next topic at partition 0 when the limit ends exactly at a topic's end).
- A named topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (after the others, with
  a zero id), one that does not exist UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  invalid name); asking for every topic (an empty list) leaves out both kinds.
- This single node leads every partition with no eligible leader replicas: ELR and last known ELR
  are empty lists, as on a Kafka node without ELR. In cluster mode the partitions' leaders,
  replicas and ISR come from the metadata image, as Metadata's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.handlers.auth import Operation, ResourceType, authorize, authorized_operations
from reference_broker.handlers.common import ZERO_UUID, topic_name_problem
from reference_broker.handlers.metadata import ALL_TOPIC_OPERATIONS, partition_entries
from reference_broker.storage import is_internal
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = DescribeTopicPartitionsRequest.API_KEY
Response = DescribeTopicPartitionsResponse
Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition


class InvalidCursorError(ValueError):
    """The cursor names a topic the request does not ask for."""


def describe(
    broker: Broker, ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {info.name for info in broker.logs.topics() if info.name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise InvalidCursorError(f"the topic list must contain the cursor's topic {cursor.topic_name!r}")

    denied: list[DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic] = []
    allowed = []
    for name in sorted(names):
        if authorize(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
            allowed.append(name)
        elif not fetch_all:
            denied.append(
                Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID)
            )

    limit = min(broker.config.get("max.request.partition.size.limit"), request.response_partition_limit)
    remaining = limit
    topics = []
    next_cursor = None
    for name in allowed:
        if remaining <= 0:
            next_cursor = Response.Cursor(topic_name=name, partition_index=0)
            break
        info = broker.logs.topic(name)
        if info is None:
            if not fetch_all:
                code = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if topic_name_problem(name)
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                topics.append(
                    Topic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=is_internal(name))
                )
            continue
        first = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        end = min(info.num_partitions, first + remaining)
        topics.append(
            Topic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=info.topic_id,
                is_internal=is_internal(name),
                partitions=_partition_entries(broker, ctx, name, range(first, end)),
                topic_authorized_operations=authorized_operations(
                    broker, ctx, ResourceType.TOPIC, name, ALL_TOPIC_OPERATIONS
                ),
            )
        )
        if end < info.num_partitions:
            next_cursor = Response.Cursor(topic_name=name, partition_index=end)
            break
        remaining -= end - first
    return Response(topics=topics + denied, next_cursor=next_cursor)


def _partition_entries(broker: Broker, ctx: RequestContext, name: str, indexes: range) -> list[Partition]:
    """The single node's own entries, or in cluster mode the metadata image's (as Metadata)."""
    if getattr(broker, "metadata_publisher", None) is not None:
        from reference_broker.cluster.metadata_publisher import describe_partition_view

        return [Partition(**fields) for fields in describe_partition_view(broker, ctx, name, indexes)]
    return partition_entries(Partition, broker.node_id, indexes, with_elr=True)


def handle(
    broker: Broker, ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    try:
        return describe(broker, ctx, request)
    except InvalidCursorError:
        return error_response(request, ctx.api_version, ErrorCode.INVALID_REQUEST)


def error_response(
    request: DescribeTopicPartitionsRequest, version: int, code: int
) -> DescribeTopicPartitionsResponse:
    """Kafka's error answer: every requested topic with the error code."""
    return Response(topics=[Topic(error_code=code, name=t.name, topic_id=ZERO_UUID) for t in request.topics])


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
