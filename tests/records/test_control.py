"""Control batches: transaction markers built, parsed, and read by other clients."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.records import (
    ControlRecord,
    ControlType,
    InvalidControlRecordError,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    control_record_key,
    end_txn_marker_value,
    parse_control_record,
)

from .oracles import AioBatch, AioControlRecord, KafkaBatch


def test_key_and_value_layout() -> None:
    assert control_record_key(ControlType.COMMIT) == b"\x00\x00\x00\x01"
    assert control_record_key(ControlType.ABORT) == b"\x00\x00\x00\x00"
    assert end_txn_marker_value(7) == b"\x00\x00\x00\x00\x00\x07"
    assert end_txn_marker_value(-1) == b"\x00\x00\xff\xff\xff\xff"


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_build_control_batch(control_type: ControlType) -> None:
    data = build_control_batch(control_type, 4242, 3, 17, base_offset=99, timestamp_ms=5_000)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, -1)
    assert (batch.base_offset, batch.record_count, batch.max_timestamp) == (99, 1, 5_000)
    marker = batch.control_record()
    assert marker == ControlRecord(control_type, 0, 17)
    assert isinstance(marker.type, ControlType)
    (record,) = batch
    assert record.offset == 99
    assert record.key == control_record_key(control_type)
    assert record.value == end_txn_marker_value(17)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([ControlType.ABORT, ControlType.COMMIT]),
    st.integers(0, 2**62),
    st.integers(0, 2**15 - 1),
    st.integers(-1, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(-1, 2**31 - 1),
)
def test_control_batch_property(
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int,
    leader_epoch: int,
) -> None:
    data = build_control_batch(
        control_type,
        producer_id,
        producer_epoch,
        coordinator_epoch,
        base_offset,
        1_000,
        partition_leader_epoch=leader_epoch,
    )
    batch = RecordBatch(data)
    assert batch.control_record() == (control_type, 0, coordinator_epoch)
    assert batch.partition_leader_epoch == leader_epoch
    # Other clients see the same marker.
    (aio_record,) = list(AioBatch(data))
    assert AioControlRecord.parse(aio_record.key) == AioControlRecord(0, int(control_type))
    (kafka_record,) = list(KafkaBatch(data))
    assert kafka_record.type == control_type
    assert kafka_record.commit == (control_type == ControlType.COMMIT)


def test_none_timestamp_is_now() -> None:
    batch = RecordBatch(build_control_batch(ControlType.COMMIT, 1, 0, 0))
    assert batch.max_timestamp > 1_600_000_000_000


def test_parse_errors() -> None:
    with pytest.raises(InvalidControlRecordError):
        parse_control_record(None, b"")
    with pytest.raises(InvalidControlRecordError):
        parse_control_record(b"\x00\x00\x00", end_txn_marker_value(1))
    with pytest.raises(InvalidControlRecordError):
        parse_control_record(control_record_key(ControlType.COMMIT), b"\x00\x00\x00")
    with pytest.raises(InvalidControlRecordError):
        parse_control_record(control_record_key(ControlType.ABORT), None)
    with pytest.raises(InvalidControlRecordError):
        parse_control_record(b"\xff\xff\x00\x01", end_txn_marker_value(1))


def test_newer_versions_and_unknown_types() -> None:
    # Newer versions parse as version 0 plus ignored trailing fields, as Java does.
    parsed = parse_control_record(b"\x00\x01\x00\x01extra", b"\x00\x03\x00\x00\x00\x09more")
    assert parsed == ControlRecord(ControlType.COMMIT, 1, 9)
    # KRaft markers carry other values; their coordinator epoch is reported as -1.
    assert parse_control_record(b"\x00\x00\x00\x02", b"anything") == (
        ControlType.LEADER_CHANGE,
        0,
        -1,
    )
    unknown = parse_control_record(b"\x00\x00\x00\x63", None)
    assert unknown == (99, 0, -1) and not isinstance(unknown.type, ControlType)


def test_control_record_misuse() -> None:
    builder = RecordBatchBuilder()
    builder.append(1, b"k", b"v")
    with pytest.raises(ValueError, match="not a control batch"):
        RecordBatch(builder.build()).control_record()
    empty = RecordBatchBuilder(is_control=True).build()
    with pytest.raises(InvalidControlRecordError):
        RecordBatch(empty).control_record()
    bad = RecordBatchBuilder(is_control=True)
    bad.append(1, b"\x00", b"")
    with pytest.raises(InvalidControlRecordError):
        RecordBatch(bad.build()).control_record()
