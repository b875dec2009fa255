"""The C record reader (``sdk.records._reader``) against its Python twin (``_reader_py``).

For the same bytes both must give the same walk, the same records and the same consumer records,
or reject them with the same error: the same ``CorruptRecordError`` subclass, reason and byte
offset (the record outputs also return the same records read before the error). Checked on
records written by hand with every varint encoding Kafka accepts or refuses (padded, five-byte
and ten-byte with bits beyond the type, overlong), negative lengths, lying lengths and counts;
and on whole batches: generated, truncated, with a bad CRC, compressed with every codec, control
batches, mutated, and random bytes, read the way the consumer and the broker read them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.consumer.fetch_records import decode_batch_records
from sdk.consumer.records import ConsumerRecord
from sdk.records import (
    Compression,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    InvalidVarintError,
    Record,
    RecordBatch,
    _reader_py,
    build_control_batch,
    compress,
    iter_batches,
    reader,
    walk_batch_records,
)
from sdk.records.varint import zigzag_encode

from .conftest import C_READER
from .strategies import batch_specs, build, fix_crc, raw_batch

pytestmark = pytest.mark.skipif(C_READER is None, reason="sdk.records._reader is not built")

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- records written by hand -------------------------------------------------------------------


def encode(value: int, width: int, length: int, junk: int = 0) -> bytes:
    """``value`` zigzag-encoded in exactly ``length`` bytes (padded with continuation bytes, or
    overlong past ``width`` bits' worth), with ``junk`` OR-ed into the bits of the last byte that
    lie beyond ``width`` (which Kafka drops)."""
    u = zigzag_encode(value) & ((1 << width) - 1)
    out = bytearray()
    for i in range(length):
        group = (u >> (7 * i)) & 0x7F
        out.append(group | (0x80 if i < length - 1 else 0))
    out[-1] |= junk & 0x7F & ~((1 << max(0, width - 7 * (length - 1))) - 1)
    return bytes(out)


def minimal_length(value: int, width: int) -> int:
    u = zigzag_encode(value) & ((1 << width) - 1)
    return max(1, (u.bit_length() + 6) // 7)


@st.composite
def varints(draw: st.DrawFn, value: int, width: int = 32) -> bytes:
    """``value`` as a varint of ``width`` bits: minimal, padded, with junk beyond the width in a
    full-length encoding (5 or 10 bytes), cut short, or longer than allowed."""
    full = 5 if width == 32 else 10
    shortest = minimal_length(value, width)
    kind = draw(st.sampled_from(["minimal"] * 6 + ["padded", "junk", "overlong", "cut"]))
    if kind == "padded":
        return encode(value, width, draw(st.integers(shortest, full)))
    if kind == "junk":
        return encode(value, width, full, draw(st.integers(1, 0x7F)))
    if kind == "overlong":
        return encode(value, width, full) [:-1] + b"\x80" + b"\x00"
    if kind == "cut":
        return encode(value, width, shortest + 1)[:-1] if shortest < full else b"\x80"
    return encode(value, width, shortest)


LENGTHS = st.integers(-3, 6) | st.integers(-(2**31), 2**31 - 1)


@st.composite
def hand_records(draw: st.DrawFn) -> bytes:
    """One record with every field drawn, honest or not."""
    body = bytearray(b"\x00")  # attributes
    body += draw(varints(draw(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 200)), 64))
    body += draw(varints(draw(st.integers(-2, 300) | st.integers(-(2**31), 2**31 - 1))))
    for _ in range(2):  # key, value
        field = draw(st.none() | st.binary(max_size=6))
        size = -1 if field is None else len(field)
        if draw(st.integers(0, 9)) == 0:
            size = draw(LENGTHS)
        body += draw(varints(size)) + (field or b"")
    headers = draw(st.lists(st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4)), max_size=2))
    count = len(headers) if draw(st.integers(0, 9)) else draw(LENGTHS)
    body += draw(varints(count))
    for name, value in headers:
        body += draw(varints(len(name))) + name
        body += draw(varints(-1 if value is None else len(value))) + (value or b"")
    length = len(body) if draw(st.integers(0, 5)) else len(body) + draw(st.integers(-3, 3) | LENGTHS)
    return draw(varints(length)) + bytes(body)


@st.composite
def hand_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    records = draw(st.lists(hand_records(), max_size=5))
    count = len(records) if draw(st.booleans()) else len(records) + draw(st.integers(-2, 2) | LENGTHS)
    return b"".join(records), count


# -- the three outputs on both readers ---------------------------------------------------------


def error_of(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, CorruptRecordError):
        return ("error", type(exc), exc.reason, exc.offset)
    return ("error", type(exc), str(exc))


def record_fields(records: list[Any], fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [tuple(getattr(r, name) for name in fields) for r in records]


def outputs(core: ModuleType, data: Any, start: int, end: int, count: int) -> dict[str, Any]:
    """What each output of ``core`` gives for the section: its result, or its error."""
    calls: dict[str, Callable[[], Any]] = {
        "walk": lambda: core.walk_records(data, start, end, count),
        "records": lambda: core.read_records(data, start, end, count, 2**62, -5, None, Record),
        "append_time": lambda: core.read_records(data, start, end, count, 0, 0, 77, Record),
        "consumer": lambda: core.read_records(
            data, start, end, count, 10, 2**63 - 1, None, ConsumerRecord, (0, 11, "t", 3)
        ),
    }
    found: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            result = call()
        except Exception as exc:  # the exception is the answer compared
            found[name] = error_of(exc)
            continue
        if name == "walk":
            found[name] = result
        else:
            records, error = result
            fields = ConsumerRecord.__slots__ if name == "consumer" else Record.__slots__
            found[name] = (record_fields(records, fields), None if error is None else error_of(error))
    return found


def assert_readers_agree(data: Any, start: int, end: int, count: int) -> dict[str, Any]:
    """Both readers give the same for every output, and the outputs agree with each other: the
    walk raises exactly the error the record outputs return."""
    assert C_READER is not None
    c = outputs(C_READER, data, start, end, count)
    python = outputs(_reader_py, data, start, end, count)
    assert c == python
    walk = c["walk"]
    walk_error = walk if isinstance(walk, tuple) and walk[:1] == ("error",) else None
    for name in ("records", "append_time", "consumer"):
        result = c[name]
        if walk_error is not None and walk_error[1] is ValueError:
            assert result[:2] == walk_error[:2]
        else:
            assert result[1] == walk_error
    return c


@PROPERTY
@given(hand_sections(), st.binary(max_size=3), st.binary(max_size=3))
def test_hand_written_sections(section: tuple[bytes, int], before: bytes, after: bytes) -> None:
    records, count = section
    data = before + records + after
    assert_readers_agree(data, len(before), len(before) + len(records), count)


@PROPERTY
@given(
    st.binary(max_size=200)
    | st.lists(st.sampled_from([b"\x00", b"\x01", b"\x80", b"\xff", b"\x10"])).map(b"".join),
    st.integers(-3, 210),
    st.integers(-3, 210),
    st.integers(-3, 12) | st.integers(-(2**31), 2**31 - 1),
)
def test_any_bytes_and_bounds(data: bytes, start: int, end: int, count: int) -> None:
    """Any bytes, any bounds (outside the buffer too, which both refuse alike)."""
    for buffer in (data, bytearray(data), memoryview(data)):
        assert_readers_agree(buffer, start, end, count)


# A record: length 12, attributes 0, ts delta 0, offset delta 0, null key, value length 2 written
# as a five-byte varint whose fifth byte has bits beyond 32 (Java's int drops them), "ab", no
# headers. The old C decoder refused it while the old C walk and the Python readers read it.
FIVE_BYTE_VALUE_LENGTH = b"\x18\x00\x00\x00\x01\x84\x80\x80\x80\x10ab\x00"
# The same with the timestamp delta 0 as a ten-byte varlong whose tenth byte has bits beyond 64.
TEN_BYTE_TIMESTAMP = b"\x22\x00" + b"\x80" * 9 + b"\x7e\x00\x01\x04ab\x00"


@pytest.mark.parametrize("record", [FIVE_BYTE_VALUE_LENGTH, TEN_BYTE_TIMESTAMP])
def test_bits_beyond_the_type_are_dropped_by_both_readers(record: bytes) -> None:
    found = assert_readers_agree(record, 0, len(record), 1)
    assert found["walk"] == (1, 0, 0, -1, 0)
    (record_read,), error = found["records"]
    assert error is None and dict(zip(Record.__slots__, record_read, strict=True))["value"] == b"ab"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"\x18\x00\x00\x00\x01\x84\x80\x80\x80\x80\x01ab\x00", "varint longer than 5 bytes"),
        (b"\x24\x00" + b"\x80" * 10 + b"\x01\x00\x01\x04ab\x00", "varint longer than 10 bytes"),
        (b"\x04\x00\x80", "varint runs past the end of the data"),
    ],
)
def test_overlong_varints_are_refused_alike(record: bytes, reason: str) -> None:
    found = assert_readers_agree(record, 0, len(record), 1)
    assert found["walk"][1] is InvalidVarintError and found["walk"][2] == reason


def test_negative_record_length_is_refused_alike() -> None:
    found = assert_readers_agree(b"\x01" + b"\x00" * 8, 0, 9, 1)
    assert found["walk"][1:] == (InvalidRecordError, "negative record length -1", 0)


# -- whole batches, read as the consumer and the broker read them ------------------------------


def read_everything(buf: bytes) -> list[Any]:
    """Every answer the batch readers give for ``buf``: batches found, each validated, its
    records, its walk, its consumer records and its control marker; errors as answers."""
    found: list[Any] = []

    def attempt(call: Callable[[], Any]) -> None:
        try:
            found.append(call())
        except CorruptRecordError as exc:
            found.append(error_of(exc))

    def records_then_error(batch: RecordBatch, check_crc: bool) -> list[Any]:
        out: list[Any] = []
        try:
            for record in batch.iter_records(check_crc=check_crc):
                out.append(record_fields([record], Record.__slots__)[0])
        except CorruptRecordError as exc:
            out.append(error_of(exc))
        return out

    try:
        batches = list(iter_batches(buf))
    except CorruptRecordError as exc:
        return [error_of(exc)]
    for batch in batches:
        attempt(batch.validate)
        found.append(records_then_error(batch, True))
        found.append(records_then_error(batch, False))
        attempt(lambda batch=batch: walk_batch_records(buf, batch._position))  # type: ignore[misc]
        attempt(
            lambda batch=batch: record_fields(  # type: ignore[misc]
                decode_batch_records(batch, "t", 0, batch.base_offset + 1, False), ConsumerRecord.__slots__
            )
        )
        if batch.is_control:
            attempt(batch.control_record)
    return found


def assert_batch_readers_agree(buf: bytes) -> list[Any]:
    answers = []
    for core in (C_READER, _reader_py):
        original = reader.core
        reader.core = core
        try:
            answers.append(read_everything(buf))
        finally:
            reader.core = original
    assert answers[0] == answers[1]
    return answers[0]


@st.composite
def hostile_batches(draw: st.DrawFn) -> bytes:
    """A generated or control batch, or one around hand-written records (any codec), then
    truncated, its CRC broken, its count or length lying, or its bytes mutated (CRC repaired)."""
    origin = draw(st.sampled_from(["generated", "control", "hand"]))
    if origin == "generated":
        data = bytearray(build(draw(batch_specs())))
    elif origin == "control":
        data = bytearray(
            build_control_batch(
                draw(st.sampled_from(list(ControlType))), draw(st.integers(0, 2**40)), 1, 2, base_offset=9
            )
        )
    else:
        section, count = draw(hand_sections())
        count = max(-(2**31), min(count, 2**31 - 1))  # the header's count field is an int32
        codec = draw(st.sampled_from(list(Compression)))
        data = bytearray(raw_batch(compress(codec, section) if codec else section, count, int(codec)))
    damage = draw(st.sampled_from(["none", "truncate", "crc", "count", "length", "mutate"]))
    if damage == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif damage == "crc":
        data[draw(st.integers(21, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif damage == "count":
        struct.pack_into(">i", data, 57, draw(st.integers(-3, 3) | LENGTHS))
        data = bytearray(fix_crc(data))
    elif damage == "length":
        struct.pack_into(">i", data, 8, draw(st.integers(40, len(data)) | LENGTHS))
        data = bytearray(fix_crc(data))
    elif damage == "mutate":
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, data[i] ^ 1]))
        data = bytearray(fix_crc(data))
    return bytes(data)


@PROPERTY
@given(hostile_batches(), hostile_batches())
def test_hostile_batches(first: bytes, second: bytes) -> None:
    assert_batch_readers_agree(first)
    assert_batch_readers_agree(first + second)


@PROPERTY
@given(batch_specs())
def test_generated_batches_read_alike(spec: dict) -> None:
    spec["is_control"] = False  # a control batch of random records has no valid marker
    answers = assert_batch_readers_agree(build(spec))
    assert None in answers  # validate() passed
    assert not any(isinstance(a, tuple) and a[:1] == ("error",) for a in answers)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_read_alike(data: bytes) -> None:
    assert_batch_readers_agree(data)
    if len(data) >= 21:
        assert_batch_readers_agree(fix_crc(data))


def test_records_before_a_defect_are_handed_out_first() -> None:
    good = b"\x10\x00\x00\x00\x01\x04ab\x00"
    buf = raw_batch(good + good + b"\x01", 3)
    for core in (C_READER, _reader_py):
        original = reader.core
        reader.core = core
        try:
            seen = []
            with pytest.raises(InvalidRecordError, match="negative record length"):
                for record in RecordBatch(buf):
                    seen.append(record.value)
            assert seen == [b"ab", b"ab"]
        finally:
            reader.core = original
