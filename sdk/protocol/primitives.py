"""Readers and writers of Kafka's primitive wire types.

Readers take ``(buf, pos, end)`` and return ``(value, new_pos)``; they check every length
against ``end`` before slicing, so a lying length field raises ``DecodeError`` instead of
allocating or silently reading short. Writers append to a ``bytearray``. The compiled struct
codecs in ``codec.py`` call these for everything that is not a fixed-width number.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from sdk.protocol.errors import DecodeError, EncodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_UUID_ZERO = uuid.UUID(int=0)
_BUFFERS = (bytes, bytearray, memoryview)

# Fixed-width numbers: struct format character and size.
FIXED_WIDTH: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}


# Bytes and records values at least this long are not copied into the output buffer of
# ``encode``: they are joined in once at the end (see ``OutputBuffer``).
LARGE_VALUE = 32 * 1024


class OutputBuffer(bytearray):
    """The ``bytearray`` the encoders append to, which leaves large values out of it.

    A 4 MiB Fetch response built by appending its records to a ``bytearray`` and then taking
    ``bytes()`` of it copies the records twice and holds two 4 MiB buffers at once, and that costs
    several milliseconds in fresh-page faults. Large ``bytes``/``records`` values are instead
    remembered with their offset and joined with the small parts in a single copy (``getvalue``),
    or handed out uncopied (``parts``) for a transport's ``writelines``. So read it only through
    those two: ``bytes(buffer)`` alone would leave the deferred values out.
    """

    __slots__ = ("deferred",)
    deferred: list[tuple[int, Any]]

    def defer(self, value: Any) -> None:
        """Stand ``value`` at the current end of the buffer without copying it."""
        try:
            deferred = self.deferred
        except AttributeError:
            deferred = self.deferred = []
        deferred.append((len(self), value))

    def parts(self) -> list[Any]:
        """The encoding as a list of buffers, in order; the large values are not copied."""
        deferred = getattr(self, "deferred", None)
        if not deferred:
            return [bytes(self)]
        view = memoryview(self)
        pieces: list[Any] = []
        start = 0
        for offset, value in deferred:
            if offset > start:
                pieces.append(view[start:offset])
            pieces.append(value)
            start = offset
        if start < len(self):
            pieces.append(view[start:])
        return pieces

    def getvalue(self) -> bytes:
        """The whole encoding as one ``bytes``, copying every byte exactly once."""
        if not getattr(self, "deferred", None):
            return bytes(self)
        return b"".join(self.parts())


def short(pos: int, what: str) -> None:
    raise DecodeError(f"truncated data: not enough bytes for {what}", pos)


def read_uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (Kafka uses them for 32-bit lengths and tags)."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise DecodeError("truncated unsigned varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes", start)


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise EncodeError(f"negative value {value} for an unsigned varint")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _length(buf: Any, pos: int, end: int, compact: bool, width: int) -> tuple[int, int]:
    """A length prefix: -1 means null; compact lengths are stored plus one."""
    if compact:
        if pos < end and buf[pos] < 0x80:  # one-byte varint: every length below 127
            return buf[pos] - 1, pos + 1
        n, pos = read_uvarint(buf, pos, end)
        return n - 1, pos
    if pos + width > end:
        short(pos, "a length")
    n = (_I16 if width == 2 else _I32).unpack_from(buf, pos)[0]
    return n, pos + width


def _null(pos: int, what: str) -> None:
    raise DecodeError(f"null {what} where the field is not nullable", pos)


def _span(buf: Any, pos: int, end: int, n: int, what: str) -> None:
    if n < -1:
        raise DecodeError(f"negative {what} length {n}", pos)
    if pos + n > end:
        raise DecodeError(f"{what} length {n} runs past the end of the data", pos)


def read_string(buf: Any, pos: int, end: int, nullable: bool) -> tuple[str | None, int]:
    start = pos
    n, pos = _length(buf, pos, end, False, 2)
    if n == -1:
        if not nullable:
            _null(start, "string")
        return None, pos
    _span(buf, pos, end, n, "string")
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise DecodeError("string is not valid UTF-8", pos) from None


def read_compact_string(buf: Any, pos: int, end: int, nullable: bool) -> tuple[str | None, int]:
    start = pos
    if pos < end and buf[pos] < 0x80:
        n = buf[pos] - 1
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos, end)
        n -= 1
    if n == -1:
        if not nullable:
            _null(start, "string")
        return None, pos
    _span(buf, pos, end, n, "string")
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise DecodeError("string is not valid UTF-8", pos) from None


def read_bytes(
    buf: Any, pos: int, end: int, nullable: bool, compact: bool, zero_copy: bool
) -> tuple[bytes | memoryview | None, int]:
    """Bytes and records fields; ``zero_copy`` hands back a view into the request buffer.

    The length reading is written out here rather than shared, because this is the call every
    Produce and Fetch partition makes.
    """
    start = pos
    if compact:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos, end)
            n -= 1
    else:
        if pos + 4 > end:
            short(pos, "a length")
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
    if n < 0:
        if n < -1:
            raise DecodeError(f"negative bytes length {n}", start)
        if not nullable:
            _null(start, "bytes")
        return None, pos
    if pos + n > end:
        raise DecodeError(f"bytes length {n} runs past the end of the data", pos)
    view = buf[pos : pos + n]
    return (view if zero_copy else bytes(view)), pos + n


def read_uuid(buf: Any, pos: int, end: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > end:
        short(pos, "a uuid")
    raw = bytes(buf[pos : pos + 16])
    return (uuid.UUID(bytes=raw) if any(raw) else _UUID_ZERO), pos + 16


def read_array_length(
    buf: Any, pos: int, end: int, compact: bool, nullable: bool
) -> tuple[int, int]:
    """Array element count, bounded by the bytes left (every element takes at least one)."""
    start = pos
    n, pos = _length(buf, pos, end, compact, 4)
    if n == -1:
        if not nullable:
            _null(start, "array")
        return -1, pos
    if n < -1:
        raise DecodeError(f"negative array length {n}", start)
    if n > end - pos:
        raise DecodeError(f"array of {n} elements cannot fit in {end - pos} bytes", start)
    return n, pos


def read_fixed_array(buf: Any, pos: int, end: int, n: int, fmt: str, size: int) -> tuple[list, int]:
    total = n * size
    if pos + total > end:
        short(pos, f"an array of {n} numbers")
    return list(struct.unpack_from(f">{n}{fmt}", buf, pos)), pos + total


def write_string(out: bytearray, value: str | None, nullable: bool, compact: bool) -> None:
    if value is None:
        if not nullable:
            raise EncodeError("None given for a non-nullable string")
        out += b"\x00" if compact else b"\xff\xff"
        return
    raw = value.encode("utf-8")
    if compact:
        write_uvarint(out, len(raw) + 1)
    else:
        if len(raw) > 0x7FFF:
            raise EncodeError("string longer than 32767 bytes")
        out += _I16.pack(len(raw))
    out += raw


def write_bytes(out: bytearray, value: Any, nullable: bool, compact: bool) -> None:
    if value is None:
        if not nullable:
            raise EncodeError("None given for non-nullable bytes")
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return
    n = len(value) if not isinstance(value, memoryview) else value.nbytes
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)
    if n >= LARGE_VALUE and type(out) is OutputBuffer and isinstance(value, _BUFFERS):
        out.defer(value)
    else:
        out += value


def write_uuid(out: bytearray, value: uuid.UUID | None) -> None:
    out += (value or _UUID_ZERO).bytes


def write_array_length(out: bytearray, value: list | None, nullable: bool, compact: bool) -> bool:
    """Write the count; return False when the array is null (nothing more to write)."""
    if value is None:
        if not nullable:
            raise EncodeError("None given for a non-nullable array")
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return False
    if compact:
        write_uvarint(out, len(value) + 1)
    else:
        out += _I32.pack(len(value))
    return True


def read_nullable_struct_marker(buf: Any, pos: int, end: int) -> tuple[bool, int]:
    if pos >= end:
        short(pos, "a struct presence marker")
    return _I8.unpack_from(buf, pos)[0] >= 0, pos + 1
