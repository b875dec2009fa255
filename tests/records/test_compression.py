"""Codecs: round trips, the formats Kafka peers write, and refusal of garbage and bombs."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from aiokafka import codec as aio_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import (
    Compression,
    DecompressionError,
    DecompressionLimitError,
    UnsupportedCompressionError,
    compress,
    decompress,
    decompression_limit,
)
from sdk.records import compression as compression_module

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]
ZEROS = bytes(1_000_000)


def test_codec_ids_match_kafka() -> None:
    assert [(c.name, int(c)) for c in Compression] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 300])
def test_round_trip_fixed(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000), st.sampled_from([None, 1]))
def test_round_trip_property(codec: Compression, data: bytes, level: int | None) -> None:
    if codec in (Compression.NONE, Compression.SNAPPY):
        level = None
    assert decompress(codec, compress(codec, data, level)) == data


def test_compressed_output_is_smaller_for_repetitive_data() -> None:
    data = b"kafka record " * 1000
    for codec in COMPRESSED:
        assert len(compress(codec, data)) < len(data) // 5, codec


def test_gzip_is_a_gzip_member_and_members_concatenate() -> None:
    packed = compress(Compression.GZIP, b"abc")
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == b"abc"
    two = gzip.compress(b"first-") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, two) == b"first-second"
    # Trailing non-gzip bytes are ignored, as Java's GZIPInputStream does.
    assert decompress(Compression.GZIP, packed + b"\x00\x00junk") == b"abc"


def test_gzip_truncated_is_an_error() -> None:
    packed = compress(Compression.GZIP, bytes(range(256)) * 10)
    with pytest.raises(DecompressionError):
        decompress(Compression.GZIP, packed[:-12])


def _xerial(data: bytes, block: int) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


def test_snappy_writes_raw_and_reads_xerial() -> None:
    data = bytes(range(256)) * 100
    assert compress(Compression.SNAPPY, data) == bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, _xerial(data, 1000)) == data
    assert decompress(Compression.SNAPPY, _xerial(b"", 1000)) == b""
    # aiokafka (like the Java client) writes the xerial framing by default.
    assert decompress(Compression.SNAPPY, aio_codec.snappy_encode(data)) == data


def test_snappy_xerial_bad_block_lengths() -> None:
    framed = bytearray(_xerial(b"hello world" * 50, 200))
    struct.pack_into(">i", framed, 16, 10_000)
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, bytes(framed))
    struct.pack_into(">i", framed, 16, -5)
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, bytes(framed))
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, _xerial(b"abc", 10) + b"\x00\x00")


def test_lz4_writes_kafka_compatible_frames() -> None:
    packed = compress(Compression.LZ4, b"payload" * 100)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg = packed[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks: Kafka's reader rejects linked blocks
    assert not flg & 0x04  # no content checksum
    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False


def test_lz4_reads_frames_with_optional_fields() -> None:
    data = bytes(range(200)) * 50
    for kwargs in (
        {"store_size": True},
        {"content_checksum": True},
        {"block_linked": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ):
        assert decompress(Compression.LZ4, lz4.frame.compress(data, **kwargs)) == data
    assert decompress(Compression.LZ4, aio_codec.lz4_encode(data)) == data


def test_lz4_truncated_is_an_error() -> None:
    packed = compress(Compression.LZ4, bytes(range(256)) * 10)
    with pytest.raises(DecompressionError):
        decompress(Compression.LZ4, packed[:-5])


def test_zstd_reads_frames_without_content_size_and_multiple_frames() -> None:
    data = bytes(range(256)) * 200
    streaming = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(streaming) == -1
    assert decompress(Compression.ZSTD, streaming) == data
    two = compress(Compression.ZSTD, b"one-") + compress(Compression.ZSTD, b"two")
    assert decompress(Compression.ZSTD, two) == b"one-two"
    assert decompress(Compression.ZSTD, aio_codec.zstd_encode(data)) == data
    assert zstandard.frame_content_size(compress(Compression.ZSTD, data)) == len(data)


def test_zstd_truncated_is_an_error() -> None:
    data = bytes(range(256)) * 200
    for packed in (
        compress(Compression.ZSTD, data),
        zstandard.ZstdCompressor(write_content_size=False).compress(data),
    ):
        with pytest.raises(DecompressionError):
            decompress(Compression.ZSTD, packed[:-7])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_output_above_max_size_is_refused(codec: Compression) -> None:
    packed = compress(codec, ZEROS)
    assert decompress(codec, packed, max_size=len(ZEROS)) == ZEROS
    with pytest.raises(DecompressionLimitError):
        decompress(codec, packed, max_size=len(ZEROS) - 1)


def test_limit_is_enforced_without_trusting_declared_sizes() -> None:
    limit = 100_000
    streaming_zstd = zstandard.ZstdCompressor(write_content_size=False).compress(ZEROS)
    lz4_no_size = lz4.frame.compress(ZEROS, store_size=False)
    lz4_sized = lz4.frame.compress(ZEROS, store_size=True)
    xerial = _xerial(ZEROS, 1 << 16)
    for codec, packed in (
        (Compression.ZSTD, streaming_zstd),
        (Compression.LZ4, lz4_no_size),
        (Compression.LZ4, lz4_sized),
        (Compression.SNAPPY, xerial),
        (Compression.GZIP, gzip.compress(ZEROS)),
    ):
        with pytest.raises(DecompressionLimitError):
            decompress(codec, packed, max_size=limit)


def test_lying_declared_sizes_are_refused_before_allocating() -> None:
    # A raw snappy block claiming 4 GiB from a few bytes.
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f\x00abc")
    # A zstd frame header claiming far more than the limit.
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.ZSTD, _zstd_header_declaring(2**40))


def _zstd_header_declaring(size: int) -> bytes:
    """A zstd frame header declaring ``size`` bytes (8-byte field), with no blocks after it."""
    magic = b"\x28\xb5\x2f\xfd"
    descriptor = 0b11_1_0_0_0_00  # FCS field 8 bytes, single segment, no checksum, no dict
    return magic + bytes([descriptor]) + struct.pack("<Q", size)


def test_default_limit() -> None:
    floor = compression_module.MIN_DECOMPRESSION_LIMIT
    ratio = compression_module.MAX_COMPRESSION_RATIO
    assert decompression_limit(0) == floor
    assert decompression_limit(10 * floor) == 10 * floor * ratio
    # 1 MB of zeros compresses to far less than floor/ratio and still decompresses by default.
    assert decompress(Compression.ZSTD, compress(Compression.ZSTD, ZEROS)) == ZEROS


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300))
def test_garbage_raises_decompression_error_only(codec: Compression, data: bytes) -> None:
    try:
        out = decompress(codec, data)
    except DecompressionError:
        return
    assert isinstance(out, bytes)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(min_size=1, max_size=400), st.data())
def test_damaged_streams_raise_decompression_error_only(
    codec: Compression, data: bytes, draw: st.DataObject
) -> None:
    packed = bytearray(compress(codec, data))
    index = draw.draw(st.integers(0, len(packed) - 1))
    packed[index] ^= draw.draw(st.integers(1, 255))
    cut = draw.draw(st.integers(0, len(packed)))
    try:
        decompress(codec, bytes(packed[:cut]))
    except DecompressionError:
        pass


def test_unknown_codec_ids() -> None:
    for codec_id in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec_id, b"abc")
        with pytest.raises(ValueError):
            compress(codec_id, b"abc")


def test_none_codec_copies_and_respects_limit() -> None:
    assert decompress(Compression.NONE, memoryview(b"abc")) == b"abc"
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.NONE, b"abcd", max_size=3)
