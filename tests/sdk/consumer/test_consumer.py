"""sdk.Consumer in assign mode against the reference broker and librdkafka's mock cluster.

What our producer or confluent-kafka's writes, the consumer must read identically (keys, values,
headers, timestamps, every codec); positions, seeks, pauses, offset lookups, resets and commits
behave as aiokafka's do.
"""

from __future__ import annotations

import asyncio
import time

import confluent_kafka
import pytest

from sdk import Producer
from sdk.consumer import Consumer, ConsumerRecord, OffsetAndTimestamp, TopicPartition
from sdk.consumer.errors import (
    ConsumerStoppedError,
    NoGroupIdError,
    NoOffsetForPartitionError,
    OffsetResetOutOfRangeError,
)
from sdk.errors import ConfigError, IllegalStateError, OffsetOutOfRangeError

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def consumer_for(kafka, **kwargs) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("fetch_max_wait_ms", 100)
    return Consumer(bootstrap_servers=kafka.bootstrap, **kwargs)


async def read_n(consumer: Consumer, n: int, timeout: float = 15) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    async with asyncio.timeout(timeout):
        while len(got) < n:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(records)
    return got


def all_partitions(topic: str, count: int = 4) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


async def produce(kafka, topic: str, count: int, **config) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp) of ``count`` records sent by our producer."""
    sent = []
    async with Producer(bootstrap_servers=kafka.bootstrap, **config) as producer:
        futures = []
        for i in range(count):
            key = None if i % 7 == 0 else b"key-%d" % i
            value = None if i % 11 == 5 else b"value-%d-" % i + bytes(range(i % 50))
            headers = [("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
            timestamp = 1_700_000_000_000 + i
            futures.append(
                (key, value, headers, timestamp, await producer.send(topic, value, key=key,
                                                                     headers=headers, timestamp_ms=timestamp))
            )
        for key, value, headers, timestamp, future in futures:
            md = await future
            sent.append((md.partition, md.offset, key, value, tuple(headers), timestamp))
    return sent


def as_rows(records: list[ConsumerRecord]) -> list[tuple]:
    return sorted(
        (r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records
    )


@pytest.mark.parametrize("compression", CODECS)
async def test_reads_what_our_producer_wrote(kafka, topic_name, compression):
    topic = await kafka.create_topic(topic_name)
    sent = await produce(kafka, topic, 300, compression_type=compression, linger_ms=20)
    async with consumer_for(kafka) as consumer:
        consumer.assign(all_partitions(topic))
        got = await read_n(consumer, len(sent))
        assert as_rows(got) == sorted(sent)
        record = got[0]
        assert record.topic == topic and record.timestamp_type == 0 and record.checksum is None
        for r in got:
            assert r.serialized_key_size == (-1 if r.key is None else len(r.key))
            assert r.serialized_value_size == (-1 if r.value is None else len(r.value))
        for tp in all_partitions(topic):
            count = sum(1 for row in sent if row[0] == tp.partition)
            assert await consumer.position(tp) == count == consumer.highwater(tp)
        assert await consumer.getmany(timeout_ms=200) == {}


@pytest.mark.parametrize("compression", CODECS)
async def test_reads_what_confluent_kafka_wrote(kafka, topic_name, compression):
    topic = await kafka.create_topic(topic_name)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap, "compression.type": compression or "none", "linger.ms": 10}
    )
    sent = []

    def delivered(err, msg, headers, timestamp):
        assert err is None, err
        sent.append((msg.partition(), msg.offset(), msg.key(), msg.value(), headers, timestamp))

    for i in range(200):
        headers = (("n", b"%d" % i),) if i % 2 else ()
        timestamp = 1_600_000_000_000 + i
        producer.produce(
            topic,
            value=b"v%d" % i * (i % 5 + 1),
            key=None if i % 4 == 0 else b"k%d" % i,
            headers=list(headers) or None,
            timestamp=timestamp,
            on_delivery=lambda err, msg, h=headers, ts=timestamp: delivered(err, msg, h, ts),
        )
    assert producer.flush(15) == 0
    async with consumer_for(kafka) as consumer:
        consumer.assign(all_partitions(topic))
        got = await read_n(consumer, len(sent))
    assert as_rows(got) == sorted(sent)


async def test_aiokafka_style_example(kafka, topic_name):
    """The calls of aiokafka's manual-assignment example, unchanged but for the class name."""
    topic = await kafka.create_topic(topic_name)
    await produce(kafka, topic, 20)
    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        key_deserializer=lambda k: k and k.decode(),
        value_deserializer=lambda v: v and bytes(v),
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        seen = 0
        expected = (await consumer.end_offsets([tp]))[tp]
        async for msg in consumer:
            assert msg.topic == topic and msg.partition == 0
            assert msg.key is None or msg.key.startswith("key-")
            seen += 1
            if msg.offset + 1 == expected:
                break
        assert seen == expected
        msg = None
        await consumer.seek_to_beginning(tp)
        msg = await consumer.getone()
        assert msg.offset == 0
    finally:
        await consumer.stop()
    with pytest.raises(ConsumerStoppedError):
        await consumer.getone()
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany()


