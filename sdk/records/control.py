"""Control records: the transaction markers a coordinator writes into partitions.

A control batch has the control attribute bit set and holds one record whose key is
``int16 version, int16 type`` and, for COMMIT/ABORT markers, whose value is
``int16 version, int32 coordinatorEpoch`` (Kafka's ``EndTransactionMarker``). Consumers use them to
drop aborted data (read_committed) and never hand them to applications.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from sdk.records.builder import RecordBatchBuilder
from sdk.records.compression import Compression
from sdk.records.errors import InvalidControlRecordError

__all__ = [
    "ControlRecord",
    "ControlType",
    "build_control_batch",
    "control_record_key",
    "end_txn_marker_value",
    "parse_control_record",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Control record types (Java's ``ControlRecordType``); 2+ are KRaft metadata-log markers."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class ControlRecord(NamedTuple):
    """A parsed control record; ``coordinator_epoch`` is -1 for types that are not COMMIT/ABORT."""

    type: ControlType | int
    version: int
    coordinator_epoch: int


def control_record_key(control_type: ControlType | int, version: int = 0) -> bytes:
    """Key bytes of a control record."""
    return _KEY.pack(version, control_type)


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    """Value bytes of a COMMIT/ABORT marker."""
    return _VALUE.pack(version, coordinator_epoch)


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record's key (and, for transaction markers, its value).

    Newer key/value versions are read as version 0, as Java does: fields are only ever appended.
    Unknown types are returned as plain ints so a newer broker's markers do not break readers.
    """
    if key is None or len(key) < _KEY.size:
        raise InvalidControlRecordError(f"control record key too short: {key!r}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidControlRecordError(f"negative control record key version {version}")
    try:
        ctype: ControlType | int = ControlType(type_id)
    except ValueError:
        ctype = type_id
    coordinator_epoch = -1
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        if value is None or len(value) < _VALUE.size:
            raise InvalidControlRecordError(f"transaction marker value too short: {value!r}")
        _value_version, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlRecord(ctype, version, coordinator_epoch)


def build_control_batch(
    control_type: ControlType | int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    *,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One COMMIT/ABORT marker batch, transactional and control, as the coordinator writes it."""
    builder = RecordBatchBuilder(
        Compression.NONE,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        timestamp_ms,
        control_record_key(control_type),
        end_txn_marker_value(coordinator_epoch),
    )
    return builder.build()
