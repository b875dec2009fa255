"""A topic's ``compression.type`` decides the codec its batches are stored with (Kafka's
LogValidator): ``producer`` keeps the producer's codec, any other codec rewrites every produced
batch to it, keeping offsets, keys, values, headers, timestamps, producer ids and sequences."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from sdk.protocol.messages import CreateTopicsRequest, FetchRequest
from sdk.records import Compression, iter_batches
from tests.reference_broker.read_committed_helpers import read_committed_sdk, read_committed_values
from tests.reference_broker.wire import WireClient

_TARGETS = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest, broker: Any) -> str:
    """Our broker, or Apache Kafka (the oracle), as a bootstrap address."""
    if request.param == "reference_broker":
        return str(broker.bootstrap)
    return str(request.getfixturevalue("apache_kafka").bootstrap)


def _create(bootstrap: str, configs: dict[str, str]) -> str:
    name = f"recompress-{uuid.uuid4().hex[:8]}"
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
    with WireClient(bootstrap) as wire:
        result = wire.request(CreateTopicsRequest(timeout_ms=20_000, topics=[topic]), 5).topics[0]
    assert result.error_code == 0, result.error_message
    return name


def _stored_batches(bootstrap: str, topic: str) -> list[Any]:
    """The partition's batches as a Fetch returns them (their codec is the stored one)."""
    request = FetchRequest(
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 22, isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])])
    with WireClient(bootstrap) as wire:
        partition = wire.request(request, 11).responses[0].partitions[0]
    assert partition.error_code == 0
    return list(iter_batches(bytes(partition.records or b"")))


def _produce(bootstrap: str, topic: str, codec: str, count: int, **extra: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
                         "enable.idempotence": True, **extra})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode() * 20,
                         headers=[("h", f"{i}".encode())], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, count: int, isolation: str = "read_uncommitted") -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "isolation.level": isolation})
    consumer.subscribe([topic])
    got: list[Any] = []
    try:
        for _ in range(60):
            for message in consumer.consume(count, timeout=0.5):
                assert message.error() is None, message.error()
                got.append(message)
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("target", _TARGETS)
def test_batches_are_stored_in_the_topics_codec(broker: Any, target: str) -> None:
    topic = _create(broker.bootstrap, {"compression.type": target})
    _produce(broker.bootstrap, topic, "gzip", 20)
    batches = _stored_batches(broker.bootstrap, topic)
    expected = Compression.GZIP if target == "producer" else _codec(target)
    assert [b.compression for b in batches] == [expected] * len(batches)
    records = [r for b in batches for r in b]
    assert [r.offset for r in records] == list(range(20))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (f"k{i}".encode(), f"value-{i}".encode() * 20, [("h", f"{i}".encode())], 1_700_000_000_000 + i)
        for i in range(20)]
    assert all(b.producer_id >= 0 and b.producer_epoch == 0 for b in batches)
    sequences = [b.base_sequence for b in batches]
    assert sequences[0] == 0 and sequences == sorted(sequences)
    consumed = _consume(broker.bootstrap, topic, 20)
    assert [(m.offset(), m.key(), m.headers()) for m in consumed] == [
        (i, f"k{i}".encode(), [("h", f"{i}".encode())]) for i in range(20)]
    assert read_committed_sdk(broker.bootstrap, topic, 1, 20) == [
        (0, i, f"value-{i}".encode() * 20) for i in range(20)]


@pytest.mark.parametrize(("source", "target"), [("gzip", "zstd"), ("lz4", "lz4"), ("zstd", "uncompressed")])
def test_stored_codec_and_batch_count_match_kafka(bootstrap: str, source: str, target: str) -> None:
    topic = _create(bootstrap, {"compression.type": target, "compression.zstd.level": "7"})
    _produce(bootstrap, topic, source, 10, **{"linger.ms": 1000})
    batches = _stored_batches(bootstrap, topic)
    assert len(batches) == 1
    assert batches[0].compression == _codec(target)
    assert batches[0].record_count == 10


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_transactional_batches_recompressed_keep_read_committed(broker: Any, outcome: str) -> None:
    topic = _create(broker.bootstrap, {"compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip",
                         "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"tx-{i}".encode())
    producer.flush(30)
    if outcome == "commit":
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    batches = _stored_batches(broker.bootstrap, topic)
    data = [b for b in batches if not b.is_control]
    markers = [b for b in batches if b.is_control]
    assert data and all(b.compression == Compression.ZSTD and b.is_transactional for b in data)
    assert len(markers) == 1 and markers[0].compression == Compression.NONE
    expected = [f"tx-{i}".encode() for i in range(5)] if outcome == "commit" else []
    assert read_committed_values(broker.bootstrap, topic) == expected
    assert [v for _, _, v in read_committed_sdk(broker.bootstrap, topic, 1, len(expected))] == expected


def test_recompressed_batch_over_max_message_bytes_is_refused(broker: Any) -> None:
    topic = _create(broker.bootstrap, {"compression.type": "uncompressed", "max.message.bytes": "2000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd",
                         "message.max.bytes": 100_000, "batch.size": 100_000})
    errors: list[Any] = []
    producer.produce(topic, value=b"z" * 10_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"


def _codec(name: str) -> Compression:
    return {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
            "lz4": Compression.LZ4, "zstd": Compression.ZSTD}[name]


@pytest.mark.parametrize("version", [4, 9, 10])
def test_a_zstd_topic_is_served_to_every_fetch_version_as_on_kafka(bootstrap: str, version: int) -> None:
    """Kafka 4.1 serves a topic stored in zstd to Fetch v4-v9 as well (its sources once refused
    them with UNSUPPORTED_COMPRESSION_TYPE; the broker itself is the oracle)."""
    topic = _create(bootstrap, {"compression.type": "zstd"})
    _produce(bootstrap, topic, "gzip", 3)
    request = FetchRequest(
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    with WireClient(bootstrap) as wire:
        partition = wire.request(request, version).responses[0].partitions[0]
    assert partition.error_code == 0
    assert [b.compression for b in iter_batches(bytes(partition.records or b""))] == [Compression.ZSTD]


def test_the_brokers_compression_type_is_every_topics_default(broker_factory: Any) -> None:
    broker = broker_factory(config={"compression.type": "zstd"})
    default, own = _create(broker.bootstrap, {}), _create(broker.bootstrap, {"compression.type": "producer"})
    for topic in (default, own):
        _produce(broker.bootstrap, topic, "gzip", 5)
    assert {b.compression for b in _stored_batches(broker.bootstrap, default)} == {Compression.ZSTD}
    assert {b.compression for b in _stored_batches(broker.bootstrap, own)} == {Compression.GZIP}
