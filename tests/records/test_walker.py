"""``walk_records`` / ``walk_batch_records`` against full decoding, their reference.

The walker must accept exactly the batches whose records decode, raise the same error class for
those that do not, and report the facts decoding would show (count, timestamp delta range, first
offset gap, first null key). Checked on hypothesis-generated batches, on the same batches mutated
inside their records (CRC repaired so the damage reaches the record parser), on random record
sections, and on the hand-written malformed records of ``test_batch``.

Every test runs twice: with the C walk (``sdk.records._walk``) in front of the Python one, as
installed, and with the Python walk alone. Each batch the property tests check is also given to
the C walk directly (``assert_compiled_agrees``): it must return what the Python walk returns, or
decline (None), and must decline whatever the Python walk rejects.
"""

from __future__ import annotations

import shutil
import struct
import sysconfig
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.records import (
    Compression,
    CorruptRecordError,
    InvalidRecordCountError,
    InvalidRecordError,
    InvalidVarintError,
    RecordBatch,
    RecordBatchBuilder,
    RecordsWalk,
    UnsupportedCompressionError,
    compress,
    decompress,
    walk_batch_records,
    walk_records,
    walker,
)
from sdk.records.varint import decode_varint, encode_varint

from .strategies import batch_specs, build, fix_crc, raw_batch

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# One record: length 8, attributes 0, ts delta 0, offset delta 0, null key, value "ab", no headers.
GOOD = b"\x10\x00\x00\x00\x01\x04ab\x00"
COMPILED_WALK = walker._compiled_walk


@pytest.fixture(autouse=True, scope="module", params=["compiled", "python"])
def walk_implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """``walk_records`` as installed (C first), then with the Python walk alone."""
    if request.param == "compiled" and COMPILED_WALK is None:
        pytest.skip("sdk.records._walk is not built")
    if request.param == "python":
        walker._compiled_walk = None
    try:
        yield request.param
    finally:
        walker._compiled_walk = COMPILED_WALK


def test_compiled_walk_is_built() -> None:
    """Where a C compiler is present, installing the package builds the C walk (it is optional,
    so a failed build would otherwise only show as a slower broker)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the Python walk alone is expected")
    assert walker.COMPILED and COMPILED_WALK is not None


#: ``walk_records``'s arguments: data, start, end, record count.
Section = tuple[bytes | bytearray, int, int, int]


def records_section(buf: bytes | bytearray, position: int = 0) -> Section | None:
    """The batch's records section as ``walk_records`` takes it (decompressed when compressed),
    or None when it cannot be had (unknown codec, undecompressible bytes)."""
    batch = RecordBatch(buf, position)
    start, end = position + 61, position + 12 + batch.batch_length
    codec = batch.attributes & 0x07
    if codec == 0:
        return buf, start, end, batch.record_count
    try:
        data = decompress(codec, bytes(buf[start:end]))
    except CorruptRecordError:
        return None
    return data, 0, len(data), batch.record_count


def assert_compiled_agrees(buf: bytes | bytearray, position: int = 0) -> RecordsWalk | None:
    """The C walk's answer for the batch is the Python walk's, or None; None when that raises.
    Returns the C walk's answer (None also when it is not built)."""
    section = records_section(buf, position)
    if COMPILED_WALK is None or section is None:
        return None
    found = COMPILED_WALK(*section)
    try:
        expected = walker.walk_records_python(*section)
    except CorruptRecordError:
        assert found is None
        return None
    if found is None:
        return None
    assert RecordsWalk(*found) == expected
    return RecordsWalk(*found)


def assert_compiled_accepts(buf: bytes | bytearray) -> None:
    """A well-formed batch as producers write it is walked by C, not handed back to Python."""
    if COMPILED_WALK is not None:
        assert assert_compiled_agrees(buf) is not None


def decoded(buf: bytes | bytearray, position: int = 0) -> RecordsWalk | type[CorruptRecordError]:
    """What decoding every record shows, in the walker's terms; the error class if it fails."""
    batch = RecordBatch(buf, position)
    try:
        records = list(batch.iter_records(check_crc=False))
    except CorruptRecordError as exc:
        return type(exc)
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


