"""Fuzzing the reader: random and mutated bytes may only ever raise CorruptRecordError.

No IndexError/struct.error/UnicodeDecodeError/codec exception may escape, and nothing may hang or
allocate according to a lying length field (the whole module runs in a few seconds).
"""

from __future__ import annotations

import struct
from contextlib import suppress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.records import (
    Compression,
    CorruptRecordError,
    RecordBatch,
    compress,
    iter_batches,
)

from .strategies import batch_specs, build, fix_crc, raw_batch

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def consume(buf: bytes | bytearray | memoryview, position: int = 0) -> int:
    """Read everything the way a consumer would; return the number of records seen."""
    seen = 0
    for batch in iter_batches(buf, position):
        batch.validate()
        for record in batch:
            assert record.key is None or isinstance(record.key, bytes)
            assert record.value is None or isinstance(record.value, bytes)
            assert isinstance(record.headers, list)
            seen += 1
        if batch.is_control:
            batch.control_record()
    return seen


def consume_one(buf: bytes, check_crc: bool) -> None:
    batch = RecordBatch(buf)
    for record in batch.iter_records(check_crc=check_crc):
        assert record.offset >= batch.base_offset - 2**31
    batch.compression  # noqa: B018


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    for buf in (data, bytearray(data), memoryview(data)):
        with suppress(CorruptRecordError):
            consume(buf)
    with suppress(CorruptRecordError):
        consume_one(data, check_crc=False)


@st.composite
def mutations(draw: st.DrawFn) -> tuple[bytes, bool]:
    data = bytearray(build(draw(batch_specs())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "set":
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[i:]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i : i + draw(st.integers(1, 8))]
    return bytes(data), draw(st.booleans())


@FUZZ
@given(mutations())
def test_mutated_batches(case: tuple[bytes, bool]) -> None:
    data, repair_crc = case
    if repair_crc and len(data) >= 21:
        data = fix_crc(data)  # so the damage reaches the record parser
    with suppress(CorruptRecordError):
        consume(data + data)
    with suppress(CorruptRecordError):
        consume_one(data, check_crc=False)


@FUZZ
@given(
    st.binary(max_size=200),
    st.integers(-(2**31), 2**31 - 1) | st.integers(-2, 20),
    st.sampled_from(list(Compression)),
)
def test_random_record_sections(section: bytes, count: int, codec: Compression) -> None:
    """Random records behind a valid header and CRC: exercises the record parser itself."""
    payload = compress(codec, section) if codec else section
    with suppress(CorruptRecordError):
        consume(raw_batch(payload, count, attributes=int(codec)))


@FUZZ
@given(batch_specs(), st.data())
def test_lying_header_fields(spec: dict, data: st.DataObject) -> None:
    """Header lengths and counts set to anything, CRC repaired where it covers them."""
    buf = bytearray(build(spec))
    field = data.draw(st.sampled_from(["length", "count", "attributes", "last_delta"]))
    value = data.draw(st.integers(-(2**31), 2**31 - 1) | st.integers(-5, 200))
    if field == "length":
        struct.pack_into(">i", buf, 8, value)
    elif field == "count":
        struct.pack_into(">i", buf, 57, value)
    elif field == "attributes":
        struct.pack_into(">h", buf, 21, value & 0x7FFF)
    else:
        struct.pack_into(">i", buf, 23, value)
    repaired = fix_crc(buf) if len(buf) >= 21 else bytes(buf)
    for candidate in (bytes(buf), repaired):
        with suppress(CorruptRecordError):
            consume(candidate)


def test_huge_record_count_with_no_records_is_fast() -> None:
    data = raw_batch(b"", 2**31 - 1)
    try:
        consume(data)
    except CorruptRecordError as exc:
        assert "recordCount" in exc.reason
    else:
        raise AssertionError("a count of 2**31-1 with no records must be rejected")


def test_huge_lengths_in_records_do_not_allocate() -> None:
    # key length 2**30 inside a tiny record: must fail on bounds, not try to read 1 GiB.
    section = b"\x20\x00\x00\x00\xfe\xff\xff\xff\x07ab\x00"
    with pytest.raises(CorruptRecordError):  # overrunning key must be rejected
        consume(raw_batch(section, 1))
