"""The append validator's record checks (one record walk) against full decoding, their reference.

``_check_records`` walks records without building them; ``_check_records_by_decoding`` is the
check it replaced, kept to report failures. For any input, configuration and origin,
``validate_append`` must give the same result with either: the same error class and message, or
the same validated bytes (including a corrected max timestamp and CRC).
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.log import AppendOrigin, LogConfig
from reference_broker.log import _validation as validation
from reference_broker.log.results import record_errors_of
from sdk.protocol.errors import KafkaError
from sdk.records import Compression, RecordBatchBuilder, compress

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_000


def fix_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so only a deliberate edit inside it is wrong."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def raw_batch(section: bytes, count: int, attributes: int = 0) -> bytes:
    """A batch around hand-written record bytes (base timestamp NOW), length and CRC correct."""
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(section), -1, 2, 0, attributes, max(count - 1, 0),
        NOW, NOW, -1, -1, -1, count,
    )
    return fix_crc(header + section)


def outcome(
    records: bytes, config: LogConfig, origin: AppendOrigin, *, reference: bool
) -> tuple[str, str] | tuple[bytes, list[int]]:
    """``validate_append``'s result, with the walker or with the full-decoding reference."""
    saved = validation._check_records
    if reference:
        validation._check_records = validation._check_records_by_decoding  # type: ignore[assignment]
    try:
        buf, positions = validation.validate_append(records, config, origin, NOW)
    except KafkaError as exc:
        return type(exc).__name__, str(exc)
    finally:
        validation._check_records = saved  # type: ignore[assignment]
    return bytes(buf), positions


def in_place_outcome(
    records: bytes, config: LogConfig, origin: AppendOrigin
) -> tuple[str, str] | tuple[bytes, list[int]]:
    """``validate_append(in_place=True)`` on the records inside a larger buffer, as a produce
    request holds them: it must answer as the copying path does, touch nothing outside them and,
    when it accepts them, hand back the view itself."""
    request = bytearray(b"\x00" * 7 + records + b"\xff" * 5)
    view = memoryview(request)[7 : 7 + len(records)]
    try:
        buf, positions = validation.validate_append(view, config, origin, NOW, in_place=True)
    except KafkaError as exc:
        return type(exc).__name__, str(exc)
    finally:
        assert request[:7] == b"\x00" * 7 and request[-5:] == b"\xff" * 5
    assert buf is view
    return bytes(buf), positions


def assert_same(records: bytes, config: LogConfig, origin: AppendOrigin) -> tuple:
    fast = outcome(records, config, origin, reference=False)
    assert fast == outcome(records, config, origin, reference=True)
    if records:
        assert in_place_outcome(records, config, origin) == fast
    return fast


CONFIGS = [
    LogConfig(),
    LogConfig(cleanup_policy=("compact",)),
    LogConfig(message_timestamp_before_max_ms=3_600_000, message_timestamp_after_max_ms=60_000),
    LogConfig(message_timestamp_type="LogAppendTime"),
]

timestamps = st.one_of(
    st.integers(NOW - 10_000, NOW + 10_000),
    st.integers(NOW - 7_200_000, NOW + 120_000),
    st.integers(-5, 2**45),
)
records = st.lists(
    st.tuples(timestamps, st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=40),
              st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2)),
    min_size=1,
    max_size=12,
)


