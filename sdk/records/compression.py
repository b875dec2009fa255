"""Compression codecs of v2 batches, delegated to well-kept libraries.

Only the records section of a batch is compressed; the header (and ``recordCount``) stays plain.
Formats follow what Kafka's Java client reads and writes:

* gzip: a gzip member (stdlib ``zlib`` with gzip framing); concatenated members are read.
* snappy: written as raw snappy (``cramjam``); read as raw snappy or as the xerial block framing
  (``b"\\x82SNAPPY\\x00"`` + version + compat, then int32-length-prefixed raw blocks) that the
  Java client and aiokafka write.
* lz4: the LZ4 frame format with independent blocks and no content checksum, the flavour Kafka's
  ``KafkaLZ4BlockInputStream`` accepts (``lz4.frame``).
* zstd: a standard zstd frame (``zstandard``); frames without a content size, as Java's streaming
  writer produces, are read with a bounded streaming path.

Decompression never trusts declared sizes: output is bounded by :func:`decompression_limit`
(at least ``MIN_DECOMPRESSION_LIMIT`` bytes, otherwise ``MAX_COMPRESSION_RATIO`` times the input),
so a small "bomb" cannot exhaust memory. Every codec failure becomes a
:class:`~sdk.records.errors.DecompressionError`.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from sdk.records.errors import (
    CorruptRecordError,
    DecompressionError,
    DecompressionLimitError,
    UnsupportedCompressionError,
)
from sdk.records.varint import BytesLike

__all__ = [
    "MAX_COMPRESSION_RATIO",
    "MIN_DECOMPRESSION_LIMIT",
    "Compression",
    "compress",
    "decompress",
    "decompression_limit",
]


class Compression(enum.IntEnum):
    """Codec ids stored in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: Output allowed for any input, however small: a batch of highly repetitive records may compress
#: far beyond any ratio (zstd reaches ~30000:1 on zeros), and 64 MiB is well above Kafka's
#: default message sizes.
MIN_DECOMPRESSION_LIMIT = 64 * 1024 * 1024
#: Beyond the floor, output may be this many times the compressed size.
MAX_COMPRESSION_RATIO = 64

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_XERIAL_BLOCK = struct.Struct(">i")
_GZIP_MAGIC = b"\x1f\x8b"
# The most zstd can expand per input byte is an RLE block: 4 bytes -> 128 KiB. Feeding the
# streaming decompressor this much input at a time bounds each step's output to 64 MiB.
_ZSTD_FEED = 2048
# LZ4 sequences cost at least one byte per 255 bytes of output.
_LZ4_MAX_RATIO = 256
_ZSTD_DEFAULT_LEVEL = 3  # Kafka's compression.zstd.level default
_GZIP_DEFAULT_LEVEL = 6  # java.util.zip.Deflater's default, which Kafka uses

_local = threading.local()


def decompression_limit(compressed_size: int) -> int:
    """Largest output accepted for ``compressed_size`` input bytes (see module docstring)."""
    return max(MIN_DECOMPRESSION_LIMIT, MAX_COMPRESSION_RATIO * compressed_size)


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    # zstandard contexts are reusable but not thread-safe, hence one per thread and level.
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "zstd_c", None)
    if cache is None:
        cache = _local.zstd_c = {}
    cctx = cache.get(level)
    if cctx is None:
        cctx = cache[level] = zstandard.ZstdCompressor(level=level)
    return cctx


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dctx: zstandard.ZstdDecompressor | None = getattr(_local, "zstd_d", None)
    if dctx is None:
        dctx = _local.zstd_d = zstandard.ZstdDecompressor()
    return dctx


