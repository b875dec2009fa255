"""Record framing of the ``__cluster_metadata`` log, as Kafka's ``MetadataRecordSerde``.

A data record's key is null and its value is: unsigned varint frame version (1), unsigned varint
record type (the record class's ``API_KEY``), unsigned varint record version, then the record
encoded at that version. Control records (LeaderChangeMessage and the snapshot and voters
records) sit in control batches: the key is Kafka's control key (int16 version 0, int16 type)
and the value the message alone at version 0 (Kafka's ``ControlRecordUtils`` current versions;
no version prefix: the message's own ``version`` field comes first).
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_broker.internal_records import METADATA_RECORD_TYPES
from sdk.protocol.codec import decode, encode
from sdk.protocol.messages import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    Message,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
)
from sdk.records.batch import RecordBatch
from sdk.records.builder import RecordBatchBuilder
from sdk.records.compression import Compression
from sdk.records.control import ControlType, control_record_key, parse_control_record

FRAME_VERSION = 1
#: the version KRaft control records are written and read at (Kafka's *_CURRENT_VERSION)
CONTROL_RECORD_VERSION = 0

#: The control message class of each KRaft control record type.
CONTROL_CLASSES: dict[int, type[Message]] = {
    ControlType.LEADER_CHANGE: LeaderChangeMessage,
    ControlType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlType.KRAFT_VERSION: KRaftVersionRecord,
    ControlType.KRAFT_VOTERS: VotersRecord,
}
_CONTROL_TYPES: dict[type[Message], int] = {cls: t for t, cls in CONTROL_CLASSES.items()}


class MetadataRecordError(ValueError):
    """A metadata log value that does not decode (bad frame, unknown type or version)."""


def _write_uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise MetadataRecordError("metadata record frame ends inside a varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MetadataRecordError("metadata record frame varint longer than 5 bytes")


def record_version(record: Message) -> int:
    """The version a record is written at: the newest its class knows."""
    return int(record.VALID_VERSIONS[1])


def encode_metadata_record(record: Message, version: int | None = None) -> bytes:
    """One metadata record's value in MetadataRecordSerde framing."""
    api_key = getattr(record, "API_KEY", None)
    if api_key is None or METADATA_RECORD_TYPES.get(api_key) is not type(record):
        raise MetadataRecordError(f"{type(record).__name__} is not a metadata record")
    if version is None:
        version = record_version(record)
    out = bytearray()
    _write_uvarint(out, FRAME_VERSION)
    _write_uvarint(out, api_key)
    _write_uvarint(out, version)
    out += encode(record, version)
    return bytes(out)


def decode_metadata_record(value: bytes | memoryview) -> Message:
    """The record a MetadataRecordSerde value holds."""
    frame, pos = _read_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise MetadataRecordError(f"unknown metadata record frame version {frame}")
    record_type, pos = _read_uvarint(value, pos)
    version, pos = _read_uvarint(value, pos)
    cls = METADATA_RECORD_TYPES.get(record_type)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {record_type}")
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise MetadataRecordError(f"{cls.__name__} version {version} is not in {low}..{high}")
    try:
        record = decode(cls, bytes(value[pos:]), version)
    except Exception as exc:  # the codec's errors name what broke
        raise MetadataRecordError(f"{cls.__name__} v{version} does not decode: {exc}") from exc
    return record


def build_data_batch(records: Sequence[Message], *, base_offset: int, epoch: int,
                     timestamp_ms: int) -> bytes:
    """A batch of metadata records stamped with the raft ``epoch``."""
    if not records:
        raise ValueError("a metadata batch needs at least one record")
    builder = RecordBatchBuilder(Compression.NONE, base_offset=base_offset,
                                 partition_leader_epoch=epoch)
    for record in records:
        builder.append(timestamp_ms, None, encode_metadata_record(record))
    return builder.build()


def build_control_record_batch(message: Message, *, base_offset: int, epoch: int,
                               timestamp_ms: int) -> bytes:
    """A control batch holding one KRaft control message (LeaderChangeMessage, ...)."""
    control_type = _CONTROL_TYPES.get(type(message))
    if control_type is None:
        raise MetadataRecordError(f"{type(message).__name__} is not a KRaft control record")
    builder = RecordBatchBuilder(Compression.NONE, base_offset=base_offset, is_control=True,
                                 partition_leader_epoch=epoch)
    builder.append(timestamp_ms, control_record_key(control_type),
                   encode(message, CONTROL_RECORD_VERSION))
    return builder.build()


def decode_control_record(key: bytes | None, value: bytes | None) -> Message:
    """The KRaft control message of one control record."""
    control = parse_control_record(key, value)
    cls = CONTROL_CLASSES.get(int(control.type))
    if cls is None or value is None:
        raise MetadataRecordError(f"control record type {control.type} is not a KRaft record")
    try:
        return decode(cls, bytes(value), CONTROL_RECORD_VERSION)
    except Exception as exc:  # the codec's errors name what broke
        raise MetadataRecordError(f"{cls.__name__} does not decode: {exc}") from exc


def batch_records(batch: RecordBatch) -> list[Message]:
    """Every record of a metadata log batch, decoded (control messages for control batches)."""
    if batch.is_control:
        return [decode_control_record(r.key, r.value) for r in batch.iter_records()]
    out = []
    for r in batch.iter_records():
        if r.value is None:
            raise MetadataRecordError(f"metadata record at offset {r.offset} has no value")
        out.append(decode_metadata_record(r.value))
    return out
