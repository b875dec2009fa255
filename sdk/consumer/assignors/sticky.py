"""StickyAssignor ("sticky") and CooperativeStickyAssignor ("cooperative-sticky").

Both balance partitions over the members while moving as few as possible (see
``sticky_algorithm``); they differ in how a member reports what it owned, exactly as Kafka's and
librdkafka's assignors of the same names do, so the members of a group can be of any client:

* "sticky" runs the eager protocol: members revoke everything before joining, so a member's
  previous partitions and generation travel in its ``user_data`` as Kafka's
  ``StickyAssignorUserData`` (v0: ``[topic [partition]]``; v1 appends ``generation``).
* "cooperative-sticky" (KIP-429) keeps partitions while rejoining; a member reports them in the
  subscription's ``owned_partitions`` and ``generation_id`` (v2+), and its ``user_data`` holds
  just its generation as an int32 for leaders that read subscriptions older than v2. A partition
  whose owner changes is left out of the new owner's assignment for one round: its old owner
  revokes it and rejoins, and the next rebalance hands it over.
"""

from __future__ import annotations

import struct

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.base import (
    ConsumerPartitionAssignor,
    sorted_partitions,
    subscribed_partition_counts,
)
from sdk.consumer.assignors.protocol import (
    DEFAULT_GENERATION,
    Assignment,
    RebalanceProtocol,
    Subscription,
    group_by_topic,
)
from sdk.consumer.assignors.sticky_algorithm import MemberData, sticky_assign

__all__ = [
    "CooperativeStickyAssignor",
    "StickyAssignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def encode_sticky_user_data(partitions: list[TopicPartition], generation: int | None) -> bytes:
    """``StickyAssignorUserData`` v1 (v0 when ``generation`` is None): the member's partitions
    grouped by topic, then its generation."""
    out = bytearray()
    grouped = group_by_topic(sorted_partitions(partitions))
    out += _I32.pack(len(grouped))
    for topic, numbers in grouped.items():
        name = topic.encode()
        out += _I16.pack(len(name)) + name
        out += _I32.pack(len(numbers))
        for number in numbers:
            out += _I32.pack(number)
    if generation is not None:
        out += _I32.pack(generation)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise ValueError("truncated")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def count(self) -> int:
        n = self.take(_I32)
        if n < 0 or n > len(self.data) - self.pos:
            raise ValueError(f"bad array length {n}")
        return n

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"bad string length {n}")
        text = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return text


def _read_sticky_partitions(reader: _Reader) -> list[TopicPartition]:
    partitions = []
    for _ in range(reader.count()):
        topic = reader.string()
        for _ in range(reader.count()):
            partitions.append(TopicPartition(topic, reader.take(_I32)))
    return partitions


def decode_sticky_user_data(data: bytes) -> tuple[list[TopicPartition], int | None]:
    """The partitions and generation in a ``StickyAssignorUserData``, read as Java's
    StickyAssignor reads it: as v1, else as v0 (no generation); data that is neither counts as
    no partitions in the default generation."""
    try:
        reader = _Reader(data)
        partitions = _read_sticky_partitions(reader)
    except ValueError:
        return [], DEFAULT_GENERATION
    try:
        return partitions, reader.take(_I32)
    except ValueError:
        return partitions, None


def _result(
    assignment: dict[str, list[TopicPartition]], members: dict[str, Subscription]
) -> dict[str, Assignment]:
    return {member: Assignment(sorted_partitions(assignment.get(member, []))) for member in members}


class StickyAssignor(ConsumerPartitionAssignor):
    """Kafka's ``StickyAssignor`` (eager): previous partitions travel in the user data."""

    name = "sticky"

    def __init__(self) -> None:
        self._partitions: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        if self._partitions is None:
            return None
        return encode_sticky_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._partitions = [TopicPartition(*tp) for tp in assignment.partitions]
        self._generation = generation_id

    @staticmethod
    def member_data(subscription: Subscription) -> MemberData:
        """What the leader learns of a member: its user data's partitions and generation."""
        if not subscription.user_data:
            owned: list[TopicPartition] = []
            generation: int | None = None
        else:
            owned, generation = decode_sticky_user_data(subscription.user_data)
        return MemberData(frozenset(subscription.topics), owned, generation, subscription.generation_id)

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        member_instance_ids: dict[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        members = {m: self.member_data(s) for m, s in subscriptions.items()}
        return _result(sticky_assign(counts, members).assignment, subscriptions)


class CooperativeStickyAssignor(ConsumerPartitionAssignor):
    """Kafka's ``CooperativeStickyAssignor``: sticky placement under the cooperative protocol."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return _I32.pack(self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    @staticmethod
    def member_data(subscription: Subscription) -> MemberData:
        """Owned partitions and generation from the subscription (v2+); before v2 the
        generation comes from the user data's int32."""
        owned = [TopicPartition(*tp) for tp in subscription.owned_partitions]
        generation: int | None
        if subscription.generation_id >= 0:
            generation = subscription.generation_id
        elif subscription.user_data is None:
            generation = None
        elif len(subscription.user_data) >= _I32.size:
            generation = _I32.unpack_from(subscription.user_data)[0]
        else:
            generation = DEFAULT_GENERATION
        return MemberData(frozenset(subscription.topics), owned, generation, subscription.generation_id)

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        member_instance_ids: dict[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        members = {m: self.member_data(s) for m, s in subscriptions.items()}
        result = sticky_assign(counts, members)
        transferring = result.transferring
        if transferring is None:
            transferring = _changing_owner(subscriptions, result.assignment)
        assignment = {m: list(tps) for m, tps in result.assignment.items()}
        for tp, new_owner in transferring.items():
            if tp in assignment[new_owner]:
                assignment[new_owner].remove(tp)
        return _result(assignment, subscriptions)


def _changing_owner(
    subscriptions: dict[str, Subscription], assignment: dict[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions newly given to a member that some member gives up in this assignment (Java's
    ``computePartitionsTransferringOwnership``)."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, partitions in assignment.items():
        owned = {TopicPartition(*tp) for tp in subscriptions[member].owned_partitions}
        new = set(partitions)
        for tp in partitions:
            if tp not in owned:
                added[tp] = member
        revoked.update(owned - new)
    return {tp: member for tp, member in added.items() if tp in revoked}
