"""Metadata (key 3): this node as the only broker, controller and leader of every partition.

Topics unknown by name are auto-created when both the broker (``auto.create.topics.enable``)
and the request (``allow_auto_topic_creation``, v4+) allow it. Creation is synchronous here, so
the new topic is reported ready in the same response, where Kafka would first answer
LEADER_NOT_AVAILABLE; clients treat both the same way.

With an authorizer, as Kafka's KafkaApis: a topic the client may not DESCRIBE is left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (whether it exists or not);
auto-creation needs CREATE on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED); the
authorized operations are the client's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reference_broker.handlers.auth import (
    CLUSTER_NAME,
    Operation,
    ResourceType,
    authorize,
    authorize_cluster,
    authorized_operations,
    topic_denied,
)
from reference_broker.handlers.common import LEADER_EPOCH, ZERO_UUID, error_code_of, topic_name_problem
from reference_broker.storage import is_internal
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import MetadataRequest, MetadataResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.log.log_manager import TopicMetadata
    from reference_broker.network.server import RequestContext

API_KEY = MetadataRequest.API_KEY
log = logging.getLogger("reference_broker.metadata")
AUTHORIZED_OPS_OMITTED = -(2**31)
# Every operation a single-node, ACL-less broker allows: READ..DESCRIBE_CONFIGS..(bits 3-12).
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Kafka's AclEntry.supportedOperations(CLUSTER): CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
# DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (8096; the token operations are not the
# cluster's), what Metadata and DescribeCluster report without an authorizer.
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition


def topic_entry(
    broker: Broker, info: TopicMetadata, include_ops: bool, ctx: RequestContext | None = None
) -> MetadataResponse.MetadataResponseTopic:
    node = broker.node_id
    ops = AUTHORIZED_OPS_OMITTED
    if include_ops:
        ops = ALL_TOPIC_OPERATIONS
        if ctx is not None:
            ops = authorized_operations(broker, ctx, ResourceType.TOPIC, info.name, ALL_TOPIC_OPERATIONS)
    return Topic(
        error_code=ErrorCode.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=is_internal(info.name),
        partitions=partition_entries(Partition, node, range(info.num_partitions)),
        topic_authorized_operations=ops,
    )


def partition_entries(
    partition_class: Any, node: int, indexes: range, *, with_elr: bool = False
) -> list[Any]:
    """The entries of partitions ``indexes`` as Metadata and DescribeTopicPartitions answer them:
    this single ``node`` leads each one at the fixed leader epoch and is its only, in-sync, replica.
    ``with_elr`` adds the KIP-966 fields (no eligible leader replicas, none last known)."""
    extra: Callable[[], dict[str, Any]] = (
        (lambda: {"eligible_leader_replicas": [], "last_known_elr": []}) if with_elr else dict
    )
    return [
        partition_class(
            error_code=ErrorCode.NONE,
            partition_index=p,
            leader_id=node,
            leader_epoch=LEADER_EPOCH,
            replica_nodes=[node],
            isr_nodes=[node],
            offline_replicas=[],
            **extra(),
        )
        for p in indexes
    ]


def _named(
    broker: Broker, ctx: RequestContext, name: str, allow_create: bool, include_ops: bool
) -> MetadataResponse.MetadataResponseTopic:
    if topic_denied(broker, ctx, Operation.DESCRIBE, name):
        return Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name)
    info = broker.logs.topic(name)
    if info is not None:
        return topic_entry(broker, info, include_ops, ctx)
    problem = topic_name_problem(name)
    if problem:
        return Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name)
    if not (allow_create and broker.config.get("auto.create.topics.enable")):
        return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
    if broker.authorizer is not None and not (
        authorize_cluster(broker, ctx, Operation.CREATE)
        or authorize(broker, ctx, Operation.CREATE, ResourceType.TOPIC, name)
    ):
        return Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name)
    try:
        info = broker.logs.create_topic(name, broker.config.get("num.partitions"), {})
    except Exception as exc:
        log.warning("auto-creating topic %r failed: %s", name, exc)
        return Topic(error_code=error_code_of(exc), name=name)
    log.info("auto-created topic %s with %d partitions", name, info.num_partitions)
    return topic_entry(broker, info, include_ops, ctx)


def handle(broker: Broker, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    if getattr(broker, "metadata_publisher", None) is not None:  # cluster mode: the metadata image
        from reference_broker.cluster.metadata_publisher import metadata_response

        return metadata_response(broker, ctx, request)
    include_ops = bool(request.include_topic_authorized_operations)
    version = ctx.api_version
    if request.topics is None or (version == 0 and not request.topics):
        topics = [
            topic_entry(broker, info, include_ops, ctx)
            for info in broker.logs.topics()
            if not topic_denied(broker, ctx, Operation.DESCRIBE, info.name)
        ]
    else:
        allow_create = request.allow_auto_topic_creation if version >= 4 else True
        topics = []
        for wanted in request.topics:
            if wanted.name is None:
                info = broker.logs.topic_by_id(wanted.topic_id)
                if info is None or topic_denied(broker, ctx, Operation.DESCRIBE, info.name):
                    topics.append(
                        Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
                    )
                else:
                    topics.append(topic_entry(broker, info, include_ops, ctx))
            else:
                topics.append(_named(broker, ctx, wanted.name, allow_create, include_ops))
    advertised = broker.advertised_address(ctx)
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=broker.node_id,
                host=advertised[0],
                port=advertised[1],
                rack=broker.config.get("broker.rack"),
            )
        ],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=topics,
        cluster_authorized_operations=(
            authorized_operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME, ALL_CLUSTER_OPERATIONS)
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPS_OMITTED
        ),
    )


def error_response(request: MetadataRequest, version: int, code: int) -> MetadataResponse:
    if version >= 13:
        return MetadataResponse(error_code=code)
    topics = [
        Topic(error_code=code, name=t.name, topic_id=t.topic_id or ZERO_UUID) for t in request.topics or []
    ]
    return MetadataResponse(topics=topics)


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)
