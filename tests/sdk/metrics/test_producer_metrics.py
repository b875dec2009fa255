"""The producer's and the admin client's ``metrics()`` against what really happened on a broker."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import time

import pytest

from sdk import AdminClient, Producer
from sdk.admin import NewTopic, OffsetSpec
from sdk.client.cluster import TopicPartition
from sdk.errors import ProducerFencedError
from sdk.metrics import MetricName, find_metric
from sdk.sync import Producer as SyncProducer


async def create_topic(bootstrap: str, name: str, partitions: int = 2) -> str:
    """A topic whose every partition's leader already serves it. Kafka names a new topic's leader
    in Metadata a moment before that broker serves the partition, and a first produce meeting that
    window is answered NOT_LEADER_OR_FOLLOWER and retried, which the exact send and retry counts
    below would take for the producer's doing; ListOffsets is retried by the admin until the
    leaders answer it."""
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        errors = await admin.create_topics([NewTopic(name, partitions, 1)])
        assert errors[name] is None
        specs = {TopicPartition(name, p): OffsetSpec.latest() for p in range(partitions)}
        offsets = await admin.list_offsets(specs, timeout_ms=30_000)
        assert all(o.error is None for o in offsets.values()), offsets
    return name


async def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def value(values: dict[MetricName, float], name: str) -> float:
    return find_metric(values, name, group="producer-metrics")


async def test_send_figures_match_what_was_sent(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    async with Producer(
        bootstrap_servers=cluster.bootstrap,
        client_id="metrics-producer",
        compression_type="gzip",
        buffer_memory=8 * 1024 * 1024,
    ) as producer:
        before = producer.metrics()
        assert value(before, "record-send-total") == 0
        assert math.isnan(value(before, "batch-size-avg"))
        futures = [await producer.send(topic, b"x" * 200, partition=i % 2) for i in range(500)]
        batch = await producer.send_many(topic, [(None, b"y" * 200)] * 300, partition=1)
        await producer.flush()
        await asyncio.gather(*futures, batch)
        values = producer.metrics()

    assert value(values, "record-send-total") == 800
    assert value(values, "record-send-rate") > 0
    assert value(values, "record-error-total") == 0
    assert value(values, "record-retry-total") == 0
    assert 0 < value(values, "batch-size-avg") <= value(values, "batch-size-max")
    assert 1 <= value(values, "records-per-request-avg") <= 800
    # Repetitive values compress well: the ratio is compressed over uncompressed bytes.
    assert 0 < value(values, "compression-rate-avg") < 0.5
    assert value(values, "request-latency-avg") >= 0
    assert value(values, "request-latency-max") >= value(values, "request-latency-avg")
    assert value(values, "record-queue-time-max") >= 0
    assert value(values, "produce-throttle-time-max") == 0
    assert value(values, "buffer-total-bytes") == 8 * 1024 * 1024
    assert value(values, "buffer-available-bytes") == 8 * 1024 * 1024
    assert value(values, "requests-in-flight") == 0
    assert value(values, "flush-time-ns-total") > 0
    for metric in values:
        assert metric.description, metric
        assert metric.tag_dict["client-id"] == "metrics-producer"


async def test_transaction_times_are_totalled(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    # A long linger keeps the aborted transaction's record in the producer until the abort.
    settings = {"transactional_id": f"txn-{topic}", "linger_ms": 60_000}
    async with Producer(bootstrap_servers=cluster.bootstrap, **settings) as producer:
        await producer.begin_transaction()
        await producer.send(topic, b"committed", partition=0)
        await producer.commit_transaction()
        await producer.begin_transaction()
        await producer.send(topic, b"aborted", partition=0)
        await producer.abort_transaction()
        values = producer.metrics()
    for operation in ("txn-init", "txn-begin", "txn-commit", "txn-abort"):
        assert value(values, f"{operation}-time-ns-total") > 0, operation
    assert value(values, "txn-send-offsets-time-ns-total") == 0
    # The commit flushed one record; the abort dropped the other. As Java's Sender, each send of a
    # batch counts, so a retry (a NOT_LEADER_OR_FOLLOWER from a topic just created on Kafka) adds one.
    assert value(values, "record-send-total") == 1 + value(values, "record-retry-total")
    assert value(values, "record-error-total") == 0  # records dropped by an abort are no send errors


async def test_a_request_lost_in_a_broker_restart_is_counted_as_a_retry(broker_factory, topic_name, caplog):
    caplog.set_level(logging.WARNING, logger="sdk.producer.sender")
    broker = broker_factory()
    topic = await create_topic(broker.bootstrap, topic_name, partitions=1)
    async with Producer(
        bootstrap_servers=broker.bootstrap, linger_ms=0, request_timeout_ms=60000
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)  # keeps the socket open, answers nothing
        try:
            future = await producer.send(topic, b"during the restart")
            await wait_for(
                lambda: value(producer.metrics(), "requests-in-flight") == 1, "the request on the wire"
            )
        finally:
            broker.restart(kill=True)  # SIGKILL ends the stopped process; the request is lost
        metadata = await asyncio.wait_for(future, 60)
        values = producer.metrics()
    assert metadata.offset == 1  # delivered once, after the retry
    assert value(values, "record-retry-total") >= 1
    assert value(values, "record-error-total") == 0
    assert value(values, "record-send-total") >= 3  # warm-up, first attempt, the retry
    retries = [r for r in caplog.records if getattr(r, "kafka_attempt", None) == 1]
    assert retries, caplog.text
    assert retries[0].kafka_topic == topic and retries[0].kafka_partition == 0
    assert retries[0].kafka_records == 1 and retries[0].kafka_error


async def test_fencing_and_aborts_are_logged_with_their_fields(cluster, topic_name, caplog):
    caplog.set_level(logging.INFO, logger="sdk.producer")
    topic = await create_topic(cluster.bootstrap, topic_name)
    transactional_id = f"fenced-{topic}"
    async with Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id) as first:
        await first.begin_transaction()
        await first.send_and_wait(topic, b"first", partition=0)
        await first.abort_transaction()
        await first.begin_transaction()
        await first.send_and_wait(topic, b"first again", partition=0)
        async with Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id):
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
    aborts = [r for r in caplog.records if "aborting the transaction" in r.getMessage()]
    assert aborts and aborts[0].kafka_transactional_id == transactional_id
    assert aborts[0].kafka_producer_id >= 0
    fenced = [r for r in caplog.records if getattr(r, "kafka_fenced", False)]
    assert fenced, caplog.text
    assert fenced[0].levelno == logging.ERROR and fenced[0].kafka_transactional_id == transactional_id


def test_sync_producer_metrics(cluster, topic_name):
    asyncio.run(create_topic(cluster.bootstrap, topic_name))
    producer = SyncProducer(bootstrap_servers=cluster.bootstrap, client_id="sync-metrics")
    try:
        for i in range(50):
            producer.send(topic_name, b"v%d" % i)
        producer.flush()
        values = producer.metrics()
    finally:
        producer.close()
    assert value(values, "record-send-total") == 50
    assert find_metric(values, "record-send-total", client_id="sync-metrics") == 50


async def test_admin_client_counts_requests_and_their_latency(cluster, topic_name):
    async with AdminClient(bootstrap_servers=cluster.bootstrap, client_id="metrics-admin") as admin:
        assert find_metric(admin.metrics(), "request-total") == 0
        await admin.create_topics([NewTopic(topic_name, 1, 1)])
        await admin.list_topics()
        await admin.describe_topics([topic_name])
        values = admin.metrics()
    assert find_metric(values, "request-total", group="admin-client-metrics") >= 3
    assert find_metric(values, "request-rate") > 0
    assert find_metric(values, "request-latency-max") >= find_metric(values, "request-latency-avg") >= 0
    assert find_metric(values, "request-error-total") == 0
    assert {metric.tag_dict["client-id"] for metric in values} == {"metrics-admin"}


def test_sync_admin_client_metrics(cluster):
    from sdk.sync import AdminClient as SyncAdminClient

    with SyncAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        admin.list_topics()
        values = admin.metrics()
    assert find_metric(values, "request-total") >= 1