def walked(buf: bytes | bytearray, position: int = 0) -> RecordsWalk | type[CorruptRecordError]:
    try:
        return walk_batch_records(buf, position)
    except CorruptRecordError as exc:
        return type(exc)


def family(result: RecordsWalk | type[CorruptRecordError]) -> object:
    """The result, with record-level error classes merged (what the broker maps errors by)."""
    if isinstance(result, RecordsWalk):
        return result
    if issubclass(result, InvalidRecordCountError):
        return InvalidRecordCountError
    return InvalidRecordError if issubclass(result, InvalidRecordError) else result


def record_at(data: bytes | bytearray, index: int) -> tuple[int, int]:
    """Record ``index`` of the (uncompressed) batch in ``data``: its length and where its body
    starts (just after the length varint)."""
    pos = 61
    for _ in range(index):
        length, after = decode_varint(data, pos)
        pos = after + length
    return decode_varint(data, pos)


def assert_same(buf: bytes) -> RecordsWalk | type[CorruptRecordError]:
    """The walker and the decoder agree on ``buf`` alone, and with another batch after it.

    A ``bytes`` buffer is read in place by both, so even the error subclass must match. The
    decoder copies a ``bytearray``'s section out first while the walker reads it in place, so
    with bytes after the batch a damaged record can fail on different bytes: the verdict and the
    error family must still match.
    """
    expected = decoded(buf)
    assert walked(buf) == expected
    assert walked(bytearray(buf)) == expected
    doubled = buf + buf
    assert walked(doubled) == decoded(doubled)
    assert family(walked(bytearray(doubled))) == family(expected)
    for data in (buf, bytearray(doubled), memoryview(doubled)):
        assert_compiled_agrees(data)
    return expected


@PROPERTY
@given(batch_specs())
def test_generated_batches_match_decoding(spec: dict) -> None:
    buf = build(spec)
    result = assert_same(buf)
    assert isinstance(result, RecordsWalk) and result.count == len(spec["records"])
    assert_compiled_accepts(buf)


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


TS_SHAPES = {
    "constant": lambda i: 0,
    "one_byte": lambda i: i // 10,
    "two_bytes": lambda i: 64 + 3 * i,
    "crossing": lambda i: 2 * i,  # one byte, then two from record 32 on
    "wide": lambda i: 9_000 * i,  # three bytes and more: walked record by record
    "backwards": lambda i: 100 - i,  # negative deltas from record 101 on
}


@st.composite
def uniform_batches(draw: st.DrawFn) -> bytes:
    """What producers write: records sharing one layout (so the column checks run), with a few
    records that differ and sometimes a damaged byte (CRC repaired)."""
    n = draw(st.integers(2, 300))
    key = draw(st.none() | st.binary(max_size=3))
    size = draw(st.sampled_from([0, 1, 7, 100, 200]))
    shape = TS_SHAPES[draw(st.sampled_from(sorted(TS_SHAPES)))]
    odd = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    codec = draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]))
    builder = RecordBatchBuilder(codec)
    for i in range(n):
        value = b"v" * size
        headers: list[tuple[str, bytes | None]] = []
        if i in odd:
            kind = i % 3
            if kind == 0:
                headers = [("h", b"\x00")]  # ends in a zero byte, like an empty header count
            elif kind == 1:
                value = b"w" * (size + 1)
            else:
                value = None
        builder.append(1_000_000 + shape(i), key, value, headers)
    data = bytearray(builder.build())
    if codec == Compression.NONE and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 2))):
            i = draw(st.integers(61, len(data) - 1))
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF, data[i] ^ 1]))
    return fix_crc(data)


@PROPERTY
@given(uniform_batches())
def test_uniform_batches_match_decoding(buf: bytes) -> None:
    assert_same(buf)


