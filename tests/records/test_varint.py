"""Zigzag varints: known encodings, round trips, agreement with aiokafka, malformed input."""

from __future__ import annotations

import pytest
from aiokafka.record.util import decode_varint as aio_decode
from aiokafka.record.util import encode_varint as aio_encode
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import CorruptRecordError
from sdk.records.errors import InvalidVarintError
from sdk.records.varint import (
    ENCODED_CACHE_SIZE,
    SMALL_VARINTS,
    decode_varint,
    decode_varlong,
    encode_varint,
    size_of_varint,
    write_varint,
    zigzag_decode,
    zigzag_encode,
)

from .strategies import INT32, INT64

KNOWN = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (300, b"\xd8\x04"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (-(2**63), b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN)
def test_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert decode_varlong(encoded, 0) == (value, len(encoded))
    if -(2**31) <= value < 2**31:
        assert decode_varint(b"xx" + encoded, 2) == (value, 2 + len(encoded))


def test_zigzag_is_a_bijection_on_small_values() -> None:
    mapped = [zigzag_encode(n) for n in range(-100, 100)]
    assert sorted(mapped) == list(range(200))
    assert [zigzag_decode(u) for u in mapped] == list(range(-100, 100))


def test_cache_matches_slow_path() -> None:
    assert len(SMALL_VARINTS) == ENCODED_CACHE_SIZE
    for n in (0, 1, 127, 128, ENCODED_CACHE_SIZE - 1):
        assert SMALL_VARINTS[n] == aio_encoded(n)
    assert encode_varint(ENCODED_CACHE_SIZE) == aio_encoded(ENCODED_CACHE_SIZE)


def aio_encoded(value: int) -> bytes:
    out = bytearray()
    aio_encode(value, out.append)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(INT64)
def test_varlong_round_trip_and_aiokafka_agreement(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == aio_encoded(value)
    assert size_of_varint(value) == len(encoded)
    assert decode_varlong(encoded + b"tail", 0) == (value, len(encoded))


@settings(max_examples=300, deadline=None)
@given(INT32)
def test_varint_round_trip(value: int) -> None:
    buf = bytearray(b"\x00")
    write_varint(buf, value)
    assert decode_varint(bytes(buf), 1) == (value, len(buf))
    assert aio_decode(bytearray(buf), 1) == (value, len(buf))


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**63)
    with pytest.raises(ValueError):
        encode_varint(-(2**63) - 1)


def test_too_long_and_truncated_varints() -> None:
    with pytest.raises(InvalidVarintError) as info:
        decode_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    assert info.value.offset == 0
    assert isinstance(info.value, CorruptRecordError)
    with pytest.raises(InvalidVarintError):
        decode_varlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(InvalidVarintError):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(InvalidVarintError):
        decode_varint(b"", 0)


def test_varint_masks_to_32_bits_like_java() -> None:
    # Java's readVarint accumulates into an int: bits above 32 in the 5th byte are dropped.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f", 0) == (2**31 - 1, 5)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_decoders_only_raise_invalid_varint(data: bytes, pos: int) -> None:
    for decoder in (decode_varint, decode_varlong):
        try:
            value, end = decoder(data, pos)
        except InvalidVarintError:
            continue
        assert pos < end <= len(data)
        assert -(2**63) <= value < 2**63
