"""``walk_records`` / ``walk_batch_records`` against full decoding, their reference.

The walk must accept exactly the batches whose records decode, raise the same error for those
that do not, and report the facts decoding would show (count, timestamp delta range, first
offset gap, first null key). Checked on hypothesis-generated batches, on the same batches mutated
inside their records (CRC repaired so the damage reaches the record reader), on random record
sections, and on hand-written malformed records; every test runs on the C reader and on its
Python twin (tests/records/test_reader.py compares those two with each other).
"""

from __future__ import annotations

import os
import shutil
import struct
import sysconfig

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.records import (
    Compression,
    CorruptRecordError,
    InvalidRecordCountError,
    InvalidRecordError,
    RecordBatch,
    RecordBatchBuilder,
    RecordsWalk,
    TruncatedBatchError,
    UnsupportedCompressionError,
    compress,
    reader,
    walk_batch_records,
    walk_records,
)
from sdk.records.varint import decode_varint
from sdk.records.writer import PURE_PYTHON_ENV

from .strategies import GOOD, MALFORMED_SECTIONS, batch_specs, build, fix_crc, raw_batch

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pytestmark = pytest.mark.usefixtures("reader_core")


def test_compiled_reader_is_built() -> None:
    """Where a C compiler is present, installing the package builds the C reader (it is
    optional, so a failed build would otherwise only show as a slower broker and consumer)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the Python reader alone is expected")
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip(f"{PURE_PYTHON_ENV} is set: the Python reader is in use by request")
    assert reader.COMPILED


#: What reading a batch shows: the walk's facts, or the error (class, reason, offset).
Outcome = RecordsWalk | tuple[type, str, int | None]


def decoded(buf: bytes | bytearray, position: int = 0) -> Outcome:
    """What decoding every record shows, in the walk's terms; the error if it fails."""
    batch = RecordBatch(buf, position)
    try:
        records = list(batch.iter_records(check_crc=False))
    except CorruptRecordError as exc:
        return type(exc), exc.reason, exc.offset
    if not records:
        return RecordsWalk(0, None, None, -1, -1)
    # LogAppendTime batches report max_timestamp for every record; read the stored deltas then.
    plain = bytearray(buf)
    struct.pack_into(">h", plain, position + 21, batch.attributes & ~0x08)
    stamps = [
        r.timestamp - batch.base_timestamp
        for r in RecordBatch(bytes(plain), position).iter_records(check_crc=False)
    ]
    gaps = [i for i, r in enumerate(records) if r.offset - batch.base_offset != i]
    null_keys = [i for i, r in enumerate(records) if r.key is None]
    return RecordsWalk(
        len(records),
        min(stamps),
        max(stamps),
        gaps[0] if gaps else -1,
        null_keys[0] if null_keys else -1,
    )


def walked(buf: bytes | bytearray | memoryview, position: int = 0) -> Outcome:
    try:
        return walk_batch_records(buf, position)
    except CorruptRecordError as exc:
        return type(exc), exc.reason, exc.offset


def assert_same(buf: bytes) -> Outcome:
    """The walk and decoding agree on ``buf``, read in place from bytes, a bytearray and a
    memoryview, alone and with another batch after it (which neither may read into)."""
    expected = decoded(buf)
    doubled = buf + buf
    for data in (buf, bytearray(buf), memoryview(buf), doubled, bytearray(doubled)):
        assert walked(data) == expected
    assert decoded(doubled) == expected
    return expected


@PROPERTY
@given(batch_specs())
def test_generated_batches_match_decoding(spec: dict) -> None:
    result = assert_same(build(spec))
    assert isinstance(result, RecordsWalk) and result.count == len(spec["records"])


@st.composite
def record_mutations(draw: st.DrawFn) -> bytes:
    """A generated batch with its records section damaged and its CRC repaired."""
    spec = draw(batch_specs())
    spec["compression"] = Compression.NONE
    data = bytearray(build(spec))
    for _ in range(draw(st.integers(1, 3))):
        if len(data) <= 61:
            break
        i = draw(st.integers(61, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        if kind == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "set":
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF]))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[i : i + draw(st.integers(1, 4))]
    struct.pack_into(">i", data, 8, len(data) - 12)
    return fix_crc(data)


@PROPERTY
@given(record_mutations())
def test_mutated_records_match_decoding(buf: bytes) -> None:
    assert_same(buf)


@PROPERTY
@given(
    st.binary(max_size=120) | st.lists(st.sampled_from([GOOD, b"\x00", b"\x01", b"\x80"])).map(b"".join),
    st.integers(-2, 12),
    st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4]),
)
def test_random_record_sections_match_decoding(section: bytes, count: int, codec: Compression) -> None:
    payload = compress(codec, section) if codec else section
    assert_same(raw_batch(payload, count, attributes=int(codec)))


