"""Bad produced data gets a specific error and loses nothing, over raw requests on the shared broker.

Each refused batch must leave the partition as it was: no offset taken, nothing readable, the
producer's sequence where it was, the other partitions of the same request written. Whatever
arrives, the answer is a Kafka error a client can act on, never UNKNOWN_SERVER_ERROR, and the
broker keeps serving.
"""

from __future__ import annotations

import random
import struct
import time
import uuid
from collections.abc import Callable

import crc32c
import pytest

from reference_broker.testing import BrokerProcess
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    CreateTopicsRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from sdk.records import Compression, RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient

# Offsets in a v2 batch (Kafka's DefaultRecordBatch).
BASE_OFFSET, LENGTH, MAGIC, CRC, ATTRIBUTES = 0, 8, 16, 17, 21
PRODUCER_ID, BASE_SEQUENCE, RECORD_COUNT = 43, 53, 57
CRC_FROM = ATTRIBUTES
TIMESTAMP_AFTER_MAX_MS = 60_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def fix_crc(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, CRC, crc32c.crc32c(bytes(data[CRC_FROM:])))
    return data


def good_batch(
    tag: str, count: int = 3, *, codec: Compression = Compression.NONE, timestamp: int | None = None
) -> bytes:
    builder = RecordBatchBuilder(codec)
    now = int(time.time() * 1000) if timestamp is None else timestamp
    for i in range(count):
        builder.append(now + i, f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), [("h", b"x")])
    return builder.build()


def create(client: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    request = CreateTopicsRequest(
        timeout_ms=10_000,
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ],
            )
        ],
    )
    assert client.request(request, 7).topics[0].error_code == 0


def produce_many(client: WireClient, topic: str, batches: dict[int, bytes]) -> dict[int, object]:
    """One ProduceRequest (v9, acks=all) with a batch per partition; the answers by partition."""
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=records)
                    for p, records in batches.items()
                ],
            )
        ],
    )
    answer = client.request(request, 9).responses[0].partition_responses
    return {r.index: r for r in answer}


def produce(client: WireClient, topic: str, records: bytes, partition: int = 0) -> object:
    return produce_many(client, topic, {partition: records})[partition]


def high_watermark(client: WireClient, topic: str, partition: int = 0) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)],
            )
        ],
    )
    answer = client.request(request, 8).topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.offset


