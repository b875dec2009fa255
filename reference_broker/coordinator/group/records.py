"""The ``__consumer_offsets`` record formats, as Kafka's group coordinator writes them.

The record classes (OffsetCommitKey, OffsetCommitValue, GroupMetadataKey, GroupMetadataValue) are
generated from Kafka's definitions into ``reference_broker.internal_records``; the protocol codec
encodes and decodes them, so no byte layout is written by hand.

A record's key is ``int16 key version`` + the key struct: versions 0-1 are an offset commit
(group, topic, partition), version 2 is group metadata (group). Its value is ``int16 value
version`` + the value struct, or null (a tombstone: the offset or group was deleted).
"""

from __future__ import annotations

import dataclasses
import struct

from reference_broker.internal_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from sdk.protocol.codec import decode, encode
from sdk.protocol.messages import Message

#: The versions Kafka 4.1 writes (offset value v1 only when a v2-v4 OffsetCommit asked for a
#: retention); every version is read.
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 4
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


@dataclasses.dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class GroupKey:
    group: str


def _versioned(version: int, msg: Message) -> bytes:
    return struct.pack(">h", version) + encode(msg, version)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _versioned(OFFSET_KEY_VERSION, OffsetCommitKey(group=group, topic=topic, partition=partition))


def group_key(group: str) -> bytes:
    return _versioned(GROUP_KEY_VERSION, GroupMetadataKey(group=group))


def offset_value(
    offset: int, leader_epoch: int, metadata: str, commit_ms: int, expire_ms: int | None
) -> bytes:
    value = OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_ms,
        expire_timestamp=-1 if expire_ms is None else expire_ms,
    )
    version = OFFSET_VALUE_VERSION if expire_ms is None else OFFSET_VALUE_VERSION_WITH_EXPIRY
    return _versioned(version, value)


def group_value(value: GroupMetadataValue) -> bytes:
    return _versioned(GROUP_VALUE_VERSION, value)


def parse_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record, or None for a kind this broker does not keep
    (the new consumer protocol's records, versions 3+)."""
    (version,) = struct.unpack_from(">h", data)
    body = memoryview(data)[2:]
    if version in (0, 1):
        key = decode(OffsetCommitKey, body, version)
        return OffsetKey(key.group, key.topic, key.partition)
    if version == GROUP_KEY_VERSION:
        return GroupKey(decode(GroupMetadataKey, body, version).group)
    return None


def parse_offset_value(data: bytes) -> OffsetCommitValue:
    (version,) = struct.unpack_from(">h", data)
    return decode(OffsetCommitValue, memoryview(data)[2:], version)


def parse_group_value(data: bytes) -> GroupMetadataValue:
    (version,) = struct.unpack_from(">h", data)
    return decode(GroupMetadataValue, memoryview(data)[2:], version)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around, signed)."""
    h = 0
    raw = text.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`` (``Utils.abs`` maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