@PROPERTY
@given(batch_specs(), st.integers(-3, 3))
def test_lying_record_count_matches_decoding(spec: dict, change: int) -> None:
    buf = bytearray(build(spec))
    (count,) = struct.unpack_from(">i", buf, 57)
    struct.pack_into(">i", buf, 57, count + change)
    assert_same(fix_crc(buf))


def record_at(data: bytes | bytearray, index: int) -> tuple[int, int]:
    """Record ``index`` of the (uncompressed) batch in ``data``: its length and where its body
    starts (just after the length varint)."""
    pos = 61
    for _ in range(index):
        length, after = decode_varint(data, pos)
        pos = after + length
    return decode_varint(data, pos)


@pytest.mark.parametrize("damage_at", [None, 70, 5_000, 8_191, 8_192, 8_999])
def test_offset_deltas_of_every_width(damage_at: int | None) -> None:
    """9,000 records: offset deltas of one, two and three bytes; a gap or a broken record at one."""
    builder = RecordBatchBuilder()
    for i in range(9_000):
        builder.append(5_000 + i // 100, None, b"x" * 20)
    data = bytearray(builder.build())
    if damage_at is not None:
        length, after = record_at(data, damage_at)
        data[after + length - 1] = 0x02 if damage_at % 2 else 0x00  # header count 1, or unchanged
        if damage_at % 2 == 0:
            _, offset_delta_at = decode_varint(data, after + 1)  # past the timestamp delta
            data[offset_delta_at] ^= 0x02  # the offset delta's low byte: a gap
    result = assert_same(fix_crc(data))
    if damage_at is None:
        assert result == RecordsWalk(9_000, 0, 89, -1, 0)
    elif damage_at % 2 == 0:
        assert isinstance(result, RecordsWalk) and result.first_offset_gap == damage_at
    else:
        assert isinstance(result, tuple) and issubclass(result[0], InvalidRecordError)


@pytest.mark.parametrize(("section", "count", "error"), MALFORMED_SECTIONS)
def test_malformed_records(section: bytes, count: int, error: type) -> None:
    for attributes, payload in ((0, section), (1, compress(Compression.GZIP, section))):
        buf = raw_batch(payload, count, attributes=attributes)
        with pytest.raises(error):
            walk_batch_records(buf)
        assert decoded(buf) == walked(buf)


def test_facts() -> None:
    builder = RecordBatchBuilder(base_offset=7)
    for ts, key in ((1_000, b"k"), (900, b"k"), (1_250, None), (1_100, b"k")):
        builder.append(ts, key, b"v", [("h", b"x")] if key is None else ())
    assert walk_batch_records(builder.build()) == RecordsWalk(4, -100, 250, -1, 2)
    assert walk_batch_records(raw_batch(b"", 0)) == RecordsWalk(0, None, None, -1, -1)
    assert walk_batch_records(raw_batch(b"", 0, attributes=1)) == RecordsWalk(0, None, None, -1, -1)


def test_offset_gaps_are_reported_not_raised() -> None:
    # Offset deltas 0 and 2: what compaction leaves behind, and what a producer must not send.
    second = b"\x10\x00\x00\x04\x01\x04ab\x00"
    buf = raw_batch(GOOD + second, 2)
    assert walk_batch_records(buf).first_offset_gap == 1
    assert decoded(buf) == walk_batch_records(buf)


def test_walk_records_takes_a_section_and_bounds() -> None:
    section = GOOD * 3
    padded = b"xx" + section + b"yy"
    assert walk_records(padded, 2, 2 + len(section), 3).count == 3
    with pytest.raises(InvalidRecordCountError):
        walk_records(padded, 2, 2 + len(section), 4)
    with pytest.raises(InvalidRecordCountError):
        walk_records(section, 0, len(section), -1)
    with pytest.raises(ValueError, match="outside"):
        walk_records(section, 0, len(section) + 1, 3)


def test_a_batch_longer_than_its_buffer_is_truncated() -> None:
    with pytest.raises(TruncatedBatchError):
        walk_batch_records(raw_batch(GOOD, 1)[:-1])


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompressionError):
        walk_batch_records(raw_batch(GOOD, 1, attributes=6))


def test_compressed_garbage_is_a_corrupt_record_error() -> None:
    with pytest.raises(CorruptRecordError):
        walk_batch_records(raw_batch(b"not gzip at all", 1, attributes=1))


def test_headers_through_a_memoryview() -> None:
    """Header keys are read from any buffer (a memoryview lacks ``bytes.decode``)."""
    builder = RecordBatchBuilder()
    builder.append(5, b"k", b"v", [("h\u00e9ader", b"x"), ("n", None)])
    buf = builder.build()
    assert walk_batch_records(memoryview(buf)) == RecordsWalk(1, 0, 0, -1, -1)
    assert walk_batch_records(memoryview(bytearray(buf))) == decoded(bytes(buf))
