"""Zigzag varints as used inside v2 records (Kafka's ``ByteUtils.writeVarint``/``readVarint``).

All record-level integers are signed and zigzag encoded, then written 7 bits at a time, least
significant group first. A varint carries an int32 (at most 5 bytes), a varlong an int64 (at most
10 bytes). Readers reject longer encodings rather than looping over attacker-chosen input, and mask
the accumulated bits to the type's width the way Java's int/long arithmetic does.

The batch builder and reader inline the common one- and two-byte cases for speed (table lookups);
the functions here are the reference those paths are tested against, and what they fall back to
for longer values.
"""

from __future__ import annotations

from sdk.records.errors import InvalidVarintError

__all__ = [
    "ENCODED_CACHE_SIZE",
    "INT32_MASK",
    "INT64_MASK",
    "SMALL_VARINTS",
    "BytesLike",
    "decode_bounded",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "size_of_varint",
    "write_varint",
    "zigzag_decode",
    "zigzag_encode",
]

#: What the readers accept: anything sliceable into bytes without a copy of the whole buffer.
BytesLike = bytes | bytearray | memoryview

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

#: ``encode_varint(n)`` for ``0 <= n < ENCODED_CACHE_SIZE`` is a list lookup: offsets deltas, key
#: and value lengths and record sizes of typical records all fall in this range.
ENCODED_CACHE_SIZE = 8192


def zigzag_encode(n: int) -> int:
    """Map a signed int64 to an unsigned one so small magnitudes get short encodings."""
    return (n << 1) ^ (n >> 63)


def zigzag_decode(u: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (u >> 1) ^ -(u & 1)


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


#: ``SMALL_VARINTS[n]`` is ``encode_varint(n)`` for ``0 <= n < ENCODED_CACHE_SIZE``.
SMALL_VARINTS: list[bytes] = [_encode_unsigned(zigzag_encode(n)) for n in range(ENCODED_CACHE_SIZE)]


def encode_varint(n: int) -> bytes:
    """Zigzag varint/varlong bytes for ``n`` (the encoding is the same; only the range differs).

    Raises ``ValueError`` outside int64, which no Kafka field can hold.
    """
    if 0 <= n < ENCODED_CACHE_SIZE:
        return SMALL_VARINTS[n]
    if n < _INT64_MIN or n > _INT64_MAX:
        raise ValueError(f"{n} does not fit in a varlong")
    return _encode_unsigned(zigzag_encode(n))


def write_varint(buf: bytearray, n: int) -> None:
    """Append the zigzag varint for ``n`` to ``buf``."""
    buf += encode_varint(n)


def size_of_varint(n: int) -> int:
    """How many bytes :func:`encode_varint` produces for ``n``, without building them."""
    u = zigzag_encode(n)
    return max(1, (u.bit_length() + 6) // 7)


#: Masks to an int32's and an int64's bits: what Java keeps of a varint's and a varlong's.
INT32_MASK = 0xFFFFFFFF
INT64_MASK = 0xFFFFFFFFFFFFFFFF


def decode_bounded(data: BytesLike, pos: int, limit: int, max_bytes: int, mask: int) -> tuple[int, int]:
    """Read a zigzag varint of at most ``max_bytes`` from ``data[pos:limit]``, its bits masked to
    ``mask``; return ``(value, position after it)``. The record reader bounds each field by its
    record's end this way."""
    if pos + 1 < limit:  # one or two bytes: nearly every record field
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = data[pos + 1]
        if c < 0x80:
            u = (b & 0x7F) | (c << 7)
            return (u >> 1) ^ -(u & 1), pos + 2
    shift = 0
    result = 0
    for i in range(pos, min(pos + max_bytes, limit)):
        b = data[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            result &= mask
            return (result >> 1) ^ -(result & 1), i + 1
        shift += 7
    if pos + max_bytes > limit:
        raise InvalidVarintError("varint runs past the end of the data", pos)
    raise InvalidVarintError(f"varint longer than {max_bytes} bytes", pos)


def decode_varint(data: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zigzag int32 varint at ``pos``; return ``(value, position after it)``."""
    return decode_bounded(data, pos, len(data), 5, INT32_MASK)


def decode_varlong(data: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zigzag int64 varlong at ``pos``; return ``(value, position after it)``."""
    return decode_bounded(data, pos, len(data), 10, INT64_MASK)
