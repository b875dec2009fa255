"""RecordBatchBuilder: exact header and record bytes, size accounting, flags."""

from __future__ import annotations

import time

import crc32c
import pytest

from sdk.records import (
    BATCH_HEADER_SIZE,
    Compression,
    RecordBatch,
    RecordBatchBuilder,
    encode_headers,
    read_batch_header,
)


def test_single_record_bytes_are_exact() -> None:
    builder = RecordBatchBuilder(base_offset=7)
    assert builder.append(1_000, b"k", b"vv") == 0
    data = builder.build()
    # length 9 (zigzag 0x12): attrs, ts delta 0, offset delta 0, key len 1, b"k", value len 2,
    # b"vv", no headers
    assert data[BATCH_HEADER_SIZE:] == b"\x12" + b"\x00\x00\x00\x02k\x04vv\x00"
    header = read_batch_header(data)
    assert header.base_offset == 7
    assert header.batch_length == len(data) - 12
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert header.attributes == 0
    assert header.last_offset_delta == 0
    assert header.base_timestamp == header.max_timestamp == 1_000
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.record_count == 1
    assert header.crc == crc32c.crc32c(data[21:])


def test_null_key_value_and_headers_encoding() -> None:
    builder = RecordBatchBuilder()
    builder.append(5, None, None, [("h", None), ("é", b"\x00")])
    body = builder.build()[BATCH_HEADER_SIZE:]
    headers = b"\x04" + b"\x02h\x01" + b"\x04\xc3\xa9\x02\x00"
    assert encode_headers([("h", None), ("é", b"\x00")]) == headers
    record = b"\x00\x00\x00\x01\x01" + headers
    assert body == bytes([len(record) * 2]) + record


def test_offset_deltas_and_timestamps() -> None:
    builder = RecordBatchBuilder()
    stamps = [500, 300, 900, 100]
    assert [builder.append(ts, None, b"v") for ts in stamps] == [0, 1, 2, 3]
    assert builder.record_count == 4
    data = builder.build()
    header = read_batch_header(data)
    assert header.base_timestamp == 500  # the first record's, deltas may be negative
    assert header.max_timestamp == 900
    assert header.last_offset_delta == 3
    assert [r.timestamp for r in RecordBatch(data)] == stamps
    assert [r.offset for r in RecordBatch(data)] == [0, 1, 2, 3]


def test_attribute_bits() -> None:
    cases = [
        ({}, 0),
        ({"compression": Compression.ZSTD}, 4),
        ({"timestamp_type": 1}, 0x08),
        ({"is_transactional": True, "producer_id": 1, "producer_epoch": 0}, 0x10),
        ({"is_control": True}, 0x20),
        ({"compression": Compression.LZ4, "is_transactional": True, "is_control": True}, 0x33),
    ]
    for kwargs, attributes in cases:
        builder = RecordBatchBuilder(**kwargs)
        builder.append(1, b"k", b"v")
        assert read_batch_header(builder.build()).attributes == attributes, kwargs


def test_producer_fields_and_leader_epoch() -> None:
    builder = RecordBatchBuilder(
        producer_id=123456789012,
        producer_epoch=7,
        base_sequence=42,
        partition_leader_epoch=9,
    )
    builder.append(1, None, b"v")
    header = read_batch_header(builder.build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123456789012, 7, 42)
    assert header.partition_leader_epoch == 9
    builder.set_producer_state(5, 6, 7)
    header = read_batch_header(builder.build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 6, 7)


def test_batch_size_limit() -> None:
    builder = RecordBatchBuilder(batch_size=BATCH_HEADER_SIZE + 30)
    # The first record is accepted even though it alone exceeds the limit.
    assert builder.append(1, None, b"x" * 100) == 0
    assert builder.append(99, None, b"y") is None
    assert builder.record_count == 1
    assert read_batch_header(builder.build()).max_timestamp == 1  # the refused record left no trace
    builder = RecordBatchBuilder(batch_size=BATCH_HEADER_SIZE + 20)
    assert builder.append(1, None, b"a") == 0  # 8 bytes
    assert builder.append(1, None, b"b") == 1  # 16 bytes
    assert builder.estimated_size() == BATCH_HEADER_SIZE + 16
    assert builder.append(1, None, b"c") is None  # would be 24
    assert builder.estimated_size() == BATCH_HEADER_SIZE + 16
    assert [r.value for r in RecordBatch(builder.build())] == [b"a", b"b"]