@st.composite
def produced(draw: st.DrawFn) -> bytes:
    """A producer's batch, sometimes damaged (CRC repaired) or with a wrong max timestamp."""
    builder = RecordBatchBuilder(
        draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4])),
        producer_id=draw(st.sampled_from([-1, 7])),
        producer_epoch=0,
        base_sequence=draw(st.sampled_from([-1, 0, 5])),
    )
    for ts, key, value, headers in draw(records):
        builder.append(ts, key, value, headers)
    data = bytearray(builder.build())
    change = draw(st.sampled_from(["none", "none", "max_ts", "offset_delta", "bytes", "count"]))
    if change == "max_ts":
        struct.pack_into(">q", data, 35, draw(timestamps))
    elif change == "offset_delta" and not data[22] & 0x07:  # uncompressed: edit a record in place
        # The third byte of the first record is its timestamp delta or offset delta.
        data[61 + draw(st.integers(1, 4))] = draw(st.sampled_from([0x02, 0x04, 0x7E, 0x80]))
    elif change == "bytes" and len(data) > 62:
        i = draw(st.integers(61, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    elif change == "count":
        (count,) = struct.unpack_from(">i", data, 57)
        struct.pack_into(">i", data, 57, count + draw(st.sampled_from([-1, 1])))
    return fix_crc(data)


@PROPERTY
@given(produced(), st.sampled_from(CONFIGS), st.sampled_from(list(AppendOrigin)))
def test_validator_matches_full_decoding(data: bytes, config: LogConfig, origin: AppendOrigin) -> None:
    assert_same(data, config, origin)


@PROPERTY
@given(
    st.binary(max_size=80),
    st.integers(-1, 6),
    st.sampled_from([Compression.NONE, Compression.GZIP]),
    st.sampled_from(CONFIGS),
)
def test_random_record_sections(section: bytes, count: int, codec: Compression, config: LogConfig) -> None:
    payload = compress(codec, section) if codec else section
    assert_same(raw_batch(payload, count, attributes=int(codec)), config, AppendOrigin.COORDINATOR)


GOOD = b"\x10\x00\x00\x00\x01\x04ab\x00"  # null key, value "ab", ts delta 0, offset delta 0
KEYED = b"\x12\x00\x00\x00\x02k\x04ab\x00"  # key "k"


@pytest.mark.parametrize(
    ("section", "count", "config", "error"),
    [
        (GOOD + GOOD, 2, LogConfig(), "InvalidRecordError"),  # offset deltas 0, 0
        (KEYED + GOOD.replace(b"\x00\x00\x00", b"\x00\x00\x02", 1), 2,
         LogConfig(cleanup_policy=("compact",)), "InvalidRecordError"),  # null key
        (GOOD, 2, LogConfig(), "InvalidRecordError"),  # fewer records than the count
        (b"\x12" + GOOD[1:] + b"\x00", 1, LogConfig(), "InvalidRecordError"),  # bad record length
        (b"\x10\x00\x02\x00\x01\x04ab\x00", 1, LogConfig(message_timestamp_after_max_ms=0),
         "InvalidTimestampError"),  # one millisecond in the future
    ],
)
def test_rejections(section: bytes, count: int, config: LogConfig, error: str) -> None:
    result = assert_same(raw_batch(section, count), config, AppendOrigin.COORDINATOR)
    assert result[0] == error


def test_max_timestamp_is_corrected_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    builder = RecordBatchBuilder()
    for ts in (NOW, NOW + 30, NOW + 10):
        builder.append(ts, None, b"v")
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 35, NOW)  # the producer claims a smaller maximum
    data = bytearray(fix_crc(data))

    def no_decoding(*args: object) -> None:
        raise AssertionError("a valid batch must not be decoded")

    monkeypatch.setattr(validation, "_check_records_by_decoding", no_decoding)
    buf, _ = validation.validate_append(bytes(data), LogConfig(), AppendOrigin.CLIENT, NOW)
    assert struct.unpack_from(">q", buf, 35)[0] == NOW + 30
    assert buf == fix_crc(buf)  # the CRC was recomputed


def test_negative_timestamps_are_not_range_checked() -> None:
    builder = RecordBatchBuilder()
    builder.append(-5, None, b"v")
    builder.append(NOW, None, b"v")
    config = LogConfig(message_timestamp_before_max_ms=1_000)
    result = assert_same(builder.build(), config, AppendOrigin.CLIENT)
    assert isinstance(result[0], bytes)


def test_in_place_only_for_a_writable_view_of_a_bytearray() -> None:
    """Read-only input (small requests arrive as ``bytes``) and views of anything but a
    ``bytearray`` are copied; a ``bytearray`` itself is used as it is."""
    builder = RecordBatchBuilder()
    builder.append(NOW, None, b"v")
    data = builder.build()
    for records in (data, memoryview(data), memoryview(bytearray(data)).toreadonly()):
        buf, positions = validation.validate_append(
            records, LogConfig(), AppendOrigin.CLIENT, NOW, in_place=True
        )
        assert type(buf) is bytearray and buf == data and positions == [0]
    owned = bytearray(data)
    buf, _ = validation.validate_append(owned, LogConfig(), AppendOrigin.CLIENT, NOW, in_place=True)
    assert buf is owned
    copied, _ = validation.validate_append(owned, LogConfig(), AppendOrigin.CLIENT, NOW)
    assert copied is not owned and copied == owned


def test_in_place_fixes_the_max_timestamp_in_the_request() -> None:
    builder = RecordBatchBuilder()
    for ts in (NOW, NOW + 30):
        builder.append(ts, None, b"v")
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 35, NOW)
    request = bytearray(b"head" + fix_crc(data))
    view = memoryview(request)[4:]
    buf, _ = validation.validate_append(view, LogConfig(), AppendOrigin.CLIENT, NOW, in_place=True)
    assert buf is view
    assert struct.unpack_from(">q", request, 4 + 35)[0] == NOW + 30
    assert bytes(view) == fix_crc(bytes(view))


def refused(records: bytes, config: LogConfig) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        validation.validate_append(records, config, AppendOrigin.CLIENT, NOW)
    return caught.value


def test_every_keyless_record_of_a_compacted_batch_is_named() -> None:
    builder = RecordBatchBuilder(Compression.NONE)
    for i, key in enumerate([b"a", None, b"c", None, b"e"]):
        builder.append(NOW + i, key, b"v")
    records = builder.build()
    compacted = LogConfig(cleanup_policy=("compact",))
    assert assert_same(records, compacted, AppendOrigin.CLIENT)[0] == "InvalidRecordError"
    error = refused(records, compacted)
    assert [e.batch_index for e in record_errors_of(error)] == [1, 3]
    messages = {e.message for e in record_errors_of(error)}
    assert messages == {"Compacted topic cannot accept message without key"}
    assert "2 record errors" in str(error)


def test_records_refused_for_key_or_timestamp_are_all_named_and_timestamps_decide_the_error() -> None:
    """One entry per record, the key's problem first (Kafka's validateRecord), and
    INVALID_TIMESTAMP as soon as one record's timestamp is out of range."""
    builder = RecordBatchBuilder(Compression.GZIP)
    for ts, key in [(NOW, b"a"), (NOW + 120_000, b"b"), (NOW + 120_000, None), (NOW, None)]:
        builder.append(ts, key, b"v")
    records = builder.build()
    config = LogConfig(cleanup_policy=("compact",), message_timestamp_after_max_ms=60_000)
    assert assert_same(records, config, AppendOrigin.CLIENT)[0] == "InvalidTimestampError"
    errors = record_errors_of(refused(records, config))
    assert [e.batch_index for e in errors] == [1, 2, 3]
    assert "out of range" in errors[0].message and "without key" in errors[1].message


def test_batch_level_errors_name_no_record() -> None:
    data = bytearray(raw_batch(GOOD, 1))
    struct.pack_into(">q", data, 0, 5)  # a produced batch must have base offset 0
    assert record_errors_of(refused(bytes(data), LogConfig())) == ()
