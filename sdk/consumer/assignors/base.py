"""The interface every partition assignor implements, and helpers the built-in ones share.

Assignors are sans-IO: the group leader hands one the partition count of each topic and every
member's decoded subscription, and sends whatever it returns. A custom assignor subclasses
``ConsumerPartitionAssignor``; its ``name`` is the protocol name offered in JoinGroup, so members
of other clients running an assignor of the same name can share the group with it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.protocol import Assignment, RebalanceProtocol, Subscription

__all__ = [
    "ConsumerPartitionAssignor",
    "java_hash_map_order",
    "java_order",
    "java_string_hash",
    "member_order",
    "subscribed_partition_counts",
]


def java_order(text: str) -> bytes:
    """Sort key ordering strings as Java's ``String.compareTo`` does (by UTF-16 code unit), so
    names outside the Basic Multilingual Plane sort where a Java leader would put them."""
    return text.encode("utf-16-be", "surrogatepass")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (as an unsigned 32-bit value)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def java_bucket(hash_code: int, capacity: int) -> int:
    """The bucket of a ``java.util.HashMap`` of ``capacity`` a key with ``hash_code`` lands in."""
    hash_code &= 0xFFFFFFFF
    return (hash_code ^ (hash_code >> 16)) & (capacity - 1)


def java_capacity(size: int) -> int:
    """The table size of a default ``HashMap`` after ``size`` insertions (load factor 0.75)."""
    capacity = 16
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def java_hash_map_order(keys: Iterable[str]) -> list[str]:
    """The order a Java ``HashMap<String, ...>`` filled with ``keys`` in this order iterates them:
    by bucket, then by insertion within a bucket. The sticky algorithm visits members in map order
    where it has a choice, so a Java leader given the members in JoinGroup order decides the same."""
    keys = list(keys)
    capacity = java_capacity(len(keys))
    position = {key: index for index, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (java_bucket(java_string_hash(k), capacity), position[k]))


def member_order(member_id: str, instance_id: str | None) -> tuple[int, bytes]:
    """Kafka's member order (``AbstractPartitionAssignor.MemberInfo``): static members first, by
    group.instance.id (KIP-345, so a restarted static member keeps its place), then dynamic
    members by member id."""
    if instance_id is not None:
        return (0, java_order(instance_id))
    return (1, java_order(member_id))


def subscribed_partition_counts(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, int]:
    """The topics some member subscribes to that have partitions, as Kafka's leader passes them
    to an assignor (topics without metadata or partitions are left out)."""
    wanted = {topic for subscription in subscriptions.values() for topic in subscription.topics}
    return {topic: count for topic, count in partitions_per_topic.items() if topic in wanted and count > 0}


def sorted_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """Partitions by topic, then partition number."""
    return sorted(partitions, key=lambda tp: (java_order(tp.topic), tp.partition))


class ConsumerPartitionAssignor(ABC):
    """A partition assignment strategy (Kafka's ``ConsumerPartitionAssignor``).

    ``name`` is the protocol name sent in JoinGroup; ``supported_protocols`` the rebalance
    protocols it can run under (a member runs COOPERATIVE only if all its assignors support it).
    """

    name: str = ""
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        """The ``user_data`` this member sends with its subscription (None by default)."""
        return None

    @abstractmethod
    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        member_instance_ids: dict[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        """Leader: the assignment of every member in ``subscriptions``.

        ``partitions_per_topic`` holds the partition count of each subscribed topic that exists;
        ``member_instance_ids`` the group.instance.id of static members.
        """

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:  # noqa: B027
        """Called on every member with its assignment once SyncGroup succeeded (no-op by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