def test_rejected_append_leaves_no_trace() -> None:
    builder = RecordBatchBuilder()
    builder.append(1, b"k", b"v")
    before = builder.build()
    with pytest.raises(TypeError):
        builder.append(2, "not bytes", b"v")  # type: ignore[arg-type]
    assert builder.build() == before
    assert builder.record_count == 1


def test_estimated_size_is_exact_when_uncompressed() -> None:
    builder = RecordBatchBuilder()
    assert builder.estimated_size() == BATCH_HEADER_SIZE
    for i in range(50):
        builder.append(i * 1000, b"key%d" % i, b"v" * i, [("h", b"x")] if i % 2 else ())
        assert builder.estimated_size() == len(builder.build())


def test_compressed_build_is_smaller_and_header_is_plain() -> None:
    for codec in Compression:
        builder = RecordBatchBuilder(codec)
        for i in range(100):
            builder.append(1_000 + i, b"key", b"the same value " * 4)
        data = builder.build()
        header = read_batch_header(data)
        assert header.record_count == 100
        assert header.batch_length == len(data) - 12
        assert header.crc == crc32c.crc32c(data[21:])
        if codec != Compression.NONE:
            assert len(data) < builder.estimated_size() // 3, codec


def test_none_timestamp_means_now() -> None:
    builder = RecordBatchBuilder()
    before = int(time.time() * 1000)
    builder.append(None, None, b"v")
    after = int(time.time() * 1000)
    (record,) = RecordBatch(builder.build())
    assert before <= record.timestamp <= after


def test_empty_batch() -> None:
    data = RecordBatchBuilder().build()
    assert len(data) == BATCH_HEADER_SIZE
    header = read_batch_header(data)
    assert header.record_count == 0
    assert header.base_timestamp == header.max_timestamp == -1
    batch = RecordBatch(data)
    batch.validate()
    assert list(batch) == []
    for codec in Compression:
        assert list(RecordBatch(RecordBatchBuilder(codec).build())) == []


def test_build_is_repeatable_and_append_continues() -> None:
    builder = RecordBatchBuilder(Compression.GZIP)
    builder.append(1, b"a", b"1")
    first = builder.build()
    assert builder.build() == first
    builder.append(2, b"b", b"2")
    assert [r.key for r in RecordBatch(builder.build())] == [b"a", b"b"]


def test_bytes_like_inputs_and_large_fields() -> None:
    builder = RecordBatchBuilder()
    big = b"z" * 20_000  # beyond the varint cache
    builder.append(1, bytearray(b"ba"), memoryview(b"mv"))
    builder.append(1 + 10**6, big, big, [("k" * 9000, big)])
    for _ in range(9000):  # offset deltas beyond the cache
        builder.append(2, None, None)
    records = list(RecordBatch(builder.build()))
    assert (records[0].key, records[0].value) == (b"ba", b"mv")
    assert records[1].key == records[1].value == big
    assert records[1].timestamp == 1 + 10**6
    assert records[1].headers == [("k" * 9000, big)]
    assert records[-1].offset == 9001


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder(Compression(4) + 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)
    assert "records=0" in repr(RecordBatchBuilder())
    for field, value in (("producer_epoch", 2**15), ("base_offset", 2**63), ("base_sequence", -(2**31) - 1)):
        with pytest.raises(ValueError, match="out of range"):
            RecordBatchBuilder(**{field: value}).build()  # type: ignore[arg-type]
    assert RecordBatchBuilder(2).compression is Compression.SNAPPY
