"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

Versions served and per-version notes:

- CreateTopics v2-7 (v0-1 are gone since Kafka 4.0): validate_only runs every check and creates
  nothing. v4+ num_partitions and replication_factor may be -1 (the broker's
  ``num.partitions``, and 1). v5+ flexible, and each created topic's configs come back in the
  response (KIP-525), with its topic id (v7).
- DeleteTopics v1-6: v4+ flexible; v5+ error_message per topic; v6+ topics by name or by id
  (KIP-516; an unknown id answers UNKNOWN_TOPIC_ID). With ``delete.topic.enable=false`` the
  answer is TOPIC_DELETION_DISABLED. Fetches waiting on a deleted topic are woken and answer it
  as unknown. The internal topics (``__consumer_offsets``, ``__transaction_state``) answer
  INVALID_TOPIC_EXCEPTION: deleting them would drop every group's offsets and every open
  transaction while the coordinators keep serving from memory. Kafka leaves that refusal to its
  command-line tool; a broker that must lose nothing makes it itself.
- CreatePartitions v0-3: v2+ flexible.

The ``controller_mutation_rate`` client quota (KIP-599) counts the partitions each topic creates,
adds or deletes, checked after the topic's other checks (validate_only included), as Kafka's
controller does. From CreateTopics v6, DeleteTopics v5 and CreatePartitions v3 it is strict: a
topic that comes while the quota is already exhausted gets THROTTLING_QUOTA_EXCEEDED (one that
comes before is done whole, even when it takes the rate past the quota). Older versions are
served whatever the rate. Either way the response carries the throttle time and the connection is
muted for it.

Like Kafka's controller, a CreateTopics asking for more than 10,000 partitions, or for more than
10,000 metadata records (one per topic, partition and config override), is refused whole with
POLICY_VIOLATION, and a CreatePartitions adding more than 10,000 with UNKNOWN_SERVER_ERROR.
Partitions are opened 100 at a time with the event loop yielded between steps (both handlers are
``async def``), so a large creation never holds other clients up; a failed or abandoned one is
undone (``log_manager.TopicCreation``).

One node means one replica: replication factor 1 or -1 (the broker default) is accepted, any
other value gets INVALID_REPLICATION_FACTOR, and manual assignments must name only this node,
once per partition. Validation mirrors Kafka's order so clients see the same error for the
same mistake.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from reference_broker.config import quorum_configured
from reference_broker.handlers.common import error_code_of, error_message_of, find_topic, topic_name_problem
from reference_broker.handlers.configs import check_topic_overrides, describe_topic_configs
from reference_broker.log.log_manager import TopicCreation, TopicMetadata
from reference_broker.quotas import ControllerMutationQuota, quota_identity
from reference_broker.storage import is_internal
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

log = logging.getLogger("reference_broker.topics")
CREATE_TOPICS = CreateTopicsRequest.API_KEY
DELETE_TOPICS = DeleteTopicsRequest.API_KEY
CREATE_PARTITIONS = CreatePartitionsRequest.API_KEY

CreatableResult = CreateTopicsResponse.CreatableTopicResult
DeletableResult = DeleteTopicsResponse.DeletableTopicResult
PartitionsResult = CreatePartitionsResponse.CreatePartitionsTopicResult


#: The first version of each API whose clients know THROTTLING_QUOTA_EXCEEDED: from it on the
#: controller mutation quota refuses topics, below it it only throttles.
STRICT_QUOTA_SINCE = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}
_QUOTA_EXCEEDED = "The throttling quota has been exceeded."


def _mutation_quota(broker: Broker, ctx: RequestContext) -> ControllerMutationQuota | None:
    """The requesting client's ``controller_mutation_rate`` quota for this request, if it has one."""
    quotas = getattr(broker, "quotas", None)
    connection = ctx.connection
    if quotas is None or not quotas.enabled or connection is None:
        return None
    user, client_id = quota_identity(connection.session.principal, ctx.client_id)
    strict = ctx.api_version >= STRICT_QUOTA_SINCE[ctx.api_key]
    return quotas.controller_mutation(user, client_id, strict=strict)


