"""The consumer through a fault-injecting proxy in front of librdkafka's 3-broker mock cluster:
lost connections and wrong leaders cost a retry, never a record or a duplicate."""

from __future__ import annotations

import asyncio

from sdk import Producer
from sdk.consumer import Consumer, TopicPartition


async def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, batch_size=2000) as producer:
        for i in range(per_partition):
            for partition in range(4):
                await producer.send(topic, b"%d-%d" % (partition, i), partition=partition)


async def read_all(consumer: Consumer, total: int, during=None) -> dict[int, list[int]]:
    offsets: dict[int, list[int]] = {p: [] for p in range(4)}
    seen = 0
    async with asyncio.timeout(30):
        while seen < total:
            batch = await consumer.getmany(timeout_ms=500, max_records=50)
            for tp, records in batch.items():
                offsets[tp.partition].extend(r.offset for r in records)
                seen += len(records)
            if during is not None and seen:
                during(seen)
    return offsets


async def test_cut_connections_are_survived_without_loss_or_duplicates(mock_cluster, proxy_factory, unique):
    topic = unique("cut")
    await fill(mock_cluster.bootstrap, topic, 150)
    proxy = await proxy_factory(mock_cluster.bootstrap)
    cuts_at = {100, 300, 450}

    def cut(seen: int) -> None:
        for mark in sorted(cuts_at):
            if seen >= mark:
                cuts_at.discard(mark)
                proxy.cut_all()

    async with Consumer(bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest",
                        max_partition_fetch_bytes=1000, fetch_max_wait_ms=100, retry_backoff_ms=20,
                        reconnect_backoff_ms=20) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(4)])
        offsets = await read_all(consumer, 600, during=cut)
    assert proxy.cuts >= 1  # later marks may pass while the consumer reads what it buffered
    assert offsets == {p: list(range(150)) for p in range(4)}


async def test_wrong_leaders_are_corrected_by_a_metadata_refresh(mock_cluster, proxy_factory, unique):
    topic = unique("misrouted")
    await fill(mock_cluster.bootstrap, topic, 20)
    proxy = await proxy_factory(mock_cluster.bootstrap)
    async with Consumer(bootstrap_servers=proxy.bootstrap, auto_offset_reset="earliest",
                        retry_backoff_ms=20, fetch_max_wait_ms=100) as consumer:
        proxy.misroute_leaders(3)
        consumer.assign([TopicPartition(topic, p) for p in range(4)])
        offsets = await read_all(consumer, 80)
    assert offsets == {p: list(range(20)) for p in range(4)}


async def test_a_killed_and_restarted_broker_costs_no_record(broker_factory, unique):
    broker = broker_factory({"num.partitions": 4, "log.flush.interval.messages": 1})
    topic = unique("restart")
    await fill(broker.bootstrap, topic, 30)
    tps = [TopicPartition(topic, p) for p in range(4)]
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=100, retry_backoff_ms=20, reconnect_backoff_ms=20,
                        reconnect_backoff_max_ms=200) as consumer:
        consumer.assign(tps)
        first = await read_all(consumer, 60)
        await asyncio.get_running_loop().run_in_executor(None, lambda: broker.restart(kill=True))
        await fill(broker.bootstrap, topic, 10)  # offsets 30-39 of every partition
        rest = await read_all(consumer, 160 - sum(len(offsets) for offsets in first.values()))
    for p in range(4):
        assert sorted(first[p] + rest[p]) == list(range(40))
        assert len(first[p]) + len(rest[p]) == 40
