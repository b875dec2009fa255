"""Topics Apache Kafka creates on first use are found promptly (auto.create.topics.enable=true,
Kafka's default).

Kafka creates such a topic asynchronously: the Metadata request that triggers the creation is
answered UNKNOWN_TOPIC_OR_PARTITION or LEADER_NOT_AVAILABLE without partitions. A client that
stored that answer and waited for its next periodic refresh (``metadata_max_age_ms``, 5 minutes)
would not see the topic for minutes; each test here gives it 30 seconds.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from sdk import Producer
from sdk.consumer import Consumer, TopicPartition
from sdk.errors import InvalidTopicError, MetadataTimeoutError, UnknownTopicOrPartitionError

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(180)]

PROMPTLY_S = 30.0


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_producer_sends_to_a_topic_that_does_not_exist_yet(apache_kafka):
    topic = _topic("auto-send")
    async with Producer(bootstrap_servers=apache_kafka.bootstrap, max_block_ms=PROMPTLY_S * 1000) as producer:
        metadata = await asyncio.wait_for(producer.send_and_wait(topic, b"first"), PROMPTLY_S)
        assert (metadata.topic, metadata.offset) == (topic, 0)
        assert await producer.partitions_for(topic) == {0}


async def test_partitions_for_topic_finds_a_topic_its_lookup_created(apache_kafka):
    topic = _topic("auto-lookup")
    async with Consumer(bootstrap_servers=apache_kafka.bootstrap) as consumer:
        deadline = time.monotonic() + PROMPTLY_S
        while (partitions := consumer.partitions_for_topic(topic)) is None:
            assert time.monotonic() < deadline, f"{topic} still unknown after {PROMPTLY_S} s"
            await asyncio.sleep(0.05)
    assert partitions == {0}


async def test_subscribed_consumer_reads_a_topic_created_by_its_subscription(apache_kafka):
    topic = _topic("auto-subscribe")
    async with Consumer(
        topic,
        bootstrap_servers=apache_kafka.bootstrap,
        group_id=_topic("group"),
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    ) as consumer:
        deadline = time.monotonic() + PROMPTLY_S
        while consumer.assignment() != {TopicPartition(topic, 0)}:
            assert time.monotonic() < deadline, f"no partition of {topic} assigned after {PROMPTLY_S} s"
            await consumer.getmany(timeout_ms=200)
        async with Producer(bootstrap_servers=apache_kafka.bootstrap) as producer:
            await producer.send_and_wait(topic, b"hello")
        records = await consumer.getmany(timeout_ms=PROMPTLY_S * 1000)
    assert [r.value for r in records[TopicPartition(topic, 0)]] == [b"hello"]


async def test_assigned_consumer_reads_a_topic_created_by_its_assignment(apache_kafka):
    topic = _topic("auto-assign")
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=apache_kafka.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert await asyncio.wait_for(consumer.position(tp), PROMPTLY_S) == 0
        async with Producer(bootstrap_servers=apache_kafka.bootstrap) as producer:
            await producer.send_and_wait(topic, b"hello", partition=0)
        records = await consumer.getmany(timeout_ms=PROMPTLY_S * 1000)
    assert [r.value for r in records[tp]] == [b"hello"]


async def test_invalid_topic_name_fails_the_send_at_once(apache_kafka):
    async with Producer(bootstrap_servers=apache_kafka.bootstrap, max_block_ms=120_000) as producer:
        with pytest.raises(InvalidTopicError):
            await asyncio.wait_for(producer.send("no spaces allowed", b"v"), PROMPTLY_S)


async def test_send_gives_up_at_max_block_ms_when_auto_creation_is_off(apache_kafka_factory):
    node = apache_kafka_factory(**{"auto.create.topics.enable": "false"})
    topic = _topic("never")
    async with Producer(bootstrap_servers=node.bootstrap, max_block_ms=2000) as producer:
        with pytest.raises(MetadataTimeoutError) as caught:
            await asyncio.wait_for(producer.send(topic, b"v"), PROMPTLY_S)
    assert isinstance(caught.value.last_error, UnknownTopicOrPartitionError)