async def test_seek_position_pause_and_max_records(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
        for partition in (0, 1):
            for i in range(50):
                await producer.send(topic, b"%d-%d" % (partition, i), partition=partition)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with consumer_for(kafka) as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.assignment() == {tp0, tp1}
        assert await consumer.position(tp0) == 0
        batch = await consumer.getmany(tp0, timeout_ms=5000, max_records=7)
        assert list(batch) == [tp0] and [r.offset for r in batch[tp0]] == list(range(7))
        assert await consumer.position(tp0) == 7

        consumer.seek(tp0, 40)
        batch = await consumer.getmany(tp0, timeout_ms=5000)
        assert batch[tp0][0].offset == 40 and batch[tp0][-1].offset <= 49

        consumer.pause(tp1)
        assert consumer.paused() == {tp1}
        consumer.seek(tp0, 49)
        async with asyncio.timeout(10):
            while True:
                batch = await consumer.getmany(timeout_ms=300)
                assert tp1 not in batch
                if not batch:
                    break
        consumer.resume(tp1)
        got = await read_n(consumer, 50)
        assert {r.partition for r in got} == {1} and [r.offset for r in got] == list(range(50))

        assert await consumer.seek_to_end(tp0)
        assert await consumer.position(tp0) == 50
        consumer.seek(tp0, 10)
        assert (await consumer.getone(tp0)).offset == 10
        with pytest.raises(IllegalStateError):
            consumer.seek(TopicPartition(topic, 3), 0)
        with pytest.raises(IllegalStateError):
            await consumer.getmany(TopicPartition(topic, 3))


async def test_offset_lookups(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    tp = TopicPartition(topic, 2)
    async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
        for i in range(10):
            await producer.send(topic, b"x", partition=2, timestamp_ms=1_000_000 + 10 * i)
    async with consumer_for(kafka) as consumer:
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.partitions_for_topic(topic) in ({0, 1, 2, 3}, None)
        assert topic in await consumer.topics()
        if kafka.kind != "mock":  # the mock answers -1 for timestamp lookups
            found = await consumer.offsets_for_times({tp: 1_000_035})
            assert found == {tp: OffsetAndTimestamp(4, 1_000_040)}
            assert await consumer.offsets_for_times({tp: 2_000_000}) == {tp: None}


async def test_auto_offset_reset_latest_and_none(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
        for _ in range(5):
            await producer.send(topic, b"old", partition=0)
        async with consumer_for(kafka, auto_offset_reset="latest") as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 5
            await producer.send_and_wait(topic, b"new", partition=0)
            got = await read_n(consumer, 1)
            assert [(r.offset, r.value) for r in got] == [(5, b"new")]
    async with consumer_for(kafka, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            await consumer.getmany(timeout_ms=1000)


async def test_out_of_range_position_resets_or_raises(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    tp = TopicPartition(topic, 1)
    async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
        for i in range(3):
            await producer.send(topic, b"%d" % i, partition=1)
    async with consumer_for(kafka, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        got = await read_n(consumer, 3)
        assert [r.offset for r in got] == [0, 1, 2]
    async with consumer_for(kafka, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        with pytest.raises(OffsetResetOutOfRangeError) as info:
            async with asyncio.timeout(10):
                while True:
                    await consumer.getmany(timeout_ms=500)
        assert isinstance(info.value, OffsetOutOfRangeError) and info.value.offsets == {tp: 1000}
        consumer.seek(tp, 2)
        got = await read_n(consumer, 1)
        assert [r.value for r in got] == [b"2"]


async def test_commit_and_committed_in_assign_mode(mock_cluster, unique):
    bootstrap = mock_cluster.bootstrap
    topic = unique("commits")
    group = unique("group")
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(20):
            await producer.send(topic, b"%d" % i, partition=0)
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        assert await consumer.committed(tp) is None
        got = await consumer.getmany(tp, timeout_ms=5000, max_records=8)
        assert len(got[tp]) == 8
        await consumer.commit()
        assert await consumer.committed(tp) == 8
        await consumer.commit({tp: (15, "checkpoint")})
        assert await consumer.committed(tp) == 15
        assert await consumer.seek_to_committed(tp) == {tp: 15}
        assert await consumer.position(tp) == 15
        assert consumer.group_metadata().group_id == group
    # A new consumer of the group starts from the committed offset.
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest") as again:
        again.assign([tp])
        got = await read_n(again, 5)
        assert [r.offset for r in got] == list(range(15, 20))


async def test_without_group_commit_and_group_metadata_are_refused(kafka):
    async with consumer_for(kafka) as consumer:
        with pytest.raises(NoGroupIdError):
            await consumer.commit()
        with pytest.raises(NoGroupIdError):
            consumer.group_metadata()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("auto_offset_reset", "smallest"),
        ("isolation_level", "committed"),
        ("fetch_max_bytes", 0),
        ("max_poll_records", -1),
        ("heartbeat_interval_ms", 20000),
        ("key_deserializer", "utf-8"),
        ("security_protocol", "TLS"),
        ("group_instance_id", "static-1"),
        ("check_crcs", "yes"),
    ],
)
def test_bad_settings_name_the_option(option, value):
    with pytest.raises(ConfigError) as info:
        Consumer(bootstrap_servers="127.0.0.1:1", **{option: value})
    assert info.value.option == option


async def test_calls_before_start_and_stop_twice():
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(IllegalStateError):
        await consumer.getmany()
    await consumer.stop()
    await consumer.stop()


async def test_stop_ends_a_waiting_poll(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    consumer = consumer_for(kafka)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    waiting = asyncio.ensure_future(consumer.getmany(timeout_ms=30_000))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await consumer.stop()
    with pytest.raises(ConsumerStoppedError):
        await waiting
    # Ended by the stop, not by the poll's 30 s timeout: 15 s leaves a loaded runner room.
    assert time.monotonic() - started < 15


async def test_small_fetches_with_prefetch_keep_order_and_follow_seeks(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=kafka.bootstrap, batch_size=1000, linger_ms=2) as producer:
        for i in range(600):
            await producer.send(topic, b"%05d" % i + b"." * 40, partition=0)
    # Each fetch returns a batch or two, so the next one is prefetched while records are taken.
    async with consumer_for(kafka, max_partition_fetch_bytes=1500, max_poll_records=25) as consumer:
        consumer.assign([tp])
        got = await read_n(consumer, 300)
        assert [r.offset for r in got] == list(range(len(got)))
        consumer.seek(tp, 100)
        again = await read_n(consumer, 500)
        assert [r.offset for r in again] == list(range(100, 100 + len(again)))
        assert [int(r.value[:5]) for r in again] == [r.offset for r in again]


@pytest.mark.parametrize("fetch_version", [4, 11, 12])
async def test_older_fetch_versions_read_the_same(kafka, topic_name, monkeypatch, fetch_version):
    """Fetch v13+ names topics by id; older versions by name (and v4 has no log start offset)."""
    from sdk.client import connection

    monkeypatch.setitem(connection.CLIENT_MAX_VERSIONS, 1, fetch_version)
    topic = await kafka.create_topic(topic_name)
    sent = await produce(kafka, topic, 60, compression_type="gzip")
    async with consumer_for(kafka) as consumer:
        consumer.assign(all_partitions(topic))
        got = await read_n(consumer, len(sent))
        assert as_rows(got) == sorted(sent)
        assert consumer.highwater(TopicPartition(topic, 0)) == sum(1 for row in sent if row[0] == 0)


async def test_getone_advances_the_position_record_by_record(kafka, topic_name):
    topic = await kafka.create_topic(topic_name)
    tp = TopicPartition(topic, 3)
    async with Producer(bootstrap_servers=kafka.bootstrap) as producer:
        for i in range(30):
            await producer.send(topic, b"%d" % i, partition=3)
    async with consumer_for(kafka) as consumer:
        consumer.assign([tp])
        for expected in range(3):
            record = await consumer.getone()
            assert record.offset == expected
            assert await consumer.position(tp) == expected + 1
        batch = await consumer.getmany(tp, timeout_ms=5000, max_records=5)
        assert [r.offset for r in batch[tp]] == [3, 4, 5, 6, 7]
        assert (await consumer.getone(tp)).offset == 8
        consumer.seek(tp, 20)
        assert (await consumer.getone()).offset == 20
        consumer.pause(tp)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await consumer.getone()
        consumer.resume(tp)
        assert (await consumer.getone()).offset == 21


async def test_log_append_time_topics_report_the_broker_timestamp(broker, unique):
    from sdk.client import KafkaClient
    from sdk.protocol import messages

    topic = unique("append-time")
    client = KafkaClient(broker.bootstrap)
    await client.start()
    try:
        topic_config = messages.CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(
            name="message.timestamp.type", value="LogAppendTime"
        )
        response = await client.send_to_any(messages.CreateTopicsRequest(
            topics=[messages.CreateTopicsRequest.CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, configs=[topic_config])],
            timeout_ms=10000,
        ))
        assert response.topics[0].error_code == 0, response
    finally:
        await client.close()
    before = int(time.time() * 1000)
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(5):
            await producer.send(topic, b"%d" % i, timestamp_ms=1_000 + i)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got = await read_n(consumer, 5)
    assert {r.timestamp_type for r in got} == {1}
    assert all(before <= r.timestamp <= int(time.time() * 1000) for r in got)


def test_aiokafka_options_without_meaning_warn_and_unknown_ones_are_config_errors():
    with pytest.warns(UserWarning, match="api_version"):
        consumer = Consumer(bootstrap_servers="127.0.0.1:1", api_version="auto")
    assert consumer.config.request_timeout_ms == 40000  # aiokafka's consumer default
    with pytest.warns(DeprecationWarning, match="loop"):
        Consumer(bootstrap_servers="127.0.0.1:1", loop=None)
    with pytest.raises(ConfigError) as info:
        Consumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait=10)
    assert info.value.option == "fetch_max_wait"


async def test_aiokafka_consumer_alias():
    import sdk

    assert sdk.AIOKafkaConsumer is Consumer


def test_aiokafka_consumer_exception_names_are_importable_from_sdk_errors():
    import aiokafka.errors

    import sdk.errors
    from sdk.consumer import errors as consumer_errors

    for name in ("CommitFailedError", "ConsumerStoppedError", "NoOffsetForPartitionError"):
        assert hasattr(aiokafka.errors, name), name
        assert getattr(sdk.errors, name) is getattr(consumer_errors, name)
        assert issubclass(getattr(sdk.errors, name), sdk.errors.KafkaError)
        assert name in sdk.errors.__all__
    with pytest.raises(AttributeError):
        sdk.errors.NoSuchError  # noqa: B018
