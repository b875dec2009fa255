"""Requests reach the right node: on a three-node Apache Kafka cluster (partition leaders,
group coordinators and brokers spread over the nodes) every per-partition, per-group and
per-broker call answers for every item, read back by confluent-kafka; with one node killed, the
items it served time out at the call's deadline while the others still get their answers, and a
group it coordinated is found again on the node that took it over."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import confluent_kafka
import pytest

from sdk.admin import AdminClient, ConfigResource, ConfigResourceType, NewTopic, OffsetSpec
from sdk.client.cluster import TopicPartition
from sdk.client.coordinators import CoordinatorType
from sdk.errors import KafkaTimeoutError

from .conftest import Cluster, oracle_topic, wait_for

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow]

PARTITIONS = 6
RECORDS = 3


@pytest.fixture
def three_nodes(apache_kafka_factory: Any) -> Any:
    return apache_kafka_factory(nodes=3, **{"offsets.topic.replication.factor": 3})


async def spread_topic(admin: AdminClient, cluster: Cluster, topic: str) -> dict[int, int]:
    """A topic with one replica per partition (so each partition lives on one node only) and
    RECORDS records in each; returns partition -> leader."""
    assert (await admin.create_topics([NewTopic(topic, PARTITIONS, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    for partition in range(PARTITIONS):
        for _ in range(RECORDS):
            producer.produce(topic, value=b"x", partition=partition)
    assert producer.flush(60) == 0
    described = (await admin.describe_topics([topic]))[topic]
    return {p.partition: p.leader for p in described.partitions}


async def test_every_item_reaches_its_leader_coordinator_or_broker(three_nodes: Any, name: Any) -> None:
    cluster = Cluster("apache", three_nodes.bootstrap)
    async with AdminClient(bootstrap_servers=cluster.bootstrap, default_api_timeout_ms=60000) as admin:
        topic = name("spread")
        leaders = await spread_topic(admin, cluster, topic)
        assert len(set(leaders.values())) == 3, leaders
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

        ends = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()))
        assert {tp.partition: r.offset for tp, r in ends.items()} == dict.fromkeys(range(PARTITIONS), RECORDS)
        deleted = await admin.delete_records(dict.fromkeys(tps, 1))
        assert {tp.partition: r.low_watermark for tp, r in deleted.items()} == dict.fromkeys(
            range(PARTITIONS), 1
        )
        oracle_consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": "oracle", "log_level": 0}
        )
        try:
            for tp in tps:
                watermarks = oracle_consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, tp.partition), timeout=10
                )
                assert watermarks == (1, RECORDS)
        finally:
            oracle_consumer.close()

        brokers = [ConfigResource(ConfigResourceType.BROKER, str(node)) for node in (1, 2, 3)]
        configs = await admin.describe_configs(brokers)
        for resource in brokers:
            assert configs[resource].error is None
            assert configs[resource].entries["node.id"].value == resource.name

        groups: list[str] = []
        coordinators: set[int] = set()
        while len(coordinators) < 2 or len(groups) < 4:
            group = name(f"g{len(groups)}")
            groups.append(group)
            coordinators.add(await admin.find_coordinator(group, CoordinatorType.GROUP))
            assert len(groups) < 40, "every group landed on one coordinator"
        for i, group in enumerate(groups):
            answers = await admin.alter_consumer_group_offsets(group, {tps[i % PARTITIONS]: 2})
            assert answers == {tps[i % PARTITIONS]: None}
        listed = {g.group_id for g in await admin.list_consumer_groups()}
        assert set(groups) <= listed
        oracle = cluster.oracle()
        for i, group in enumerate(groups):
            request = confluent_kafka.ConsumerGroupTopicPartitions(group)
            result = oracle.list_consumer_group_offsets([request])[group].result(timeout=15)
            committed = {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}
            assert committed == {i % PARTITIONS: 2}
        described = await admin.describe_consumer_groups(groups)
        assert all(d.error is None and d.state == "Empty" for d in described.values())
        assert {d.coordinator for d in described.values()} == coordinators
        assert await admin.delete_consumer_groups(groups) == dict.fromkeys(groups)


async def test_items_of_a_killed_node_time_out_and_the_others_answer(three_nodes: Any, name: Any) -> None:
    cluster = Cluster("apache", three_nodes.bootstrap)
    async with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        topic = name("kill")
        leaders = await spread_topic(admin, cluster, topic)
        victim = leaders[0]
        replicated = name("replicated")
        assert (await admin.create_topics([NewTopic(replicated, PARTITIONS, 3)]))[replicated] is None
        wait_for(lambda: oracle_topic(cluster, replicated), replicated)
        replicated_tps = [TopicPartition(replicated, p) for p in range(PARTITIONS)]
        before = await admin.list_offsets(dict.fromkeys(replicated_tps, OffsetSpec.latest()))
        assert all(answer.error is None for answer in before.values())  # leaders now cached
        moved_leaders = {
            p.partition
            for p in (await admin.describe_topics([replicated]))[replicated].partitions
            if p.leader == victim
        }
        assert moved_leaders, "the victim leads none of the replicated partitions"
        group = name("moved")
        while await admin.find_coordinator(group) != victim:
            group = name("moved")
        assert await admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 1): 2}) == {
            TopicPartition(topic, 1): None
        }
        three_nodes.node(victim).kill()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        started = time.monotonic()
        answers = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()), timeout_ms=5000)
        assert time.monotonic() - started < 15
        for tp, answer in answers.items():
            if leaders[tp.partition] == victim:
                assert isinstance(answer.error, KafkaTimeoutError), answer
            else:
                assert (answer.error, answer.offset) == (None, RECORDS)

        # The replicated partitions the victim led get new leaders: the cached ones are stale,
        # the lost connection (or NOT_LEADER_OR_FOLLOWER) sends the client to the metadata again.
        after = await admin.list_offsets(
            dict.fromkeys(replicated_tps, OffsetSpec.earliest()), timeout_ms=60000
        )
        assert {tp.partition: (a.error, a.offset) for tp, a in after.items()} == dict.fromkeys(
            range(PARTITIONS), (None, 0)
        )

        # The group's coordinator moves to a live node (its offsets topic has three replicas):
        # the lost connection sends the admin client back to FindCoordinator until it answers.
        # A node that has just taken the group over may answer before it has replayed the group's
        # offsets: read until the committed offset shows (a lost commit never shows and fails).
        expected = {TopicPartition(topic, 1): 2}
        deadline = time.monotonic() + 60
        while True:
            offsets = await admin.list_consumer_group_offsets(group, timeout_ms=60000)
            found = {tp: o.offset for tp, o in offsets.items()}
            if found == expected or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert found == expected
        assert await admin.find_coordinator(group) != victim
