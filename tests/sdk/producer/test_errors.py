"""Every documented error path raises its specific, documented error (and never hangs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from sdk import (
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidPartitionError,
    KafkaError,
    MetadataTimeoutError,
    NoBrokersAvailableError,
    Producer,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from sdk.errors import MessageTooLargeError, UnknownTopicOrPartitionError


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"acks": 2}, "acks"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"acks": 1, "enable_idempotence": True}, "enable_idempotence"),
        (
            {"enable_idempotence": True, "max_in_flight_requests_per_connection": 6},
            "max_in_flight_requests_per_connection",
        ),
        ({"batch_size": 0}, "batch_size"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms"),
        ({"partitioner": "nope"}, "partitioner"),
        ({"partitioner": 42}, "partitioner"),
        ({"key_serializer": "str"}, "key_serializer"),
        ({"no_such_option": 1}, "no_such_option"),
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"transactional_id": "t", "enable_idempotence": False}, "enable_idempotence"),
        ({"bootstrap_servers": ""}, "bootstrap_servers"),
    ],
)
def test_bad_configuration_names_the_option(options, option):
    config = {"bootstrap_servers": "127.0.0.1:9"} | options
    with pytest.raises(ConfigError) as info:
        Producer(**config)
    assert info.value.option == option
    assert option in str(info.value)
    assert isinstance(info.value, ValueError)


def test_idempotence_defaults_follow_acks():
    assert Producer(bootstrap_servers="h:1").config.idempotent
    assert not Producer(bootstrap_servers="h:1", acks=1).config.idempotent
    assert not Producer(bootstrap_servers="h:1", max_in_flight_requests_per_connection=10).config.idempotent
    assert Producer(bootstrap_servers="h:1", max_batch_size=100).config.batch_size == 100


async def test_unreachable_bootstrap_fails_start():
    producer = Producer(bootstrap_servers="127.0.0.1:1", connect_timeout_ms=500)
    with pytest.raises(NoBrokersAvailableError):
        await producer.start()


async def test_send_before_start_and_after_stop(mock_cluster, topic_name):
    producer = Producer(bootstrap_servers=mock_cluster.bootstrap)
    with pytest.raises(IllegalStateError):
        await producer.send(topic_name, b"v")
    await producer.start()
    await producer.send_and_wait(topic_name, b"v")
    await producer.stop()
    with pytest.raises(ProducerClosedError):
        await producer.send(topic_name, b"v")
    with pytest.raises(ProducerClosedError):
        await producer.send_many(topic_name, [(None, b"v")])
    await producer.stop()  # twice is fine


async def test_oversized_records(mock_cluster, topic_name):
    async with Producer(
        bootstrap_servers=mock_cluster.bootstrap, max_request_size=1000, buffer_memory=5000
    ) as producer:
        with pytest.raises(RecordTooLargeError) as info:
            await producer.send(topic_name, b"x" * 2000)
        assert "max_request_size" in str(info.value)
        assert isinstance(info.value, MessageTooLargeError)
        await producer.send_and_wait(topic_name, b"x" * 500)  # still usable
    async with Producer(bootstrap_servers=mock_cluster.bootstrap, buffer_memory=1000) as producer:
        with pytest.raises(RecordTooLargeError, match="buffer_memory"):
            await producer.send(topic_name, b"x" * 2000)
        with pytest.raises(RecordTooLargeError):
            await producer.send_many(topic_name, [(None, b"ok"), (None, b"x" * 2000)])


async def test_serializer_failure(mock_cluster, topic_name):
    def broken(value):
        raise RuntimeError("cannot encode")

    async with Producer(bootstrap_servers=mock_cluster.bootstrap, value_serializer=broken) as producer:
        with pytest.raises(SerializationError) as info:
            await producer.send(topic_name, {"a": 1})
        assert isinstance(info.value.__cause__, RuntimeError)
    async with Producer(bootstrap_servers=mock_cluster.bootstrap) as producer:
        with pytest.raises(SerializationError, match="bytes"):
            await producer.send(topic_name, "text, not bytes")


async def _seconds_to_raise(
    error: type[Exception], call: Callable[[], Awaitable[object]], within: float, attempts: int = 3
) -> list[float]:
    """Seconds ``call`` took to raise ``error``, attempt by attempt, until one took under
    ``within``: waiting out a deadline is the client's behaviour and repeats on every attempt,
    while a scheduler stall on a loaded runner delays one."""
    timings: list[float] = []
    while len(timings) < attempts and not (timings and timings[-1] < within):
        started = time.monotonic()
        with pytest.raises(error):
            await call()
        timings.append(time.monotonic() - started)
    return timings


async def test_invalid_partition(mock_cluster, topic_name):
    async with Producer(bootstrap_servers=mock_cluster.bootstrap, max_block_ms=5000) as producer:
        # At once, not after waiting max_block_ms for the partition to appear.
        timings = await _seconds_to_raise(
            InvalidPartitionError, lambda: producer.send(topic_name, b"v", partition=17), within=4
        )
        assert timings[-1] < 4, timings
        with pytest.raises(InvalidPartitionError):
            await producer.send(topic_name, b"v", partition=-1)


async def test_unknown_topic_with_auto_create_off(broker_factory, topic_name):
    broker = broker_factory({"auto.create.topics.enable": False})
    async with Producer(bootstrap_servers=broker.bootstrap, max_block_ms=800) as producer:
        started = time.monotonic()
        with pytest.raises(MetadataTimeoutError) as info:
            await producer.send(topic_name, b"v")
        elapsed = time.monotonic() - started
        assert elapsed > 0.7, elapsed  # waited out max_block_ms
        if elapsed >= 5:  # not much longer than max_block_ms: timed again past a loaded moment
            timings = await _seconds_to_raise(
                MetadataTimeoutError, lambda: producer.send(topic_name, b"v"), within=5, attempts=2
            )
            assert timings[-1] < 5, [elapsed, *timings]
        assert info.value.topic == topic_name
        assert isinstance(info.value.last_error, UnknownTopicOrPartitionError)
        with pytest.raises(MetadataTimeoutError):
            await producer.partitions_for(topic_name)


async def test_memory_bound_exhausted(mock_cluster, proxy_factory, topic_name):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap,
        buffer_memory=4000,
        max_block_ms=300,
        linger_ms=0,
        request_timeout_ms=2000,
        delivery_timeout_ms=3000,
    ) as producer:
        await producer.send_and_wait(topic_name, b"warm", partition=0)
        proxy.pause()
        futures = []
        started = time.monotonic()
        with pytest.raises(BufferExhaustedError):
            for _ in range(100):
                futures.append(await producer.send(topic_name, b"x" * 200, partition=0))
        # Blocked for about max_block_ms (0.3 s); a loaded runner can add seconds, while ignoring
        # it would block for the 60 s default or until memory frees, far outside 10 s.
        assert 0.25 < time.monotonic() - started < 10
        assert 10 < len(futures) < 20
        proxy.resume()
        await asyncio.gather(*futures, return_exceptions=True)


async def test_delivery_timeout(mock_cluster, proxy_factory, topic_name):
    proxy = await proxy_factory(mock_cluster.bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap,
        linger_ms=0,
        request_timeout_ms=300,
        delivery_timeout_ms=600,
        retry_backoff_ms=50,
    ) as producer:
        await producer.send_and_wait(topic_name, b"warm", partition=1)
        proxy.pause()
        future = await producer.send(topic_name, b"lost", partition=1)
        started = time.monotonic()
        with pytest.raises(DeliveryTimeoutError) as info:
            await future
        # About delivery_timeout_ms (0.6 s); a loaded runner can add seconds, while ignoring it
        # would retry until the 120 s default, far outside 10 s.
        assert time.monotonic() - started < 10
        assert isinstance(info.value, KafkaError)
        proxy.resume()