def _mutation_throttle_ms(ctx: RequestContext, quota: ControllerMutationQuota | None) -> int:
    """The throttle time the response carries; the connection is muted for it (KIP-219)."""
    if quota is None:
        return 0
    throttle_ms = quota.throttle_ms()
    if throttle_ms > 0:
        ctx.connection.mute(throttle_ms / 1000)
    return throttle_ms


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _partition_count(broker: Broker, topic: CreateTopicsRequest.CreatableTopic) -> int:
    node = broker.node_id
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        for a in topic.assignments:
            if a.broker_ids != [node]:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Partition {a.partition_index} must be assigned to broker {node} only",
                )
        return len(indexes)
    if topic.replication_factor not in (-1, 1):
        raise _Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {topic.replication_factor} time(s): "
            "The target replication factor of "
            f"{topic.replication_factor} cannot be reached because only 1 broker(s) are registered.",
        )
    if topic.num_partitions == -1:
        return int(broker.config.get("num.partitions"))
    if topic.num_partitions <= 0:
        raise _Refused(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    return topic.num_partitions


#: Kafka's controller refuses a CreateTopics that asks for more partitions than this in one request
#: (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH), and any request whose metadata records
#: (one per topic, partition and config override) would exceed the same number
#: (QuorumController.MAX_RECORDS_PER_USER_OP): a CreatePartitions adding more than that many.
MAX_PARTITIONS_PER_REQUEST = 10_000
MAX_RECORDS_PER_REQUEST = 10_000
_TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
_TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def _requested_partitions(broker: Broker, request: CreateTopicsRequest) -> int:
    """Kafka's count: assignments when given, else num_partitions (-1: the broker default);
    non-positive counts add nothing (they are refused per topic)."""
    total = 0
    default = int(broker.config.get("num.partitions"))
    for topic in request.topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


#: partitions opened between two yields of the event loop while a topic is created or grown
CREATE_STEP_PARTITIONS = 100


async def _run_creation(creation: TopicCreation) -> TopicMetadata:
    """Open a creation's partitions a step at a time, yielding the event loop between steps,
    then make them visible; undone if the request is abandoned (broker stopping)."""
    try:
        while not creation.step(CREATE_STEP_PARTITIONS):
            await asyncio.sleep(0)
    except asyncio.CancelledError:
        creation.abort()
        raise
    return creation.commit()


async def create_topics(
    broker: Broker, ctx: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    partitions_asked = _requested_partitions(broker, request)
    refusal = None
    if partitions_asked > MAX_PARTITIONS_PER_REQUEST:
        refusal = _TOO_MANY_PARTITIONS
    elif partitions_asked + sum(1 + len(t.configs) for t in request.topics) > MAX_RECORDS_PER_REQUEST:
        refusal = _TOO_MANY_RECORDS
    if refusal is not None:
        return CreateTopicsResponse(topics=[
            CreatableResult(name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=refusal)
            for t in request.topics
        ])
    counts = Counter(t.name for t in request.topics)
    quota = _mutation_quota(broker, ctx)
    results = []
    for topic in request.topics:
        result = CreatableResult(name=topic.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(result)
        try:
            if counts[topic.name] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            problem = topic_name_problem(topic.name)
            if problem:
                raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
            if broker.logs.topic(topic.name) is not None:
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
            partitions = _partition_count(broker, topic)
            overrides = {c.name: c.value for c in topic.configs}
            try:
                check_topic_overrides(overrides, broker.logs.manager.default_config)
            except ValueError as exc:
                raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
            if quota is not None and not quota.admit(partitions):
                raise _Refused(ErrorCode.THROTTLING_QUOTA_EXCEEDED, _QUOTA_EXCEEDED)
            if request.validate_only:
                info = None
            else:
                info = await _run_creation(broker.logs.begin_create_topic(topic.name, partitions, overrides))
                log.info("created topic %s (%d partitions, id %s)", topic.name, partitions, info.topic_id)
        except _Refused as refused:
            result.error_code, result.error_message = refused.code, refused.message
            continue
        except KafkaError as exc:  # refused by the log manager (e.g. a name colliding via '.'/'_')
            log.info("topic %s not created: %s", topic.name, exc)
            result.error_code, result.error_message = error_code_of(exc), error_message_of(exc)
            continue
        except Exception as exc:
            log.exception("creating topic %s failed", topic.name)
            result.error_code, result.error_message = error_code_of(exc), error_message_of(exc)
            continue
        result.num_partitions = partitions
        result.replication_factor = 1
        if info is not None:
            result.topic_id = info.topic_id
        if ctx.api_version >= 5:
            result.configs = [
                CreateTopicsResponse.CreatableTopicConfigs(
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    config_source=c.config_source,
                    is_sensitive=c.is_sensitive,
                )
                for c in describe_topic_configs(broker, topic.name if info else None, overrides)
            ]
    return CreateTopicsResponse(topics=results, throttle_time_ms=_mutation_throttle_ms(ctx, quota))


def create_topics_error(request: CreateTopicsRequest, version: int, code: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        topics=[CreatableResult(name=t.name, error_code=code) for t in request.topics]
    )


def _delete_targets(request: DeleteTopicsRequest, version: int) -> list[tuple[str | None, uuid.UUID | None]]:
    if version >= 6:
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, None) for name in request.topic_names]


def delete_topics(
    broker: Broker, ctx: RequestContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    quota = _mutation_quota(broker, ctx)
    results = []
    for name, topic_id in _delete_targets(request, ctx.api_version):
        info, missing = find_topic(broker, name, topic_id)
        result = DeletableResult(name=name, error_code=ErrorCode.NONE)
        if topic_id is not None:
            result.topic_id = topic_id
        if info is None:
            result.error_code = missing
            result.error_message = (
                "This server does not host this topic ID."
                if (missing == ErrorCode.UNKNOWN_TOPIC_ID)
                else "This server does not host this topic-partition."
            )
        elif not broker.config.get("delete.topic.enable"):
            result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
            result.error_message = "Topic deletion is disabled."
        elif is_internal(info.name):
            result.name, result.topic_id = info.name, info.topic_id
            result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
            result.error_message = f"Topic {info.name} is an internal topic and cannot be deleted."
        elif quota is not None and not quota.admit(info.num_partitions):
            result.name, result.topic_id = info.name, info.topic_id
            result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, _QUOTA_EXCEEDED
        else:
            result.name, result.topic_id = info.name, info.topic_id
            try:
                broker.logs.delete_topic(info.name)
                log.info("deleted topic %s", info.name)
            except Exception as exc:
                log.exception("deleting topic %s failed", info.name)
                result.error_code, result.error_message = error_code_of(exc), error_message_of(exc)
            for p in range(info.num_partitions):
                broker.waiters.notify((info.name, p))
        results.append(result)
    return DeleteTopicsResponse(responses=results, throttle_time_ms=_mutation_throttle_ms(ctx, quota))


def delete_topics_error(request: DeleteTopicsRequest, version: int, code: int) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        responses=[
            DeletableResult(name=name, error_code=code) for name, _ in _delete_targets(request, version)
        ]
    )


async def create_partitions(
    broker: Broker, ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    added = 0
    for topic in request.topics:
        known = broker.logs.topic(topic.name)
        if known is not None and topic.count > known.num_partitions:
            added += topic.count - known.num_partitions
    if added > MAX_RECORDS_PER_REQUEST:
        # Kafka's controller fails the whole request on its record bound, without a message.
        return create_partitions_error(request, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    counts = Counter(t.name for t in request.topics)
    quota = _mutation_quota(broker, ctx)
    results = []
    for topic in request.topics:
        result = PartitionsResult(name=topic.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(result)
        info = broker.logs.topic(topic.name)
        if counts[topic.name] > 1:
            result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic name."
        elif info is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"The topic '{topic.name}' does not exist."
        elif topic.count < info.num_partitions:
            result.error_code = ErrorCode.INVALID_PARTITIONS
            result.error_message = (
                f"The topic {topic.name} currently has {info.num_partitions} partition(s); "
                f"{topic.count} would not be an increase."
            )
        elif topic.count == info.num_partitions:
            result.error_code = ErrorCode.INVALID_PARTITIONS
            result.error_message = f"Topic already has {info.num_partitions} partition(s)."
        elif topic.assignments is not None and (
            len(topic.assignments) != topic.count - info.num_partitions
            or any(a.broker_ids != [broker.node_id] for a in topic.assignments)
        ):
            result.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
            result.error_message = (
                f"Each of the {topic.count - info.num_partitions} new partitions must be "
                f"assigned to broker {broker.node_id} only."
            )
        elif quota is not None and not quota.admit(topic.count - info.num_partitions):
            result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, _QUOTA_EXCEEDED
        elif not request.validate_only:
            try:
                await _run_creation(broker.logs.begin_add_partitions(topic.name, topic.count))
                log.info("topic %s now has %d partitions", topic.name, topic.count)
            except Exception as exc:
                log.exception("adding partitions to %s failed", topic.name)
                result.error_code, result.error_message = error_code_of(exc), error_message_of(exc)
    return CreatePartitionsResponse(results=results, throttle_time_ms=_mutation_throttle_ms(ctx, quota))


def create_partitions_error(
    request: CreatePartitionsRequest, version: int, code: int
) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        results=[PartitionsResult(name=t.name, error_code=code) for t in request.topics]
    )


def install(registry: HandlerRegistry) -> None:
    if registry.broker is not None and quorum_configured(registry.broker.config.settings):
        from reference_broker.cluster.broker_lifecycle import install_forwarding  # cluster mode

        install_forwarding(registry, {
            CREATE_TOPICS: create_topics_error,
            DELETE_TOPICS: delete_topics_error,
            CREATE_PARTITIONS: create_partitions_error,
        })
        return
    registry.register(CREATE_TOPICS, create_topics, error_response=create_topics_error)
    registry.register(DELETE_TOPICS, delete_topics, error_response=delete_topics_error)
    registry.register(CREATE_PARTITIONS, create_partitions, error_response=create_partitions_error)
