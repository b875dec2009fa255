"""The blocking facade: same features, blocking calls, usable from many threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sdk import ProducerClosedError, RecordMetadata, SerializationError
from sdk.errors import KafkaTimeoutError, MetadataTimeoutError
from sdk.sync import DeliveryFuture, Producer, shared_loop


def test_send_get_flush_close(mock_cluster, topic_name, consume_sync):
    with Producer(bootstrap_servers=mock_cluster.bootstrap, value_serializer=str.encode) as producer:
        future = producer.send(topic_name, "first", key=b"k")
        assert isinstance(future, DeliveryFuture)
        metadata = future.get(timeout=10)
        assert isinstance(metadata, RecordMetadata) and metadata.topic == topic_name
        assert producer.send_and_wait(topic_name, "second", partition=2, timeout=10).partition == 2
        futures = [producer.send(topic_name, f"v{i}") for i in range(500)]
        producer.flush(timeout=10)
        assert all(f.done() and f.exception() is None for f in futures)
        batch = producer.send_many(topic_name, [(None, "m1"), (b"k", "m2")]).get(10)
        assert batch.record_count == 2
        assert producer.partitions_for(topic_name) == {0, 1, 2, 3}
        with pytest.raises(SerializationError):
            producer.send(topic_name, 42)
    with pytest.raises(ProducerClosedError):
        producer.send(topic_name, "late")
    producer.close()  # idempotent
    records = consume_sync(mock_cluster.bootstrap, topic_name, expected=504)
    assert len(records) == 504


def test_many_threads_share_one_producer(kafka, topic_name, consume_sync):
    bootstrap = kafka.bootstrap
    asyncio.run(kafka.create_topic(topic_name))
    producer = Producer(bootstrap_servers=bootstrap, linger_ms=2)
    results: dict[int, list] = {}

    def worker(n: int) -> None:
        results[n] = [
            producer.send(topic_name, f"{n}-{i}".encode(), key=f"t{n}".encode()) for i in range(300)
        ]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.close()
    assert all(f.result(0).offset >= 0 for futures in results.values() for f in futures)
    records = consume_sync(bootstrap, topic_name, expected=1200)
    for n in range(4):
        mine = [r.value for r in sorted(records, key=lambda r: r.offset) if r.key == f"t{n}".encode()]
        assert mine == [f"{n}-{i}".encode() for i in range(300)]  # per-thread order kept


def test_errors_arrive_through_the_future_or_are_raised(broker_factory, topic_name):
    broker = broker_factory({"auto.create.topics.enable": False})
    with Producer(bootstrap_servers=broker.bootstrap, max_block_ms=300) as producer:
        future = producer.send(topic_name, b"v")
        with pytest.raises(MetadataTimeoutError):
            future.get(5)
        slow = DeliveryFuture()
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            slow.get(0.05)
        assert time.monotonic() - started < 10  # gave up on its timeout, not never


def test_loop_thread_is_shared():
    assert shared_loop() is shared_loop()
    assert shared_loop().thread.daemon


def test_the_facade_shows_the_async_producers_settings():
    import inspect

    from sdk.producer import Producer as AsyncProducer

    parameters = inspect.signature(Producer.__init__).parameters
    assert parameters["linger_ms"].default == 5 and "buffer_memory" in parameters
    assert parameters == inspect.signature(AsyncProducer.__init__).parameters
