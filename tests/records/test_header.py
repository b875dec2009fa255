"""Broker-side header helpers: read, assign offsets, leader epoch, LogAppendTime."""

from __future__ import annotations

import crc32c
import pytest

from sdk.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    InvalidBatchLengthError,
    RecordBatch,
    RecordBatchBuilder,
    TruncatedBatchError,
    assign_offsets,
    read_batch_header,
    set_log_append_time,
    set_partition_leader_epoch,
)


def _batch(codec: Compression = Compression.NONE, **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(codec, **kwargs)  # type: ignore[arg-type]
    for i, ts in enumerate((100, 300, 200)):
        builder.append(ts, b"k%d" % i, b"v%d" % i)
    return builder.build()


def test_header_size_and_fields() -> None:
    assert BATCH_HEADER_SIZE == 61
    data = _batch(producer_id=8, producer_epoch=2, base_sequence=10, is_transactional=True)
    header = read_batch_header(b"xx" + data, 2)
    assert isinstance(header, BatchHeader)
    assert header == BatchHeader(
        base_offset=0,
        batch_length=len(data) - 12,
        partition_leader_epoch=-1,
        magic=2,
        crc=crc32c.crc32c(data[21:]),
        attributes=0x10,
        last_offset_delta=2,
        base_timestamp=100,
        max_timestamp=300,
        producer_id=8,
        producer_epoch=2,
        base_sequence=10,
        record_count=3,
    )
    with pytest.raises(TruncatedBatchError):
        read_batch_header(data[:60])
    with pytest.raises(TruncatedBatchError):
        read_batch_header(data, len(data) - 60)


def test_assign_offsets_keeps_crc_valid() -> None:
    first, second = _batch(), _batch(Compression.ZSTD)
    buf = bytearray(first + second)
    assign_offsets(buf, 0, 1_000)
    assign_offsets(buf, len(first), 1_003)
    batches = [RecordBatch(buf), RecordBatch(buf, len(first))]
    for batch in batches:
        batch.validate()
    assert [r.offset for b in batches for r in b] == list(range(1_000, 1_006))
    assert read_batch_header(buf, len(first)).base_offset == 1_003


def test_set_partition_leader_epoch() -> None:
    buf = bytearray(_batch())
    set_partition_leader_epoch(buf, 0, 12)
    batch = RecordBatch(buf)
    batch.validate()
    assert batch.partition_leader_epoch == 12


@pytest.mark.parametrize("codec", list(Compression))
def test_set_log_append_time(codec: Compression) -> None:
    prefix = _batch()
    original = _batch(codec, is_transactional=True, producer_id=1, producer_epoch=0)
    buf = bytearray(prefix + original)
    set_log_append_time(buf, len(prefix), 9_999)
    batch = RecordBatch(buf, len(prefix))
    batch.validate()
    assert batch.timestamp_type == 1
    assert batch.max_timestamp == 9_999
    assert batch.compression == codec and batch.is_transactional  # other bits kept
    assert [r.timestamp for r in batch] == [9_999] * 3
    assert bytes(buf[: len(prefix)]) == prefix  # the neighbouring batch is untouched
    RecordBatch(buf).validate()


def test_helpers_refuse_broken_frames() -> None:
    data = _batch()
    for helper, arg in (
        (assign_offsets, 5),
        (set_partition_leader_epoch, 5),
        (set_log_append_time, 5),
    ):
        with pytest.raises(TruncatedBatchError):
            helper(bytearray(data[:-1]), 0, arg)
        with pytest.raises(TruncatedBatchError):
            helper(bytearray(data[:40]), 0, arg)
        short = bytearray(data)
        short[8:12] = (10).to_bytes(4, "big")
        with pytest.raises(InvalidBatchLengthError):
            helper(short, 0, arg)
