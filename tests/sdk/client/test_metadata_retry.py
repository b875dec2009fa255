"""Metadata that is not ready yet is asked for again, with backoff, until the caller's deadline.

Apache Kafka creates an auto-created topic asynchronously: its first Metadata answers are
LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION without partitions, and a partition may be
listed without a leader (or with a leader the response does not list) for a moment. The
reference broker creates topics synchronously, so a proxy in front of it
(``metadata_proxy.MetadataRewritingProxy``) answers a topic's first Metadata responses that way.
The SDK must keep asking (``retry_backoff_ms`` growing to ``retry_backoff_max_ms``) and find the
topic; give up at its own deadline with the broker's last word for a topic that never appears;
and fail at once on a non-retriable answer (TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sdk import Producer
from sdk.client import KafkaClient
from sdk.consumer import Consumer, TopicPartition
from sdk.errors import (
    InvalidTopicError,
    KafkaTimeoutError,
    MetadataTimeoutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from tests.sdk.client.metadata_proxy import (
    FOREIGN,
    LEADERLESS,
    NOT_READY,
    UNAUTHORIZED,
    UNKNOWN,
    running_proxy,
)

pytestmark = pytest.mark.timeout(120)

FAST_RETRIES = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 200}


async def _eventually(condition, timeout_s: float, what: str):
    """Poll ``condition()`` until it returns something other than None/False, or fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("kind", [NOT_READY, UNKNOWN])
async def test_partitions_for_topic_finds_a_topic_whose_first_answers_were_not_ready(broker, unique, kind):
    topic = unique("late")
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, kind, count=3)
        async with Consumer(bootstrap_servers=proxy.bootstrap, **FAST_RETRIES) as consumer:
            assert consumer.partitions_for_topic(topic) is None
            partitions = await _eventually(
                lambda: consumer.partitions_for_topic(topic), 20, f"{topic} in partitions_for_topic"
            )
    assert partitions == {0}
    assert fault.rewritten == 3


@pytest.mark.parametrize("kind", [NOT_READY, LEADERLESS, FOREIGN])
async def test_producer_send_waits_out_answers_without_partitions_or_leader(broker, unique, kind):
    topic = unique("send")
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, kind, count=4)
        producer = Producer(bootstrap_servers=proxy.bootstrap, max_block_ms=30000, **FAST_RETRIES)
        async with producer:
            metadata = await asyncio.wait_for(producer.send_and_wait(topic, b"v"), 30)
    assert (metadata.topic, metadata.partition, metadata.offset) == (topic, 0, 0)
    assert fault.rewritten == 4


@pytest.mark.parametrize("kind", [NOT_READY, LEADERLESS, FOREIGN])
async def test_assigned_consumer_reads_once_the_leader_is_known(broker, unique, kind):
    topic = unique("assign")
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait(topic, b"first")
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, kind, count=4)
        async with Consumer(
            bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest", **FAST_RETRIES
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            records = await consumer.getmany(timeout_ms=20000)
    assert [r.value for r in records[TopicPartition(topic, 0)]] == [b"first"]
    assert fault.rewritten == 4


async def test_subscribed_consumer_is_assigned_a_topic_created_late(broker, unique):
    """Only the group leader's view of the topic decides the assignment: it must learn of the
    partitions without waiting for metadata_max_age_ms."""
    topic = unique("subscribed")
    async with running_proxy(broker.bootstrap) as proxy:
        proxy.rewrite(topic, NOT_READY, count=None)
        async with Consumer(
            topic,
            bootstrap_servers=proxy.bootstrap,
            group_id=unique("group"),
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            **FAST_RETRIES,
        ) as consumer:
            await consumer.getmany(timeout_ms=300)
            assert consumer.assignment() == set()
            # The group joined without partitions; the topic is now usable.
            proxy.faults[topic].count = 0
            deadline = time.monotonic() + 20
            while consumer.assignment() != {TopicPartition(topic, 0)}:
                assert time.monotonic() < deadline, "no assignment for a topic that exists"
                await consumer.getmany(timeout_ms=100)


async def test_pattern_subscription_matches_a_topic_listed_while_being_created(broker, unique):
    """A full listing names a topic Kafka is still creating with LEADER_NOT_AVAILABLE: the
    listing is asked again, rather than the pattern re-matched only after metadata_max_age_ms."""
    prefix = unique("pattern")
    topic = f"{prefix}-a"
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait(topic, b"listed")
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, NOT_READY, count=3)
        async with Consumer(
            bootstrap_servers=proxy.bootstrap,
            group_id=unique("group"),
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            **FAST_RETRIES,
        ) as consumer:
            consumer.subscribe(pattern=f"{prefix}-.*")
            deadline = time.monotonic() + 20
            records: list = []
            while not records:
                assert time.monotonic() < deadline, f"nothing read; subscription {consumer.subscription()}"
                batch = await consumer.getmany(timeout_ms=200)
                records = batch.get(TopicPartition(topic, 0), [])
    assert [r.value for r in records] == [b"listed"]
    assert fault.rewritten == 3