@pytest.mark.parametrize("damage_at", [None, 70, 5_000, 8_191, 8_192, 8_999])
def test_offset_deltas_of_every_width(damage_at: int | None) -> None:
    """9,000 records: offset deltas of one, two and three bytes, each range checked as columns."""
    builder = RecordBatchBuilder()
    for i in range(9_000):
        builder.append(5_000 + i // 100, None, b"x" * 20)
    data = bytearray(builder.build())
    if damage_at is not None:
        # Walk to the record and break its offset delta (a gap) or its header count.
        length, after = record_at(data, damage_at)
        data[after + length - 1] = 0x02 if damage_at % 2 else 0x00  # header count 1, or unchanged
        if damage_at % 2 == 0:
            _, offset_delta_at = decode_varint(data, after + 1)  # past the timestamp delta
            data[offset_delta_at] ^= 0x02  # the offset delta's low byte: a gap
    buf = fix_crc(data)
    result = assert_same(buf)
    if damage_at is None:
        assert result == RecordsWalk(9_000, 0, 89, -1, 0)
    elif damage_at % 2 == 0:
        assert isinstance(result, RecordsWalk) and result.first_offset_gap == damage_at
    else:
        assert result is InvalidRecordError


@pytest.mark.parametrize(
    ("section", "count", "error"),
    [
        (GOOD, -1, InvalidRecordCountError),  # negative count
        (GOOD, 2, InvalidRecordCountError),  # more records claimed than present
        (GOOD * 2, 1, InvalidRecordCountError),  # bytes left over
        (b"\x12" + GOOD[1:] + b"\x00", 1, InvalidRecordError),  # length too long for fields
        (b"\x0e" + GOOD[1:], 1, InvalidRecordError),  # length too short for fields
        (b"\x7e" + GOOD[1:], 1, InvalidRecordError),  # length overruns the batch
        (b"\x01" + GOOD[1:], 1, InvalidRecordError),  # negative length
        (GOOD[:-1], 1, InvalidRecordError),  # cut off at the end
        (b"\x10\x00\x00\x00\x01\x14ab\x00", 1, InvalidRecordError),  # value overruns
        (b"\x10\x00\x00\x00\x0aab\x00\x00", 1, InvalidRecordError),  # key overruns
        (b"\x14\x00\x00\x00\x01\x04ab\x01\x00\x01", 1, InvalidRecordError),  # negative headers
        (b"\x14\x00\x00\x00\x01\x04ab\x02\x01x\x01", 1, InvalidRecordError),  # negative key len
        (b"\x14\x00\x00\x00\x01\x04ab\x02\x02\xff\x01", 1, InvalidRecordError),  # not UTF-8
        (b"\x14\x00\x00\x00\x01\x04ab\x7e\x02h\x01", 1, InvalidRecordError),  # too many headers
        (b"\x14\x00\x00\x00\x01\x04ab\x02\x02h\x08", 1, InvalidRecordError),  # header value overruns
        (b"\x20\x00" + b"\x80" * 10 + b"\x01\x00\x01\x01\x00", 1, InvalidVarintError),  # 11-byte ts
        (b"\x80\x80\x80\x80\x80\x01", 1, InvalidVarintError),  # 6-byte length varint
    ],
)
def test_malformed_records(section: bytes, count: int, error: type) -> None:
    for attributes, payload in ((0, section), (1, compress(Compression.GZIP, section))):
        buf = raw_batch(payload, count, attributes=attributes)
        with pytest.raises(error):
            walk_batch_records(buf)
        assert decoded(buf) is walked(buf)
        assert assert_compiled_agrees(buf) is None


def test_facts() -> None:
    builder = RecordBatchBuilder(base_offset=7)
    for ts, key in ((1_000, b"k"), (900, b"k"), (1_250, None), (1_100, b"k")):
        builder.append(ts, key, b"v", [("h", b"x")] if key is None else ())
    walk = walk_batch_records(builder.build())
    assert walk == RecordsWalk(4, -100, 250, -1, 2)
    assert_compiled_accepts(builder.build())  # headers included
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


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompressionError):
        walk_batch_records(raw_batch(GOOD, 1, attributes=6))


def test_compressed_garbage_is_a_corrupt_record_error() -> None:
    with pytest.raises(CorruptRecordError):
        walk_batch_records(raw_batch(b"not gzip at all", 1, attributes=1))


def encoded_record(ts_delta: int, offset_delta: int, value: bytes) -> bytes:
    """One record with a null key and no headers, written by hand (any first timestamp delta)."""
    body = b"\x00" + encode_varint(ts_delta) + encode_varint(offset_delta) + b"\x01"
    body += encode_varint(len(value)) + value + b"\x00"
    return encode_varint(len(body)) + body