def stored(client: WireClient, topic: str, partition: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of the partition as (key, value), in offset order."""
    raw = client.fetch_all(topic, partition)
    return [(r.key, r.value) for batch in iter_batches(raw) for r in batch]


def records_of(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for b in iter_batches(batch) for r in b]


@pytest.fixture
def client(broker: BrokerProcess):  # type: ignore[no-untyped-def]
    with WireClient(broker.bootstrap) as wire:
        yield wire


def _edit(offset: int, fmt: str, value: int, *, crc: bool = True) -> Callable[[bytes], bytes]:
    def damage(batch: bytes) -> bytes:
        data = bytearray(batch)
        struct.pack_into(fmt, data, offset, value)
        return bytes(fix_crc(data) if crc else data)

    return damage


def _flip_last_byte(batch: bytes) -> bytes:
    return batch[:-1] + bytes([batch[-1] ^ 0x55])


def _truncate(batch: bytes) -> bytes:
    return batch[:-7]


def _record_count_plus_one(batch: bytes) -> bytes:
    (count,) = struct.unpack_from(">i", batch, RECORD_COUNT)
    return _edit(RECORD_COUNT, ">i", count + 1)(batch)


def _far_future(batch: bytes) -> bytes:
    return good_batch("future", timestamp=int(time.time() * 1000) + 10 * TIMESTAMP_AFTER_MAX_MS)


def _gzip_flag_on_plain_records(batch: bytes) -> bytes:
    return _edit(ATTRIBUTES, ">h", int(Compression.GZIP))(batch)


MALFORMED = {
    "crc does not match": (_flip_last_byte, ErrorCode.CORRUPT_MESSAGE),
    "batch cut short": (_truncate, ErrorCode.CORRUPT_MESSAGE),
    "length beyond the data": (_edit(LENGTH, ">i", 10_000), ErrorCode.CORRUPT_MESSAGE),
    "base offset not 0": (_edit(BASE_OFFSET, ">q", 5), ErrorCode.INVALID_RECORD),
    "magic 1": (_edit(MAGIC, ">b", 1, crc=False), ErrorCode.INVALID_RECORD),
    "one record more than there are": (_record_count_plus_one, ErrorCode.INVALID_RECORD),
    "control batch from a client": (_edit(ATTRIBUTES, ">h", 0x20), ErrorCode.INVALID_RECORD),
    "transactional without producer id": (_edit(ATTRIBUTES, ">h", 0x10), ErrorCode.INVALID_RECORD),
    "producer id without sequence": (_edit(PRODUCER_ID, ">q", 7), ErrorCode.INVALID_RECORD),
    "claims LogAppendTime": (_edit(ATTRIBUTES, ">h", 0x08), ErrorCode.INVALID_TIMESTAMP),
    "timestamp too far ahead": (_far_future, ErrorCode.INVALID_TIMESTAMP),
    "gzip flag on plain records": (_gzip_flag_on_plain_records, ErrorCode.CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_batch_gets_its_error_and_takes_no_offset(client: WireClient, case: str) -> None:
    damage, expected = MALFORMED[case]
    topic = unique("bad-produce")
    create(client, topic, configs={"message.timestamp.after.max.ms": str(TIMESTAMP_AFTER_MAX_MS)})
    first = good_batch("first")
    assert produce(client, topic, first).error_code == 0
    refused = produce(client, topic, damage(good_batch("bad")))
    assert (refused.error_code, refused.base_offset) == (expected, -1), refused
    assert refused.error_message  # a reason the client can log, not just a number
    assert high_watermark(client, topic) == 3
    after = good_batch("after")
    accepted = produce(client, topic, after)
    assert (accepted.error_code, accepted.base_offset) == (0, 3)
    assert stored(client, topic) == records_of(first) + records_of(after)


def test_a_bad_partition_does_not_stop_the_others_of_the_request(client: WireClient) -> None:
    topic = unique("bad-one-of-three")
    create(client, topic, partitions=3)
    batches = {p: good_batch(f"p{p}") for p in range(3)}
    answers = produce_many(client, topic, {0: batches[0], 1: _flip_last_byte(batches[1]), 2: batches[2]})
    assert [answers[p].error_code for p in range(3)] == [0, ErrorCode.CORRUPT_MESSAGE, 0]
    assert stored(client, topic, 0) == records_of(batches[0])
    assert stored(client, topic, 1) == []
    assert stored(client, topic, 2) == records_of(batches[2])


def test_a_refused_idempotent_batch_leaves_the_sequence_where_it_was(client: WireClient) -> None:
    """The producer retries the refused sequence with good data: accepted in order, nothing
    duplicated or skipped, as if the bad batch had never arrived."""
    topic = unique("bad-idempotent")
    create(client, topic, configs={"cleanup.policy": "compact"})
    ids = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
    assert ids.error_code == 0

    def idempotent(sequence: int, keys: list[bytes | None]) -> bytes:
        builder = RecordBatchBuilder(
            producer_id=ids.producer_id, producer_epoch=ids.producer_epoch, base_sequence=sequence
        )
        for i, key in enumerate(keys):
            builder.append(int(time.time() * 1000), key, b"v%d" % i)
        return builder.build()

    assert produce(client, topic, idempotent(0, [b"a", b"b"])).error_code == 0
    refused = produce(client, topic, idempotent(2, [b"c", None, b"e"]))
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1]
    retried = produce(client, topic, idempotent(2, [b"c", b"d", b"e"]))
    assert (retried.error_code, retried.base_offset) == (0, 2)
    assert [key for key, _ in stored(client, topic)] == [b"a", b"b", b"c", b"d", b"e"]


def test_random_damage_is_refused_with_a_kafka_error_or_stored_exactly(
    broker: BrokerProcess, client: WireClient
) -> None:
    """Single damaged bytes anywhere in a batch, with the CRC repaired half the time so the damage
    reaches the checks behind it. Every answer is success or a specific Kafka error; what was
    accepted is exactly what is stored; the broker logs no internal failure."""
    topic = unique("bad-random")
    create(client, topic)
    rng = random.Random(20261124)
    expected: list[tuple[bytes | None, bytes | None]] = []
    for attempt in range(120):
        codec = rng.choice([Compression.NONE, Compression.NONE, Compression.GZIP])
        data = bytearray(good_batch(f"r{attempt}", count=rng.randint(1, 4), codec=codec))
        position = rng.randrange(len(data))
        data[position] ^= rng.randrange(1, 256)
        if rng.random() < 0.5:
            fix_crc(data)
        answer = produce(client, topic, bytes(data))
        assert answer.error_code != ErrorCode.UNKNOWN_SERVER_ERROR, (attempt, position, answer)
        if answer.error_code == 0:
            expected += records_of(bytes(data))
        else:
            assert answer.base_offset == -1 and answer.error_message, answer
    assert high_watermark(client, topic) == len(expected)
    assert stored(client, topic) == expected
    assert "Traceback" not in broker.stderr()