async def test_client_asks_again_with_growing_backoff_while_a_topic_is_not_ready(broker, unique):
    topic = unique("pending")
    initial_ms, max_ms = 50, 400
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, NOT_READY, count=None)
        client = KafkaClient(proxy.bootstrap, retry_backoff_ms=initial_ms, retry_backoff_max_ms=max_ms)
        await client.start()
        try:
            client.add_topic(topic)
            await _eventually(lambda: len(fault.answered_at) >= 7, 30, "seven Metadata answers")
        finally:
            await client.close()
    gaps_ms = [(b - a) * 1000 for a, b in zip(fault.answered_at, fault.answered_at[1:], strict=False)]
    # Each retry waits at least the jittered backoff (0.8x), which doubles up to the maximum.
    for attempt, gap in enumerate(gaps_ms[:6]):
        floor = 0.8 * min(initial_ms * 2**attempt, max_ms)
        assert gap >= floor - 5, f"retry {attempt} came after {gap:.0f} ms, below {floor:.0f} ms: {gaps_ms}"


async def test_producer_gives_up_at_max_block_ms_with_the_brokers_last_word(broker_factory, unique):
    broker = broker_factory({"auto.create.topics.enable": False})
    topic = unique("never")
    async with running_proxy(broker.bootstrap) as proxy:
        fault = proxy.rewrite(topic, UNKNOWN, count=0)  # only watched
        async with Producer(bootstrap_servers=proxy.bootstrap, max_block_ms=1500, **FAST_RETRIES) as producer:
            with pytest.raises(MetadataTimeoutError) as caught:
                await asyncio.wait_for(producer.send(topic, b"v"), 30)
    assert isinstance(caught.value.last_error, UnknownTopicOrPartitionError)
    assert len(fault.answered_at) >= 2  # asked again while waiting, not only once


async def test_consumer_offsets_give_up_at_request_timeout_for_a_missing_topic(broker_factory, unique):
    broker = broker_factory({"auto.create.topics.enable": False})
    topic = unique("never")
    consumer = Consumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=1500, **FAST_RETRIES)
    async with consumer:
        with pytest.raises(KafkaTimeoutError, match="did not succeed within"):
            await asyncio.wait_for(consumer.end_offsets([TopicPartition(topic, 0)]), 30)
        assert consumer.partitions_for_topic(topic) is None


async def test_non_retriable_topic_errors_fail_every_waiter_at_once(broker, unique):
    topic = unique("forbidden")
    async with running_proxy(broker.bootstrap) as proxy:
        proxy.rewrite(topic, UNAUTHORIZED, count=None)
        producer = Producer(bootstrap_servers=proxy.bootstrap, max_block_ms=60000, **FAST_RETRIES)
        async with producer:
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(producer.send(topic, b"v"), 30)
        consumer = Consumer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=60000, **FAST_RETRIES)
        async with consumer:
            consumer.partitions_for_topic(topic)
            with pytest.raises(TopicAuthorizationFailedError):
                await _eventually(lambda: consumer.partitions_for_topic(topic), 20, "the refusal")
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(consumer.end_offsets([TopicPartition(topic, 0)]), 30)
        async with Consumer(
            topic, bootstrap_servers=proxy.bootstrap, group_id=unique("group"), **FAST_RETRIES
        ) as consumer:
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(consumer.getmany(timeout_ms=20000), 30)


async def test_each_refused_send_raises_an_exception_of_its_own(broker, unique):
    """The refusal is cached in the metadata; raising that cached instance again and again would
    chain every sender's traceback onto it."""
    async with Producer(bootstrap_servers=broker.bootstrap, max_block_ms=60000, **FAST_RETRIES) as producer:
        raised = []
        for _ in range(3):
            with pytest.raises(InvalidTopicError) as caught:
                await asyncio.wait_for(producer.send("no spaces allowed", b"v"), 30)
            raised.append(caught.value)
    assert len({id(error) for error in raised}) == 3


async def test_subscribing_to_an_invalid_topic_name_fails_the_poll(broker, unique):
    async with Consumer(
        "no spaces allowed", bootstrap_servers=broker.bootstrap, group_id=unique("group"), **FAST_RETRIES
    ) as consumer:
        with pytest.raises(InvalidTopicError):
            await asyncio.wait_for(consumer.getmany(timeout_ms=20000), 30)
