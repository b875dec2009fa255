"""AdminClient's topics, partitions, cluster and configs, on the reference broker and Apache
Kafka, each result read back by confluent-kafka (librdkafka's metadata and AdminClient)."""

from __future__ import annotations

from typing import Any

import confluent_kafka.admin as oracle_admin
import pytest

from sdk.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
)
from sdk.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .conftest import Cluster, oracle_topic, wait_for


def oracle_configs(cluster: Cluster, topic: str) -> dict[str, Any]:
    resource = oracle_admin.ConfigResource("topic", topic)
    oracle = cluster.oracle()  # kept alive until its answer is in
    futures = oracle.describe_configs([resource], request_timeout=10)
    entries = futures[resource].result(timeout=15)
    return {name: entry.value for name, entry in entries.items()}


async def test_create_topics_answers_per_topic_and_the_cluster_has_them(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    first, second = name("t1"), name("t2")
    answers = await admin.create_topics(
        [NewTopic(first, 3, 1, topic_configs={"retention.ms": "123456"}), NewTopic(second, 2, 1)]
    )
    assert answers == {first: None, second: None}
    meta = wait_for(lambda: oracle_topic(cluster, first), f"{first} in metadata")
    assert sorted(meta.partitions) == [0, 1, 2]
    assert sorted(wait_for(lambda: oracle_topic(cluster, second), second).partitions) == [0, 1]
    assert oracle_configs(cluster, first)["retention.ms"] == "123456"

    third = name("t3")
    again = await admin.create_topics([NewTopic(first, 3, 1), NewTopic(third, 1, 1)])
    assert isinstance(again[first], TopicAlreadyExistsError)
    assert again[third] is None
    wait_for(lambda: oracle_topic(cluster, third), f"{third} in metadata")


async def test_create_topics_validate_only_and_bad_replication(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic = name("v")
    assert await admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True) == {topic: None}
    bad = await admin.create_topics([NewTopic(name("r"), 1, 5)])
    assert isinstance(next(iter(bad.values())), InvalidReplicationFactorError)
    assert topic not in await admin.list_topics()
    assert oracle_topic(cluster, topic) is None


async def test_describe_and_list_topics_match_the_oracle(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic, missing = name("d"), name("missing")
    assert (await admin.create_topics([NewTopic(topic, 3, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)

    described = await admin.describe_topics([topic, missing])
    assert isinstance(described[missing].error, UnknownTopicOrPartitionError)
    mine = described[topic]
    assert mine.error is None and not mine.is_internal and mine.topic_id is not None
    oracle = oracle_topic(cluster, topic)
    assert {p.partition: (p.leader, p.replicas) for p in mine.partitions} == {
        p.id: (p.leader, tuple(p.replicas)) for p in oracle.partitions.values()
    }
    listed = await admin.list_topics()
    assert topic in listed and missing not in listed
    assert "__consumer_offsets" not in listed


async def test_delete_topics_per_topic(admin: AdminClient, cluster: Cluster, name: Any) -> None:
    topic, missing = name("del"), name("missing")
    assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    answers = await admin.delete_topics([topic, missing])
    assert answers[topic] is None
    assert isinstance(answers[missing], UnknownTopicOrPartitionError)
    wait_for(lambda: oracle_topic(cluster, topic) is None, f"{topic} gone")


async def test_create_partitions_grows_and_refuses_shrinking(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic, missing = name("grow"), name("missing")
    assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    answers = await admin.create_partitions({topic: NewPartitions(3), missing: NewPartitions(2)})
    assert answers[topic] is None
    assert isinstance(answers[missing], UnknownTopicOrPartitionError)
    wait_for(lambda: len(oracle_topic(cluster, topic).partitions) == 3, f"{topic} with 3 partitions")
    shrink = await admin.create_partitions({topic: NewPartitions(2)})
    assert isinstance(shrink[topic], InvalidPartitionsError)


async def test_describe_cluster_matches_the_oracle(admin: AdminClient, cluster: Cluster) -> None:
    description = await admin.describe_cluster()
    oracle = cluster.oracle().list_topics(timeout=10)
    assert description.cluster_id == oracle.cluster_id
    assert [n.node_id for n in description.nodes] == sorted(oracle.brokers)
    assert description.controller is not None
    assert description.controller.node_id in oracle.brokers


async def test_incremental_alter_and_describe_configs(
    admin: AdminClient, cluster: Cluster, name: Any
) -> None:
    topic = name("cfg")
    assert (await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "500000"})]))[
        topic
    ] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    missing = ConfigResource("topic", name("missing"))
    answers = await admin.incremental_alter_configs(
        {
            resource: [
                AlterConfigOp("max.message.bytes", "65536"),
                AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE),
            ],
            missing: [AlterConfigOp("max.message.bytes", "65536")],
        }
    )
    assert answers[resource] is None
    assert isinstance(answers[missing], UnknownTopicOrPartitionError)
    oracle = oracle_configs(cluster, topic)
    assert oracle["max.message.bytes"] == "65536"
    assert oracle["retention.ms"] == "604800000"  # back to the default

    described = await admin.describe_configs([resource, missing])
    assert isinstance(described[missing].error, UnknownTopicOrPartitionError)
    entries = described[resource].entries
    assert entries["max.message.bytes"].value == "65536" and not entries["max.message.bytes"].is_default
    assert entries["retention.ms"].is_default
    assert {k: v.value for k, v in entries.items() if not v.is_sensitive} == {
        k: v for k, v in oracle.items() if k in entries and not entries[k].is_sensitive
    }
    only = await admin.describe_configs([ConfigResource("topic", topic, {"max.message.bytes": None})])
    assert list(only[resource].entries) == ["max.message.bytes"]


async def test_alter_configs_replaces_the_whole_set(admin: AdminClient, cluster: Cluster, name: Any) -> None:
    topic = name("alter")
    configs = {"retention.ms": "500000", "max.message.bytes": "65536"}
    assert (await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    resource = ConfigResource("TOPIC", topic, {"cleanup.policy": "compact"})
    assert await admin.alter_configs([resource]) == {resource: None}
    oracle = oracle_configs(cluster, topic)
    assert oracle["cleanup.policy"] == "compact"
    assert oracle["retention.ms"] == "604800000" and oracle["max.message.bytes"] != "65536"


async def test_broker_configs_go_to_the_broker(admin: AdminClient, cluster: Cluster) -> None:
    node = (await admin.describe_cluster()).nodes[0].node_id
    resource = ConfigResource(ConfigResourceType.BROKER, str(node))
    described = await admin.describe_configs([resource])
    assert described[resource].error is None
    assert "num.partitions" in described[resource].entries


async def test_bad_arguments_raise_at_the_call(admin: AdminClient) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        NewTopic("x", 0)
    with pytest.raises(ValueError, match="replica_assignments"):
        NewTopic("x", 2, 1, replica_assignments={0: [1]})
    with pytest.raises(ValueError, match="total_count"):
        NewPartitions(0)
    with pytest.raises(ValueError, match="resource_type"):
        ConfigResource("table", "x")
    with pytest.raises(ValueError, match="value"):
        AlterConfigOp("retention.ms")
    with pytest.raises(ValueError, match="new_topics"):
        await admin.create_topics(["just-a-name"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="topics"):
        await admin.delete_topics("one-topic")
    with pytest.raises(ValueError, match="config_resources"):
        await admin.describe_configs([ConfigResource("broker", "not-an-id")])
    with pytest.raises(ValueError, match="timeout_ms"):
        await admin.list_topics(timeout_ms=-1)
