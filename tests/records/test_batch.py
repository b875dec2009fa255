"""RecordBatch and iter_batches: round trips, header views, and one error type per defect."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk.records.batch as batch_module
from sdk.protocol.errors import DecodeError
from sdk.records import (
    Compression,
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    InvalidBatchLengthError,
    InvalidMagicError,
    InvalidRecordCountError,
    InvalidRecordError,
    InvalidVarintError,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TruncatedBatchError,
    UnsupportedCompressionError,
    compress,
    iter_batches,
)

from .strategies import GOOD, MALFORMED_SECTIONS, batch_specs, build, fix_crc, raw_batch


def _batch(codec: Compression = Compression.NONE, n: int = 5, **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(codec, **kwargs)  # type: ignore[arg-type]
    for i in range(n):
        builder.append(1_000 + i, b"key%d" % i, b"value%d" % i, [("i", b"%d" % i)])
    return builder.build()


@settings(max_examples=120, deadline=None)
@given(batch_specs())
def test_round_trip_property(spec: dict) -> None:
    data = build(spec)
    batch = RecordBatch(data)
    batch.validate()
    recs = spec["records"]
    assert batch.base_offset == spec["base_offset"]
    assert batch.size_in_bytes == len(data)
    assert batch.magic == 2
    assert batch.compression == spec["compression"]
    assert batch.timestamp_type == spec["timestamp_type"]
    assert batch.is_transactional == spec["is_transactional"]
    assert batch.is_control == spec["is_control"]
    assert batch.partition_leader_epoch == spec["partition_leader_epoch"]
    assert batch.producer_id == spec["producer_id"]
    assert batch.producer_epoch == spec["producer_epoch"]
    assert batch.base_sequence == spec["base_sequence"]
    assert batch.record_count == len(recs)
    assert batch.last_offset_delta == len(recs) - 1
    assert batch.next_offset == spec["base_offset"] + len(recs)
    decoded = list(batch)
    assert len(decoded) == len(recs)
    max_ts = max((r[0] for r in recs), default=-1)
    assert batch.max_timestamp == max_ts
    for i, (record, (ts, key, value, headers)) in enumerate(zip(decoded, recs, strict=True)):
        assert record.offset == spec["base_offset"] + i
        assert record.timestamp == (max_ts if spec["timestamp_type"] else ts)
        assert record.key == key
        assert record.value == value
        assert record.headers == headers
        assert record.key is None or type(record.key) is bytes
        assert record.value is None or type(record.value) is bytes


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_buffer_kinds_and_positions(codec: Compression, kind: type) -> None:
    data = _batch(codec)
    expected = list(RecordBatch(data))
    padded = kind(b"\xaa" * 13 + data + b"\xbb" * 7)
    batch = RecordBatch(padded, 13)
    batch.validate()
    assert list(batch) == expected
    assert bytes(batch.raw) == data
    assert all(type(r.key) is bytes and type(r.value) is bytes for r in batch)


def test_raw_is_a_view_not_a_copy() -> None:
    buf = bytearray(_batch())
    raw = RecordBatch(buf).raw
    buf[0] = 0x7F
    assert raw[0] == 0x7F


def test_iteration_is_lazy_and_decompresses_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = batch_module.decompress

    def counting(codec: int, data: memoryview) -> bytes:
        calls.append(codec)
        return real(codec, data)

    monkeypatch.setattr(batch_module, "decompress", counting)
    batch = RecordBatch(_batch(Compression.ZSTD, n=10))
    assert calls == []
    it = iter(batch)
    first = next(it)
    assert first.offset == 0
    assert list(batch)[3].key == b"key3"
    assert calls == [Compression.ZSTD]


def test_log_append_time_uses_max_timestamp() -> None:
    builder = RecordBatchBuilder(timestamp_type=1)
    for ts in (10, 30, 20):
        builder.append(ts, None, b"v")
    batch = RecordBatch(builder.build())
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [30, 30, 30]


def test_derived_properties() -> None:
    batch = RecordBatch(_batch(base_offset=100, n=4, producer_id=9, producer_epoch=1, base_sequence=5))
    assert (batch.last_offset, batch.next_offset, batch.last_sequence) == (103, 104, 8)
    assert batch.has_delete_horizon is False
    assert "base_offset=100" in repr(batch)
    wrapped = RecordBatch(_batch(n=4, producer_id=9, producer_epoch=1, base_sequence=2**31 - 2))
    assert wrapped.last_sequence == 1  # Java wraps sequences past Integer.MAX_VALUE to 0
    assert RecordBatch(_batch(n=4)).last_sequence == -1


def test_record_value_semantics() -> None:
    a = Record(1, 2, b"k", None, [("h", b"v")])
    assert a == Record(1, 2, b"k", None, [("h", b"v")])
    assert a != Record(1, 2, b"k", b"", [("h", b"v")])
    assert a != (1, 2, b"k", None, [])
    assert "offset=1" in repr(a)


def test_iteration_without_crc_check() -> None:
    data = bytearray(_batch())
    data[17] ^= 0xFF  # damage the stored CRC only
    batch = RecordBatch(bytes(data))
    with pytest.raises(CrcMismatchError):
        list(batch)
    assert next(batch.iter_records(check_crc=False)).key == b"key0"


# -- one specific error per defect ----------------------------------------------------------------


def test_all_errors_are_decode_errors() -> None:
    for cls in (
        CrcMismatchError,
        DecompressionError,
        InvalidBatchLengthError,
        InvalidMagicError,
        InvalidRecordCountError,
        InvalidRecordError,
        InvalidVarintError,
        TruncatedBatchError,
        UnsupportedCompressionError,
    ):
        assert issubclass(cls, CorruptRecordError)
    assert issubclass(CorruptRecordError, DecodeError)
    assert issubclass(CorruptRecordError, ValueError)
    err = CrcMismatchError("bad", 17)
    assert (err.reason, err.offset) == ("bad", 17)
    assert "17" in str(err)


def test_crc_corruption() -> None:
    data = bytearray(_batch())
    data[70] ^= 0x01
    batch = RecordBatch(bytes(data))
    with pytest.raises(CrcMismatchError) as info:
        batch.validate()
    assert info.value.offset == 17
    with pytest.raises(CrcMismatchError):
        list(batch)


def test_crc_does_not_cover_base_offset_or_leader_epoch() -> None:
    data = bytearray(_batch())
    data[0:8] = b"\x01" * 8
    data[12:16] = b"\x02" * 4
    RecordBatch(bytes(data)).validate()


def test_truncation() -> None:
    data = _batch()
    with pytest.raises(TruncatedBatchError):
        RecordBatch(data[:60])
    with pytest.raises(TruncatedBatchError):
        RecordBatch(data, position=len(data) - 10)
    with pytest.raises(TruncatedBatchError):
        RecordBatch(data, position=-1)
    short = RecordBatch(data[:-1])
    with pytest.raises(TruncatedBatchError):
        short.validate()
    with pytest.raises(TruncatedBatchError):
        list(short)


def test_bad_magic() -> None:
    for magic in (0, 1, 3, -1):
        data = bytearray(_batch())
        data[16] = magic & 0xFF
        with pytest.raises(InvalidMagicError) as info:
            RecordBatch(bytes(data)).validate()
        assert info.value.offset == 16
        with pytest.raises(InvalidMagicError):
            list(iter_batches(bytes(data)))


def test_bad_batch_length() -> None:
    data = bytearray(_batch())
    for length in (48, 0, -1, -(2**31)):
        struct.pack_into(">i", data, 8, length)
        with pytest.raises(InvalidBatchLengthError):
            RecordBatch(bytes(data)).validate()
        with pytest.raises(InvalidBatchLengthError):
            list(iter_batches(bytes(data)))


def test_unsupported_codec() -> None:
    for codec_id in (5, 6, 7):
        data = raw_batch(b"", 0, attributes=codec_id)
        batch = RecordBatch(data)
        with pytest.raises(UnsupportedCompressionError):
            batch.validate()
        with pytest.raises(UnsupportedCompressionError):
            batch.compression  # noqa: B018
        with pytest.raises(UnsupportedCompressionError):
            list(batch)


def test_garbage_compressed_section() -> None:
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        batch = RecordBatch(raw_batch(b"\x00garbage-bytes-here", 1, attributes=int(codec)))
        batch.validate()  # the CRC is right: the producer wrote garbage
        with pytest.raises(DecompressionError):
            list(batch)


def test_handwritten_records_parse() -> None:
    assert [(r.offset, r.key, r.value) for r in RecordBatch(raw_batch(GOOD, 1))] == [(0, None, b"ab")]
    compressed = raw_batch(compress(Compression.GZIP, GOOD * 2), 2, attributes=1)
    assert [r.value for r in RecordBatch(compressed)] == [b"ab", b"ab"]


@pytest.mark.parametrize(("section", "count", "error"), MALFORMED_SECTIONS)
def test_malformed_records(section: bytes, count: int, error: type) -> None:
    for attributes, payload in ((0, section), (1, compress(Compression.GZIP, section))):
        batch = RecordBatch(raw_batch(payload, count, attributes=attributes))
        with pytest.raises(error):
            list(batch)


def test_count_too_high_when_more_bytes_follow_the_batch() -> None:
    # Zero-copy reading of a bytes buffer: the bytes after the batch must not be taken as records.
    following = raw_batch(GOOD, 1)
    for count in (2, 3):
        buf = raw_batch(GOOD, count) + following
        with pytest.raises(InvalidRecordCountError):
            list(RecordBatch(buf))
        with pytest.raises(InvalidRecordCountError):
            list(next(iter_batches(buf)))


def test_error_offsets_point_into_the_buffer() -> None:
    data = raw_batch(b"\x10\x00\x00\x00\x0aab\x00\x00", 1)
    with pytest.raises(InvalidRecordError) as info:
        list(RecordBatch(data))
    assert 61 <= info.value.offset < len(data)


# -- iter_batches ---------------------------------------------------------------------------------


def test_iter_batches_walks_concatenation() -> None:
    parts = [
        _batch(Compression.NONE, base_offset=0, n=3),
        _batch(Compression.GZIP, base_offset=3, n=2),
        _batch(Compression.ZSTD, base_offset=5, n=4),
    ]
    buf = b"".join(parts)
    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [0, 3, 5]
    assert [r.offset for b in batches for r in b] == list(range(9))
    assert [b.size_in_bytes for b in batches] == [len(p) for p in parts]
    assert list(iter_batches(b"")) == []
    assert [b.base_offset for b in iter_batches(buf, len(parts[0]))] == [3, 5]
    assert [b.base_offset for b in iter_batches(memoryview(buf))] == [0, 3, 5]


def test_iter_batches_stops_silently_at_a_truncated_last_batch() -> None:
    first = _batch(base_offset=0, n=2)
    second = _batch(Compression.LZ4, base_offset=2, n=3)
    buf = first + second
    for cut in range(len(first), len(buf)):
        assert [b.base_offset for b in iter_batches(buf[:cut])] == [0], cut
    for cut in range(len(first)):
        assert list(iter_batches(buf[:cut])) == [], cut


@settings(max_examples=40, deadline=None)
@given(st.lists(batch_specs(), min_size=1, max_size=4), st.data())
def test_iter_batches_property(specs: list[dict], data: st.DataObject) -> None:
    parts = [build(spec) for spec in specs]
    buf = b"".join(parts)
    cut = data.draw(st.integers(0, len(buf)))
    complete = 0
    total = 0
    for part in parts:
        if total + len(part) > cut:
            break
        total += len(part)
        complete += 1
    batches = list(iter_batches(buf[:cut]))
    assert len(batches) == complete
    for batch, spec in zip(batches, specs, strict=False):
        batch.validate()
        assert [r.value for r in batch] == [r[2] for r in spec["records"]]


def test_fix_crc_helper_is_faithful() -> None:
    data = _batch()
    assert fix_crc(data) == data
