"""Rewriting appended batches to the topic's ``compression.type`` (Kafka's LogValidator, KIP-390).

With ``producer`` (the default) batches are stored as the producer sent them. Any other codec is
the codec every client or coordinator batch is stored with: a batch already in that codec is kept
as it is, and so is an uncompressed control batch (Kafka does not compress markers); every other
batch gets its records section re-encoded at the topic's ``compression.<codec>.level``. The
records section is the same bytes whatever the codec, so offsets deltas, timestamps, keys, values,
headers, producer id/epoch/sequence and the transactional flag are all kept; only the codec bits
of the attributes, the batch length and the CRC change. Kafka checks ``max.message.bytes`` again
on the rewritten batch (``MessageTooLargeError``).
"""

from __future__ import annotations

import struct

import crc32c

from reference_broker.log.config import LogConfig
from sdk.protocol.errors import MessageTooLargeError
from sdk.records import BATCH_HEADER_SIZE, Compression, RecordBatch, compress

__all__ = ["recompress_batches", "target_compression"]

_CODECS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
#: Kafka's level defaults: gzip -1 (Deflater's default, 6), lz4 9, zstd 3; snappy has none.
_DEFAULT_LEVELS = {Compression.GZIP: 6, Compression.LZ4: 9, Compression.ZSTD: 3}
_LEVEL_KEYS = {
    Compression.GZIP: "compression.gzip.level",
    Compression.LZ4: "compression.lz4.level",
    Compression.ZSTD: "compression.zstd.level",
}
_LENGTH = struct.Struct(">i")
_LENGTH_OFFSET = 8
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_OFFSET = 21
_CODEC_MASK = 0x07
_LOG_OVERHEAD = 12


def target_compression(config: LogConfig) -> tuple[Compression, int | None] | None:
    """The codec and level batches are stored with, or None for ``producer`` (kept as sent)."""
    name = config.extra.get("compression.type", "producer")
    if name == "producer":
        return None
    codec = _CODECS[name]
    key = _LEVEL_KEYS.get(codec)
    if key is None:
        return codec, None
    level = int(config.extra.get(key, _DEFAULT_LEVELS[codec]))
    if codec is Compression.GZIP and level == -1:
        level = _DEFAULT_LEVELS[codec]
    return codec, level


def recompress_batches(
    buf: bytearray | memoryview, positions: list[int], config: LogConfig
) -> tuple[bytearray | memoryview, list[int]]:
    """The validated batches at ``positions`` of ``buf`` in the topic's codec: ``buf`` and
    ``positions`` themselves when no batch needs rewriting, else a new buffer and its positions."""
    target = target_compression(config)
    if target is None:
        return buf, positions
    codec, level = target
    batches = [RecordBatch(buf, pos) for pos in positions]
    if all(_kept(batch, codec) for batch in batches):
        return buf, positions
    out = bytearray()
    new_positions: list[int] = []
    for batch in batches:
        new_positions.append(len(out))
        if _kept(batch, codec):
            out += batch.raw
            continue
        data, start, end = batch.records_section(check_crc=False)
        section = data[start:end]
        body = section if codec is Compression.NONE else compress(codec, section, level)
        at = len(out)
        out += batch.raw[:BATCH_HEADER_SIZE]
        out += body
        size = len(out) - at
        if size > config.max_message_bytes:
            raise MessageTooLargeError(
                f"the record batch size is {size} bytes after recompression to {codec.name.lower()},"
                f" which exceeds the maximum configured value of {config.max_message_bytes}"
                " (max.message.bytes)"
            )
        _LENGTH.pack_into(out, at + _LENGTH_OFFSET, size - _LOG_OVERHEAD)
        attributes = (batch.attributes & ~_CODEC_MASK) | int(codec)
        _ATTRIBUTES.pack_into(out, at + _ATTRIBUTES_OFFSET, attributes)
        crc = crc32c.crc32c(memoryview(out)[at + _ATTRIBUTES_OFFSET : at + size])
        _CRC.pack_into(out, at + _CRC_OFFSET, crc)
    return out, new_positions


def _kept(batch: RecordBatch, codec: Compression) -> bool:
    """Kafka keeps a batch already in the target codec, and an uncompressed control batch."""
    source = batch.compression
    return source is codec or (batch.is_control and source is Compression.NONE)
