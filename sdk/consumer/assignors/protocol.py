"""The consumer protocol's member metadata: what a member tells the leader, and what it gets back.

A member's JoinGroup metadata is a ``ConsumerProtocolSubscription`` and its SyncGroup assignment a
``ConsumerProtocolAssignment``, each written as a 2-byte version followed by the struct in that
version (Kafka's ``ConsumerProtocol``). Decoding follows Kafka's rules so that members of other
clients and newer versions can share a group: any version from 0 is read, a version above the
highest we know is read as the highest (newer versions only append fields), and bytes after the
struct are ignored.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.protocol import codec
from sdk.protocol.consumer_protocol import (
    HIGHEST_VERSION,
    check_encode_version,
    decode_assignment_message,
    decode_subscription_message,
    encode_assignment_message,
)
from sdk.protocol.messages import ConsumerProtocolSubscription

__all__ = [
    "HIGHEST_VERSION",
    "Assignment",
    "RebalanceProtocol",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "group_by_topic",
]

DEFAULT_GENERATION = -1
_VERSION = struct.Struct(">h")


class RebalanceProtocol(enum.IntEnum):
    """Kafka's rebalance protocols, with the ids Java's ``RebalanceProtocol`` gives them."""

    EAGER = 0
    COOPERATIVE = 1


@dataclass
class Subscription:
    """One member's subscription as the leader sees it (``ConsumerProtocolSubscription``).

    ``generation_id`` is -1 when the member has none (or sent a version before 2); ``rack_id`` is
    None when absent or empty.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None


@dataclass
class Assignment:
    """The partitions the leader hands one member (``ConsumerProtocolAssignment``)."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


def group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition numbers per topic, topics in order of first appearance."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _flatten(grouped: Iterable[Any]) -> list[TopicPartition]:
    return [TopicPartition(tp.topic, partition) for tp in grouped for partition in tp.partitions]


def encode_subscription(sub: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """The JoinGroup metadata of ``sub``: topics and owned partitions sorted, as Kafka writes them."""
    check_encode_version(version)
    owned = sorted({TopicPartition(*tp) for tp in sub.owned_partitions})
    message = ConsumerProtocolSubscription(
        topics=sorted(sub.topics),
        user_data=None if sub.user_data is None else bytes(sub.user_data),
        owned_partitions=[
            ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=partitions)
            for topic, partitions in group_by_topic(owned).items()
        ],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )
    return _VERSION.pack(version) + codec.encode(message, version)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A member's JoinGroup metadata; raises ``DecodeError`` when it is not a subscription."""
    message = decode_subscription_message(data)
    return Subscription(
        topics=list(message.topics),
        user_data=None if message.user_data is None else bytes(message.user_data),
        owned_partitions=_flatten(message.owned_partitions),
        generation_id=message.generation_id if message.generation_id >= 0 else DEFAULT_GENERATION,
        rack_id=message.rack_id or None,
    )


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """The SyncGroup assignment bytes: partitions grouped by topic in order of first appearance."""
    user_data = None if assignment.user_data is None else bytes(assignment.user_data)
    return encode_assignment_message(group_by_topic(assignment.partitions), user_data, version)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A SyncGroup assignment; raises ``DecodeError`` when it is not one."""
    message = decode_assignment_message(data)
    return Assignment(
        partitions=_flatten(message.assigned_partitions),
        user_data=None if message.user_data is None else bytes(message.user_data),
    )