def compress(codec: Compression | int, data: BytesLike, level: int | None = None) -> bytes:
    """Compress a records section with ``codec``; ``level`` defaults to Kafka's per-codec default.

    lz4 defaults to the fast compressor (level 0): any level reads the same everywhere, and the
    producer's hot path is where the time goes.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return zlib.compress(data, _GZIP_DEFAULT_LEVEL if level is None else level, wbits=31)
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == Compression.ZSTD:
        return _zstd_compressor(_ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(codec: Compression | int, data: BytesLike, max_size: int | None = None) -> bytes:
    """Decompress a records section; output above ``max_size`` raises ``DecompressionLimitError``.

    ``max_size`` defaults to :func:`decompression_limit` of the input length.
    """
    limit = decompression_limit(len(data)) if max_size is None else max_size
    try:
        if codec == Compression.NONE:
            if len(data) > limit:
                raise DecompressionLimitError(f"{len(data)} bytes exceed the limit {limit}")
            return bytes(data)
        if codec == Compression.GZIP:
            return _gunzip(data, limit)
        if codec == Compression.SNAPPY:
            return _unsnappy(data, limit)
        if codec == Compression.LZ4:
            return _unlz4(data, limit)
        if codec == Compression.ZSTD:
            return _unzstd(data, limit)
    except CorruptRecordError:
        raise
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # each library has its own error types; all mean "bad input"
        name = Compression(codec).name.lower()
        raise DecompressionError(f"{name} decompression failed: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec id {int(codec)}")


def _too_big(name: str, limit: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{name} output exceeds the decompression limit of {limit} bytes")


def _gunzip(data: BytesLike, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    rest: BytesLike = data
    while True:
        dobj = zlib.decompressobj(31)
        # max_length bounds the output; 0 would mean unbounded, and limit - total + 1 >= 1.
        chunk = dobj.decompress(rest, limit - total + 1)
        total += len(chunk)
        if total > limit:
            raise _too_big("gzip", limit)
        chunks.append(chunk)
        if not dobj.eof:
            raise DecompressionError("gzip stream is truncated")
        rest = dobj.unused_data
        # Like Java's GZIPInputStream: read further members, ignore trailing non-gzip bytes.
        if rest[:2] != _GZIP_MAGIC:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _raw_snappy(block: BytesLike, limit: int) -> bytes:
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > limit:
        raise _too_big("snappy", limit)
    # A snappy copy op yields at most 64 bytes for 3 input bytes: larger claims are lies.
    if declared > 22 * len(block) + 64:
        raise DecompressionError(f"snappy block claims {declared} bytes from {len(block)}")
    return bytes(cramjam.snappy.decompress_raw(block))


def _unsnappy(data: BytesLike, limit: int) -> bytes:
    view = memoryview(data)
    if len(view) < _XERIAL_HEADER_SIZE or view[:8] != _XERIAL_MAGIC:
        return _raw_snappy(view, limit)
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise DecompressionError("xerial snappy block length is truncated", pos)
        (size,) = _XERIAL_BLOCK.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise DecompressionError(f"xerial snappy block of {size} bytes overruns the data", pos)
        out += _raw_snappy(view[pos : pos + size], limit - len(out))
        pos += size
    return bytes(out)


def _unlz4(data: BytesLike, limit: int) -> bytes:
    info = lz4.frame.get_frame_info(data)
    if info.get("content_size", 0) > limit:
        raise _too_big("lz4", limit)
    dobj = lz4.frame.LZ4FrameDecompressor()
    view = memoryview(data)
    # Feed input in slices whose worst-case output fits the limit; usually that is all of it.
    feed = max(1, limit // _LZ4_MAX_RATIO)
    chunks: list[bytes] = []
    total = 0
    for start in range(0, len(view), feed):
        chunk = dobj.decompress(view[start : start + feed])
        total += len(chunk)
        if total > limit:
            raise _too_big("lz4", limit)
        chunks.append(chunk)
        if dobj.eof:
            break  # Kafka reads one frame and ignores what follows
    if not dobj.eof:
        raise DecompressionError("lz4 frame is truncated")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unzstd(data: BytesLike, limit: int) -> bytes:
    dctx = _zstd_decompressor()
    declared = zstandard.frame_content_size(data)
    if declared > limit:
        raise _too_big("zstd", limit)
    if declared >= 0:
        try:
            # Fast path: the frame states its size (bounded above) and is the whole input.
            return dctx.decompress(data, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # several frames, or damage: the streaming path tells which
    view = memoryview(data)
    chunks: list[bytes] = []
    total = 0
    pos = 0
    end = len(view)
    while pos < end:  # one iteration per frame
        dobj = dctx.decompressobj()
        while not dobj.eof:
            if pos >= end:
                raise DecompressionError("zstd frame is truncated")
            step = view[pos : pos + _ZSTD_FEED]
            pos += len(step)
            chunk = dobj.decompress(step)
            total += len(chunk)
            if total > limit:
                raise _too_big("zstd", limit)
            chunks.append(chunk)
        pos -= len(dobj.unused_data)
    return b"".join(chunks)
