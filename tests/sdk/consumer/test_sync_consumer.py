"""sdk.sync.Consumer: the blocking facade reads, seeks, commits and iterates like the async one."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sdk.consumer import TopicPartition
from sdk.errors import ConfigError
from sdk.sync import Consumer


def fill(kafka, topic: str, count: int) -> None:
    from sdk import Producer

    async def run() -> None:
        async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
            for i in range(count):
                await producer.send(topic, b"%d" % i, key=b"k", partition=i % 4)

    asyncio.run(run())


def test_iterate_seek_and_offsets(kafka, topic_name):
    topic = asyncio.run(kafka.create_topic(topic_name))
    fill(kafka, topic, 40)
    tps = [TopicPartition(topic, p) for p in range(4)]
    settings = {"auto_offset_reset": "earliest", "fetch_max_wait_ms": 100}
    with Consumer(bootstrap_servers=kafka.bootstrap, **settings) as consumer:
        consumer.assign(tps)
        assert consumer.assignment() == set(tps)
        got = []
        for record in consumer:
            got.append(record)
            if len(got) == 40:
                break
        assert sorted(int(r.value) for r in got) == list(range(40))
        assert consumer.end_offsets(tps) == {tp: 10 for tp in tps}
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.getone(timeout_ms=200) is None
        consumer.seek(tps[2], 7)
        batch = consumer.poll(timeout_ms=5000)
        assert [r.offset for r in batch[tps[2]]] == [7, 8, 9]
        assert consumer.position(tps[2]) == 10 and consumer.highwater(tps[2]) == 10
        consumer.pause(tps[0])
        assert consumer.paused() == {tps[0]}
        consumer.resume(tps[0])
        assert consumer.seek_to_beginning(tps[0])
        record = consumer.getone(tps[0], timeout_ms=5000)
        assert record is not None and record.offset == 0 and record.key == b"k"


def test_commit_counts_only_records_the_iterator_yielded(mock_cluster, unique):
    kafka_bootstrap = mock_cluster.bootstrap
    topic, group = unique("sync-commit"), unique("group")
    tp = TopicPartition(topic, 0)

    class Target:
        bootstrap = kafka_bootstrap

    fill(Target, topic, 40)  # 10 records on partition 0
    with Consumer(bootstrap_servers=kafka_bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        for record in consumer:
            if record.offset == 3:
                break
        consumer.commit()
        assert consumer.committed(tp) == 4


def test_calls_from_several_threads(kafka, topic_name):
    topic = asyncio.run(kafka.create_topic(topic_name))
    fill(kafka, topic, 8)
    with Consumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(4)])
        answers = []

        def ask() -> None:
            answers.append(consumer.end_offsets([TopicPartition(topic, 1)]))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert answers == [{TopicPartition(topic, 1): 2}] * 4


def test_bad_settings_and_use_after_close():
    with pytest.raises(ConfigError) as info:
        Consumer(bootstrap_servers="127.0.0.1:1", auto_offset_reset="oldest")
    assert info.value.option == "auto_offset_reset"
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    consumer.close()
    assert list(consumer) == []
