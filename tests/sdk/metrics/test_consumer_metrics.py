"""The consumer's ``metrics()`` and interceptors against what really happened on a broker: lag
is the end offset minus the position, commits and rebalances are counted."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sdk import AdminClient, Consumer, Producer, TopicPartition
from sdk.admin import NewTopic
from sdk.consumer.interceptors import ConsumerInterceptor
from sdk.metrics import find_metric
from sdk.sync import Consumer as SyncConsumer


async def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        errors = await admin.create_topics([NewTopic(name, partitions, 1)])
        assert errors[name] is None
    return name


async def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        futures = [await producer.send(topic, b"value-%d" % i, partition=partition) for i in range(count)]
        await asyncio.gather(*futures)


async def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def poll_until(consumer: Consumer, count: int, max_records: int | None = None) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + 30
    while len(records) < count:
        assert time.monotonic() < deadline, f"got {len(records)} of {count} records"
        batch = await consumer.getmany(timeout_ms=200, max_records=max_records)
        for polled in batch.values():
            records.extend(polled)
    return records


async def test_lag_is_the_end_offset_minus_the_position(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    await produce(cluster.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    async with Consumer(
        topic, bootstrap_servers=cluster.bootstrap, client_id="lag-reader", auto_offset_reset="earliest"
    ) as consumer:
        polls_started = time.monotonic()
        first = await poll_until(consumer, 4, max_records=4)
        assert len(first) == 4
        values = consumer.metrics()
        since_polls_started = time.monotonic() - polls_started
        position = await consumer.position(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        assert (position, end) == (4, 10)
        lag = find_metric(values, "records-lag", topic=topic, partition=0)
        assert lag == end - position
        assert find_metric(values, "records-lag-max") == 6
        assert find_metric(values, "records-lead", topic=topic, partition=0) == 4  # log start is 0
        assert find_metric(values, "records-consumed-total") == 4
        assert find_metric(values, "fetch-total") >= 1
        assert find_metric(values, "fetch-latency-max") >= find_metric(values, "fetch-latency-avg") >= 0
        assert find_metric(values, "bytes-consumed-total") > 0
        assert find_metric(values, "assigned-partitions") == 1
        # Whole seconds since the last getmany, which began after ``polls_started``: 0 unless a
        # loaded runner made the polls or the checks above take a second or more (-1 would say no
        # poll was recorded).
        assert 0 <= find_metric(values, "last-poll-seconds-ago") <= since_polls_started
        # getone counts each record too (recorded in bulk, read exactly).
        await consumer.getone()
        await consumer.getone()
        values = consumer.metrics()
        assert find_metric(values, "records-consumed-total") == 6
        assert find_metric(values, "records-lag", topic=topic, partition=0) == 4
        await poll_until(consumer, 4)
        values = consumer.metrics()
        assert find_metric(values, "records-lag", topic=topic, partition=0) == 0
        assert find_metric(values, "records-consumed-total") == 10
        assert find_metric(values, "records-consumed-rate") > 0
    for metric in values:
        assert metric.description, metric
        assert metric.tag_dict["client-id"] == "lag-reader"


async def test_commits_and_rebalances_are_counted(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name, partitions=2)
    await produce(cluster.bootstrap, topic, 5, partition=0)
    group = f"group-{topic}"
    settings = {
        "bootstrap_servers": cluster.bootstrap,
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
    }
    async with Consumer(topic, **settings) as first:
        values = first.metrics()
        assert find_metric(values, "rebalance-total") == 1  # the join at start
        assert find_metric(values, "last-rebalance-seconds-ago") >= 0
        assert find_metric(values, "rebalance-latency-max") >= 0
        assert find_metric(values, "assigned-partitions") == 2
        assert find_metric(values, "commit-total") == 0
        await poll_until(first, 5)
        await first.commit()
        await first.commit({TopicPartition(topic, 0): 5})
        values = first.metrics()
        assert find_metric(values, "commit-total") == 2
        assert find_metric(values, "commit-latency-max") >= find_metric(values, "commit-latency-avg") > 0
        async with Consumer(topic, **settings):
            # The first member rebalances in the background; its polls keep it in the group.
            async def rebalanced() -> bool:
                await first.getmany(timeout_ms=100)
                return find_metric(first.metrics(), "rebalance-total") >= 2

            deadline = time.monotonic() + 60
            while not await rebalanced():
                assert time.monotonic() < deadline, first.metrics()
            values = first.metrics()
    assert find_metric(values, "assigned-partitions") == 1
    assert find_metric(values, "failed-rebalance-total") >= 0
    assert find_metric(values, "rebalance-rate-per-hour") > 0


class Tagging(ConsumerInterceptor):
    def __init__(self) -> None:
        self.consumed = 0
        self.commits: list[dict[Any, Any]] = []
        self.closed = False

    def on_consume(self, records):
        self.consumed += sum(len(batch) for batch in records.values())
        # Keep only even values: what the application sees is what the interceptor returns.
        return {
            tp: [r for r in batch if int(r.value.split(b"-")[1]) % 2 == 0] for tp, batch in records.items()
        }

    def on_commit(self, offsets):
        self.commits.append(dict(offsets))

    def close(self):
        self.closed = True


class Broken(ConsumerInterceptor):
    def on_consume(self, records):
        raise RuntimeError("on_consume bug")

    def on_commit(self, offsets):
        raise RuntimeError("on_commit bug")


async def test_interceptors_see_and_change_records_and_see_commits(cluster, topic_name, caplog):
    caplog.set_level(logging.WARNING, logger="sdk.consumer.interceptors")
    topic = await create_topic(cluster.bootstrap, topic_name)
    await produce(cluster.bootstrap, topic, 10)
    tagging = Tagging()
    async with Consumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=f"group-{topic}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        interceptors=[Broken(), tagging],
    ) as consumer:
        seen: list[Any] = []
        deadline = time.monotonic() + 30
        while tagging.consumed < 10:
            assert time.monotonic() < deadline
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                seen.extend(batch)
        assert [r.value for r in seen] == [b"value-%d" % i for i in range(0, 10, 2)]
        assert (await consumer.position(TopicPartition(topic, 0))) == 10  # dropped records are consumed
        await consumer.commit()
        assert tagging.commits == [{TopicPartition(topic, 0): tagging.commits[0][TopicPartition(topic, 0)]}]
        assert tagging.commits[0][TopicPartition(topic, 0)].offset == 10
    assert tagging.closed
    assert "failed in on_consume" in caplog.text and "failed in on_commit" in caplog.text


def test_sync_consumer_metrics_and_interceptors(cluster, topic_name):
    asyncio.run(create_topic(cluster.bootstrap, topic_name))
    asyncio.run(produce(cluster.bootstrap, topic_name, 4))
    tagging = Tagging()
    with SyncConsumer(
        topic_name,
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        interceptors=[tagging],
    ) as consumer:
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while tagging.consumed < 4:
            assert time.monotonic() < deadline
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        values = consumer.metrics()
    assert [r.value for r in records] == [b"value-0", b"value-2"]
    assert find_metric(values, "records-consumed-total") == 4
    assert find_metric(values, "records-lag", topic=topic_name, partition=0) == 0


async def test_rebalance_log_lines_carry_generation_and_assignment(cluster, topic_name, caplog):
    caplog.set_level(logging.INFO, logger="sdk.consumer.consumer_coordinator")
    topic = await create_topic(cluster.bootstrap, topic_name, partitions=2)
    group = f"group-{topic}"
    async with Consumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group):
        pass
    assignments = [r for r in caplog.records if hasattr(r, "kafka_assignment")]
    assert assignments, caplog.text
    line = assignments[-1]
    assert line.kafka_group_id == group and line.kafka_generation >= 1 and line.kafka_member_id
    assert line.kafka_assignment == [f"{topic}-0", f"{topic}-1"] and line.kafka_revoked == []
    joined = [r for r in caplog.records if hasattr(r, "kafka_leader")]
    assert joined and joined[-1].kafka_leader is True  # the only member leads
