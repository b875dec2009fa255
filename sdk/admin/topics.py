"""Topics, partitions and the cluster: CreateTopics, DeleteTopics, CreatePartitions (to the
controller), Metadata and DescribeCluster (to any broker)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sdk.admin.results import ClusterDescription, Node, TopicDescription, TopicPartitionInfo
from sdk.admin.routing import AdminRouter, Deadline, call_once, run_per_item
from sdk.admin.types import NewPartitions, NewTopic
from sdk.errors import ErrorCode, KafkaError, UnsupportedVersionError, make_error
from sdk.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
)

__all__ = [
    "create_partitions",
    "create_topics",
    "delete_topics",
    "describe_cluster",
    "describe_topics",
    "list_topics",
]

#: First DeleteTopics version naming topics in ``topics`` (with optional ids) instead of ``topic_names``.
DELETE_TOPICS_BY_STATE_VERSION = 6
#: DescribeCluster's endpoint type for brokers.
ENDPOINT_BROKERS = 1


def _error(code: int, message: str | None, what: str) -> KafkaError | None:
    return make_error(code, f"{what}: {message}" if message else what) if code else None


async def create_topics(
    router: AdminRouter, new_topics: Sequence[NewTopic], deadline: Deadline, validate_only: bool
) -> dict[str, KafkaError | None]:
    by_name = {topic.name: topic for topic in new_topics}
    T = CreateTopicsRequest.CreatableTopic

    async def send(node: int, names: list[str]) -> dict[str, KafkaError | None]:
        request = CreateTopicsRequest(
            topics=[
                T(
                    name=name,
                    num_partitions=by_name[name].num_partitions,
                    replication_factor=by_name[name].replication_factor,
                    assignments=[
                        T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(brokers))
                        for p, brokers in sorted(by_name[name].replica_assignments.items())
                    ],
                    configs=[
                        T.CreatableTopicConfig(name=k, value=v)
                        for k, v in by_name[name].topic_configs.items()
                    ],
                )
                for name in names
            ],
            timeout_ms=int(deadline.remaining_ms()),
            validate_only=validate_only,
        )
        response, _ = await router.send(node, CreateTopicsRequest.API_KEY, lambda _v: request, deadline)
        return {t.name: _error(t.error_code, t.error_message, f"topic {t.name!r}") for t in response.topics}

    return await run_per_item(
        router,
        by_name,
        deadline,
        route=lambda _name: router.controller(deadline),
        reroute=lambda _name: router.forget_controller(),
        send=send,
    )


async def delete_topics(
    router: AdminRouter, topics: Sequence[str], deadline: Deadline
) -> dict[str, KafkaError | None]:
    async def send(node: int, names: list[str]) -> dict[str, KafkaError | None]:
        def build(version: int) -> DeleteTopicsRequest:
            timeout = int(deadline.remaining_ms())
            if version >= DELETE_TOPICS_BY_STATE_VERSION:
                states = [DeleteTopicsRequest.DeleteTopicState(name=name) for name in names]
                return DeleteTopicsRequest(topics=states, timeout_ms=timeout)
            return DeleteTopicsRequest(topic_names=list(names), timeout_ms=timeout)

        response, _ = await router.send(node, DeleteTopicsRequest.API_KEY, build, deadline)
        return {
            t.name: _error(t.error_code, getattr(t, "error_message", None), f"topic {t.name!r}")
            for t in response.responses
        }

    return await run_per_item(
        router,
        topics,
        deadline,
        route=lambda _name: router.controller(deadline),
        reroute=lambda _name: router.forget_controller(),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )


async def list_topics(router: AdminRouter, deadline: Deadline, include_internal: bool) -> list[str]:
    response = await call_once(
        router, deadline, route=router.any_node, send=lambda _node: router.metadata(None, deadline)
    )
    return sorted(
        t.name
        for t in response.topics
        if t.name and not t.error_code and (include_internal or not t.is_internal)
    )


def _describe(topic: Any) -> TopicDescription | KafkaError:
    if topic.error_code:
        return make_error(topic.error_code, f"topic {topic.name!r}")
    partitions = tuple(
        TopicPartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
        for p in sorted(topic.partitions, key=lambda p: p.partition_index)
    )
    topic_id = topic.topic_id if topic.topic_id is not None and topic.topic_id.int else None
    return TopicDescription(topic.name, topic_id, bool(topic.is_internal), partitions)


async def describe_topics(
    router: AdminRouter, topics: Sequence[str], deadline: Deadline
) -> dict[str, TopicDescription]:
    async def send(_node: int, names: list[str]) -> dict[str, TopicDescription | KafkaError]:
        response = await router.metadata(names, deadline)
        return {t.name: _describe(t) for t in response.topics}

    answers = await run_per_item(
        router,
        topics,
        deadline,
        route=lambda _name: router.any_node(),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
    return {
        name: answer
        if isinstance(answer, TopicDescription)
        else TopicDescription(name, None, False, (), error=answer)
        for name, answer in answers.items()
    }


async def describe_cluster(router: AdminRouter, deadline: Deadline) -> ClusterDescription:
    async def send(node: int) -> ClusterDescription:
        try:
            response, _ = await router.send(
                node,
                DescribeClusterRequest.API_KEY,
                lambda _v: DescribeClusterRequest(endpoint_type=ENDPOINT_BROKERS),
                deadline,
            )
        except UnsupportedVersionError:
            response = await router.metadata([], deadline)
            brokers = [Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
            return _cluster(response.cluster_id, response.controller_id, brokers)
        if response.error_code:
            raise make_error(response.error_code, response.error_message or "DescribeCluster")
        brokers = [Node(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
        return _cluster(response.cluster_id, response.controller_id, brokers)

    return await call_once(router, deadline, route=router.any_node, send=send)


def _cluster(cluster_id: str | None, controller_id: int, brokers: list[Node]) -> ClusterDescription:
    nodes = tuple(sorted(brokers, key=lambda n: n.node_id))
    controller = next((n for n in nodes if n.node_id == controller_id), None)
    return ClusterDescription(cluster_id, controller, nodes)


async def create_partitions(
    router: AdminRouter,
    topic_partitions: Mapping[str, NewPartitions],
    deadline: Deadline,
    validate_only: bool,
) -> dict[str, KafkaError | None]:
    T = CreatePartitionsRequest.CreatePartitionsTopic

    async def send(node: int, names: list[str]) -> dict[str, KafkaError | None]:
        topics = []
        for name in names:
            spec = topic_partitions[name]
            assignments = (
                None
                if spec.new_assignments is None
                else [T.CreatePartitionsAssignment(broker_ids=list(b)) for b in spec.new_assignments]
            )
            topics.append(T(name=name, count=spec.total_count, assignments=assignments))
        request = CreatePartitionsRequest(
            topics=topics, timeout_ms=int(deadline.remaining_ms()), validate_only=validate_only
        )
        response, _ = await router.send(node, CreatePartitionsRequest.API_KEY, lambda _v: request, deadline)
        return {r.name: _error(r.error_code, r.error_message, f"topic {r.name!r}") for r in response.results}

    return await run_per_item(
        router,
        topic_partitions,
        deadline,
        route=lambda _name: router.controller(deadline),
        reroute=lambda _name: router.forget_controller(),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
