"""Partition order through seeded random Produce faults: on our broker, on librdkafka's mock, and
on Apache Kafka.

The proxy in front of the cluster answers NOT_LEADER_OR_FOLLOWER for a partition until the
rejected batch (or an earlier one) is retried (every batch behind it is rejected too, as by a
broker that lost leadership), holds answers (and those behind them on the connection) up to
150 ms, drops requests with their connection before they reach the broker, and, on brokers that
deduplicate (ours, Kafka), drops answers to requests the broker wrote, so their retries must be
recognised as duplicates (the mock does not deduplicate an idempotent producer's batches). Once,
the client is also sent to the wrong leaders (on the mock's three brokers).

Whatever the faults, every partition must read back exactly what was sent to it, in send order:
no gap, no duplicate. With five requests in flight this holds only if a partition with a batch
waiting for a retry sends nothing that could overtake it, and a partition whose leader moved
sends nothing to the new leader while the old one may still refuse an earlier batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

import confluent_kafka.admin
import pytest

from sdk import Producer

RECORDS = 1200
PARTITIONS = 4


async def _send(producer: Producer, topic: str, proxy: Any, misroute_at: int) -> dict[int, list[bytes]]:
    """Keyed records over every partition, paced over about two seconds; values by partition."""
    futures = []
    for i in range(RECORDS):
        if i == misroute_at:
            proxy.misroute_leaders(1)
            await producer.client.refresh_metadata()
        futures.append((i, await producer.send(topic, b"%06d" % i, key=b"key-%d" % (i % 16))))
        if i % 10 == 0:
            await asyncio.sleep(0.015)
    sent: dict[int, list[bytes]] = {}
    for i, future in futures:
        metadata = await future
        sent.setdefault(metadata.partition, []).append(b"%06d" % i)
    return sent


async def _produce_through_chaos(
    bootstrap: str,
    topic: str,
    proxy_factory: Any,
    consume: Any,
    group_by_partition: Any,
    *,
    seed: int,
    max_in_flight: int,
    deduplicating: bool,
) -> None:
    proxy = await proxy_factory(bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap,
        linger_ms=2,
        batch_size=2048,
        retry_backoff_ms=20,
        reconnect_backoff_ms=10,
        request_timeout_ms=5000,
        max_in_flight_requests_per_connection=max_in_flight,
    ) as producer:
        await producer.partitions_for(topic)
        chaos = proxy.produce_chaos(
            seed,
            faults=40,
            not_leader=0.06,
            delay=0.1,
            max_delay_s=0.15,
            drop_request=0.04,
            drop_response=0.03 if deduplicating else 0.0,
        )
        sent = await _send(producer, topic, proxy, misroute_at=RECORDS // 3)
    injected = chaos.injected
    assert injected is not None
    dropped = injected["drop_request"] + injected["drop_response"]
    assert injected["not_leader"] and injected["delay"] and dropped, f"too few faults: {injected}"
    consumed = await consume(bootstrap, topic, expected=RECORDS)
    got = {p: [r.value for r in records] for p, records in group_by_partition(consumed).items()}
    for partition, values in sent.items():
        read = got.get(partition, [])
        first = next((i for i, (a, b) in enumerate(zip(read, values, strict=False)) if a != b), len(read))
        assert read == values, (
            f"partition {partition}: {len(read)} records read back, {len(values)} sent; from index "
            f"{first} read {read[first:first + 12]}, sent {values[first:first + 12]} "
            f"(faults injected: {injected})"
        )
    assert set(got) <= set(sent)


@pytest.mark.timeout(90)
# Apache Kafka has its own variant below (longer, its own seeds): not a third copy here.
@pytest.mark.parametrize("kafka", ["mock", "reference"], indirect=True)
@pytest.mark.parametrize("max_in_flight", [1, 5])
@pytest.mark.parametrize("seed", [3, 17])
async def test_partition_order_survives_random_produce_faults(
    kafka, consume, proxy_factory, topic_name, group_by_partition, max_in_flight, seed
):
    topic = await kafka.create_topic(topic_name)
    await _produce_through_chaos(
        kafka.bootstrap,
        topic,
        proxy_factory,
        consume,
        group_by_partition,
        seed=seed + max_in_flight,
        max_in_flight=max_in_flight,
        deduplicating=kafka.kind != "mock",
    )


@pytest.mark.apache_kafka
@pytest.mark.timeout(180)
@pytest.mark.parametrize("max_in_flight", [1, 5])
async def test_partition_order_survives_random_produce_faults_on_apache_kafka(
    apache_kafka, consume, proxy_factory, topic_name, group_by_partition, max_in_flight
):
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    futures = admin.create_topics([confluent_kafka.admin.NewTopic(topic_name, PARTITIONS, 1)])
    await asyncio.to_thread(futures[topic_name].result, 30)
    await _produce_through_chaos(
        apache_kafka.bootstrap,
        topic_name,
        proxy_factory,
        consume,
        group_by_partition,
        seed=29 + max_in_flight,
        max_in_flight=max_in_flight,
        deduplicating=True,
    )