@st.composite
def two_byte_timestamp_batches(draw: st.DrawFn) -> bytes:
    """Same-layout records whose timestamp deltas are mostly two bytes, in every order: rising
    (the common case), falling, shuffled, and with many sharing a high byte (ties the column
    checks must break on the low byte), sometimes with one-, three-byte or negative deltas mixed
    in. Written by hand, so the first record's delta need not be the smallest."""
    low = draw(st.sampled_from([64, 120, 1_000, 8_000]))
    high = draw(st.sampled_from([low + 200, low + 3_000, 8_191]))
    deltas = draw(st.lists(st.integers(low, max(low, high)), min_size=1, max_size=300))
    order = draw(st.sampled_from(["rising", "falling", "shuffled", "peak", "valley"]))
    if order == "rising":
        deltas.sort()
    elif order == "falling":
        deltas.sort(reverse=True)
    elif order == "peak":  # rising to the largest, then falling: extremes inside the run
        deltas.sort()
        deltas = deltas[::2] + deltas[1::2][::-1]
    elif order == "valley":
        deltas.sort(reverse=True)
        deltas = deltas[::2] + deltas[1::2][::-1]
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(deltas) - 1))
        deltas[i] = draw(st.sampled_from([0, 5, 63, 8_192, 20_000, -1, -100]))
    section = b"".join(encoded_record(delta, i, b"v" * 10) for i, delta in enumerate(deltas))
    return raw_batch(section, len(deltas))


@PROPERTY
@given(two_byte_timestamp_batches())
def test_two_byte_timestamp_deltas_match_decoding(buf: bytes) -> None:
    assert_same(buf)
    assert_compiled_accepts(buf)


@pytest.mark.parametrize("change_at", [1, 2, 16, 17, 40, 63, 64, 65, 66, 100, 200, 298, 299])
@pytest.mark.parametrize(
    "change", ["value", "header", "header_then_longer", "gap", "key_length", "timestamp", "negative"]
)
def test_regular_batch_changing_late(change_at: int, change: str) -> None:
    """A producer-like batch (checked in one long run after its first records) that changes at
    one record: the run must stop exactly there and the walker resume record by record."""
    builder = RecordBatchBuilder()
    builder.set_producer_state(7, 0, 0)
    for i in range(300):
        value = b"v" * 100
        headers: list[tuple[str, bytes | None]] = []
        ts = 1_000_000 + i // 40
        if i >= change_at and change == "value":
            value = b"v" * 101
        elif i == change_at and change.startswith("header"):
            headers = [("h", b"")]  # four bytes of headers where a zero count was
        elif i > change_at and change == "header_then_longer":
            value = b"v" * 103  # as long as the record with headers, which is then a layout candidate
        elif i == change_at and change == "timestamp":
            ts = 1_000_000 + 70  # a two-byte delta in a one-byte column
        elif i == change_at and change == "negative":
            ts = 1_000_000 - 64  # a one-byte delta (0x7F), but negative: its record is walked
        builder.append(ts, None, value, headers)
    data = bytearray(builder.build())
    if change in ("gap", "key_length"):
        _, after = record_at(data, change_at)
        _, offset_delta_at = decode_varint(data, after + 1)
        if change == "gap":
            data[offset_delta_at] ^= 0x04  # the offset delta's low byte: a gap, same width
        else:
            _, key_at = decode_varint(data, offset_delta_at)
            data[key_at] = 0x04  # a two-byte key where the key was null: the fields no longer fit
    result = assert_same(fix_crc(data))
    if change == "key_length":
        assert result is InvalidRecordError
        return
    assert isinstance(result, RecordsWalk) and result.count == 300
    assert result.first_offset_gap == (change_at if change == "gap" else -1)


