"""The coordinators in cluster mode: where a group's coordinator is (Kafka's
``handleFindCoordinatorRequest``), offset commits acknowledged once replicated, and transaction
markers for partitions other nodes lead sent to them (``attach_remote_markers``).

The coordinator of group G is the leader of ``__consumer_offsets`` partition
``abs(hash(G)) % partitions``: a replicated topic the controller creates the first time a client
looks a group up, with ``offsets.topic.num.partitions`` partitions and
``offsets.topic.replication.factor`` replicas. Until it exists and that partition has an alive
leader the answer is COORDINATOR_NOT_AVAILABLE (the client asks again). The leader loads the
partition's groups when it becomes leader (``GroupCoordinatorService.on_leadership``).

The transaction coordinator is still the node a client asks (its ``__transaction_state`` is
local to it); only its markers are cluster-aware so far.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reference_broker.coordinator.group.records import partition_for
from reference_broker.log.config import segment_size_configs
from reference_broker.metadata.image import MetadataImage
from reference_broker.storage import CONSUMER_OFFSETS
from sdk.protocol.errors import ErrorCode as E

log = logging.getLogger("reference_broker.cluster")

#: how long an offset commit waits for the ISR (Kafka's ``offsets.commit.timeout.ms`` default)
COMMIT_TIMEOUT_S = 5.0
#: (error code, message, node id, host, port) of a FindCoordinator answer for one key
CoordinatorAnswer = tuple[int, str | None, int, str, int]


def attach_group_coordinator(broker: Any) -> None:
    """Cluster mode: the group coordinator (``use_replicated_topic`` already called) follows the
    leadership of ``__consumer_offsets``."""
    service = broker.group_service

    def on_leadership(topic: str, partition: int, leads: bool) -> None:
        if topic == CONSUMER_OFFSETS:
            service.on_leadership(partition, leads)

    broker.metadata_publisher.coordinator_listeners.append(on_leadership)


def attach_remote_markers(broker: Any) -> None:
    """Cluster mode: transaction markers of partitions other nodes lead are sent to them."""
    from reference_broker.coordinator.txn.remote_markers import RemoteMarkers

    replicas = broker.replica_manager

    def leader_of(topic: str, partition: int) -> int | None:
        found = broker.metadata_publisher.image.topic(topic)
        registration = found.partitions.get(partition) if found is not None else None
        return registration.leader if registration is not None and registration.leader >= 0 else None

    def is_local_leader(topic: str, partition: int) -> bool:
        part = replicas.partition(topic, partition)
        return part is not None and part.is_leader

    broker.txn_service.remote_markers = RemoteMarkers(
        leader_of=leader_of,
        is_local_leader=is_local_leader,
        send=replicas.channels.send,
        retry_markers=broker.txn_service.coordinator.retry_markers,
    )


def find_group_coordinator(broker: Any, listener: str, group_id: str) -> CoordinatorAnswer:
    """The leader of ``group_id``'s ``__consumer_offsets`` partition, its endpoint on ``listener``."""
    image: MetadataImage = broker.metadata_publisher.image
    topic = image.topic(CONSUMER_OFFSETS)
    if topic is None or not topic.partitions:
        _create_offsets_topic(broker)
        return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
    partition = topic.partitions.get(partition_for(group_id, len(topic.partitions)))
    leader = image.brokers.get(partition.leader) if partition is not None else None
    endpoint = leader.endpoint(listener) if leader is not None and not leader.fenced else None
    if leader is None or endpoint is None:
        return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
    return E.NONE, None, leader.id, endpoint.host, endpoint.port


def _create_offsets_topic(broker: Any) -> None:
    """Ask the controller for ``__consumer_offsets`` without waiting (one request at a time)."""
    if getattr(broker, "_creating_offsets_topic", False):
        return
    from sdk.protocol.messages import CreateTopicsRequest

    config = broker.config
    segments = segment_size_configs(int(config.get("offsets.topic.segment.bytes")))
    configs = {"cleanup.policy": "compact", **segments}
    request = CreateTopicsRequest(
        timeout_ms=30_000,
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=CONSUMER_OFFSETS,
                num_partitions=config.get("offsets.topic.num.partitions"),
                replication_factor=config.get("offsets.topic.replication.factor"),
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
                ],
            )
        ],
    )

    async def create() -> None:
        try:
            response = await broker.controller_channel.send(request)
            for result in response.topics:
                if result.error_code not in (E.NONE, E.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s: %s %s", CONSUMER_OFFSETS, E(result.error_code).name,
                                result.error_message)
        except Exception as exc:  # the client's next FindCoordinator asks again
            log.info("creating %s: %s", CONSUMER_OFFSETS, exc)
        finally:
            broker._creating_offsets_topic = False

    broker._creating_offsets_topic = True
    asyncio.get_running_loop().create_task(create())


def install_replicated_offset_commit(registry: Any) -> None:
    """OffsetCommit in cluster mode answers once the ISR holds the commit (Kafka appends the
    coordinator's records with acks=all, waiting up to ``offsets.commit.timeout.ms``, 5 s by
    default), so a committed offset survives the loss of the coordinator's node."""
    import dataclasses
    import inspect

    from sdk.protocol.messages import OffsetCommitRequest

    handlers = registry._handlers
    handler = handlers[OffsetCommitRequest.API_KEY]
    inner = handler.handle

    async def commit_replicated(broker: Any, ctx: Any, request: Any) -> Any:
        response = inner(broker, ctx, request)
        if inspect.isawaitable(response):
            response = await response
        stored = [p for t in response.topics for p in t.partitions if p.error_code == E.NONE]
        if stored:
            code = await broker.group_service.wait_replicated(request.group_id, COMMIT_TIMEOUT_S)
            for p in stored:
                p.error_code = code
        return response

    handlers[OffsetCommitRequest.API_KEY] = dataclasses.replace(
        handler, handle=commit_replicated, synchronous=False
    )
