"""The consumer protocol's embedded messages on the wire (Kafka's ``ConsumerProtocol``): a
``ConsumerProtocolSubscription`` in JoinGroup metadata and a ``ConsumerProtocolAssignment`` in
SyncGroup, each a 2-byte version followed by the struct in that version.

Shared by the client's assignors and the broker's group coordinator (which reads and writes them
for classic members of consumer groups). Decoding follows Kafka's rules so that members of other
clients and newer versions can share a group: any version from 0 is read, a version above the
highest known is read as the highest (newer versions only append fields), and bytes after the
struct are ignored.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from sdk.protocol import codec
from sdk.protocol.errors import DecodeError
from sdk.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = [
    "HIGHEST_VERSION",
    "check_encode_version",
    "decode_assignment_message",
    "decode_subscription_message",
    "embedded_version",
    "encode_assignment_message",
]

HIGHEST_VERSION: int = ConsumerProtocolSubscription.VALID_VERSIONS[1]
_VERSION = struct.Struct(">h")


def embedded_version(data: bytes | bytearray | memoryview, what: str) -> tuple[memoryview, int]:
    """The struct's bytes and the version to read them at; ``DecodeError`` if there is none."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(view) < 2:
        raise DecodeError(f"consumer protocol {what}: {len(view)} bytes, too short for the version")
    (version,) = _VERSION.unpack_from(view, 0)
    if version < 0:
        raise DecodeError(f"consumer protocol {what}: unsupported version {version}")
    return view[2:], min(version, HIGHEST_VERSION)


def check_encode_version(version: int) -> None:
    """``ValueError`` unless ``version`` is one this side can write."""
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"the consumer protocol has versions 0 to {HIGHEST_VERSION}, not {version}")


def decode_subscription_message(data: bytes | bytearray | memoryview) -> Any:
    """A member's JoinGroup metadata as a ``ConsumerProtocolSubscription``."""
    body, version = embedded_version(data, "subscription")
    return codec.decode(ConsumerProtocolSubscription, body, version)


def decode_assignment_message(data: bytes | bytearray | memoryview) -> Any:
    """A SyncGroup assignment as a ``ConsumerProtocolAssignment``."""
    body, version = embedded_version(data, "assignment")
    return codec.decode(ConsumerProtocolAssignment, body, version)


def encode_assignment_message(
    partitions_by_topic: Mapping[str, Sequence[int]], user_data: bytes | None, version: int
) -> bytes:
    """SyncGroup assignment bytes, topics in the mapping's order."""
    check_encode_version(version)
    message = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(partitions))
            for topic, partitions in partitions_by_topic.items()
        ],
        user_data=user_data,
    )
    return _VERSION.pack(version) + codec.encode(message, version)