@pytest.mark.parametrize("damage_at", [None, 8_200, 16_383, 16_384, 16_400, 19_999])
def test_runs_longer_than_one_check(damage_at: int | None) -> None:
    """20,000 empty records: the three-byte offset-delta layout spans more records than one
    column check covers, so its run is checked in several chunks."""
    builder = RecordBatchBuilder()
    for i in range(20_000):
        builder.append(5_000 + i // 1_000, b"k", b"")
    data = bytearray(builder.build())
    if damage_at is not None:
        length, after = record_at(data, damage_at)
        data[after + length - 1] = 0x02  # header count 1: the record no longer fits its length
    result = assert_same(fix_crc(data))
    if damage_at is None:
        assert result == RecordsWalk(20_000, 0, 19, -1, -1)
    else:
        assert result is InvalidRecordError


def test_first_record_later_than_the_run() -> None:
    """The walked first record's delta is not the smallest: the run's minimum must replace it."""
    builder = RecordBatchBuilder()
    for i in range(300):
        builder.append(1_000_000 + i // 40, None, b"v" * 100)
    data = bytearray(builder.build())
    _, after = decode_varint(data, 61)
    assert data[after + 1] == 0  # the first record's timestamp delta, 0
    data[after + 1] = 0x7E  # 63, still one byte
    result = assert_same(fix_crc(data))
    assert result == RecordsWalk(300, 0, 63, -1, 0)


@pytest.mark.parametrize(("key_size", "value_size"), [(70, 9_000), (9_000, 70), (0, 20_000)])
def test_long_key_and_value_lengths(key_size: int, value_size: int) -> None:
    """Key and value length varints of two and three bytes, checked as constant columns."""
    builder = RecordBatchBuilder()
    for i in range(40):
        builder.append(1_000 + i, b"k" * key_size, b"v" * (value_size + (i == 30)))
    result = assert_same(builder.build())
    assert result == RecordsWalk(40, 0, 39, -1, -1)


def test_offset_deltas_too_wide_for_runs() -> None:
    """Past the offset-delta table (record 262,144) runs stop and records are walked."""
    builder = RecordBatchBuilder()
    builder.append(1_000, None, b"")
    record = builder.build()[61:]
    wide = walker._layout(record, 0, len(record))
    assert wide is not None and len(wide.od_columns) == 1
    for width in (2, 3):
        wide = walker._widened(wide)
        assert wide is not None and len(wide.od_columns) == width
    assert walker._widened(wide) is None


def test_headers_through_a_memoryview() -> None:
    """A regression: the Python walk read header keys with ``bytes.decode``, which a memoryview
    lacks, so a batch with headers passed as a view raised AttributeError instead of walking."""
    builder = RecordBatchBuilder()
    builder.append(5, b"k", b"v", [("h\u00e9ader", b"x"), ("n", None)])
    buf = builder.build()
    assert walk_batch_records(memoryview(buf)) == RecordsWalk(1, 0, 0, -1, -1)
    assert walk_batch_records(memoryview(bytearray(buf))) == decoded(bytes(buf))


@PROPERTY
@given(
    st.binary(max_size=300) | st.lists(st.sampled_from([GOOD, b"\x00", b"\x80", b"\xff"])).map(b"".join),
    st.integers(-5, 310),
    st.integers(-5, 310),
    st.integers(-3, 20),
)
def test_compiled_walk_on_any_bytes_and_bounds(data: bytes, start: int, end: int, count: int) -> None:
    """Any bytes, any bounds (outside the buffer too): the C walk never reads out of bounds and
    answers only where the Python walk gives that same answer."""
    if COMPILED_WALK is None:
        pytest.skip("sdk.records._walk is not built")
    found = COMPILED_WALK(data, start, end, count)
    if found is not None:
        assert 0 <= start <= end <= len(data)
        assert RecordsWalk(*found) == walker.walk_records_python(data, start, end, count)


@pytest.mark.parametrize(
    "record",
    [
        # length 8 written as a five-byte varint (zero continuation groups)
        b"\x90\x80\x80\x80\x00\x00\x00\x00\x01\x04ab\x00",
        # timestamp delta 0 written as a ten-byte varlong
        b"\x22\x00" + b"\x80" * 9 + b"\x00\x00\x01\x04ab\x00",
        # a five-byte value length whose bits above 32 are dropped, as Java's int does (2 -> 4)
        b"\x18\x00\x00\x00\x01\x84\x80\x80\x80\x10ab\x00",
    ],
)
def test_long_varint_encodings_walk_alike(record: bytes) -> None:
    """Longer-than-needed varints are valid Kafka: the C walk must read them as Python does."""
    python = walker.walk_records_python(record, 0, len(record), 1)
    assert python.count == 1
    if COMPILED_WALK is not None:
        assert RecordsWalk(*COMPILED_WALK(record, 0, len(record), 1)) == python
