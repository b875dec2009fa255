"""RoundRobinAssignor ("roundrobin"): all partitions dealt out one at a time over the members.

Kafka's algorithm: members in member order (static members by group.instance.id first, then
member id) form a circle; the partitions of every subscribed topic, by topic then partition, go
one by one to the next member in the circle that subscribes to the partition's topic.
"""

from __future__ import annotations

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.base import (
    ConsumerPartitionAssignor,
    java_order,
    member_order,
    sorted_partitions,
    subscribed_partition_counts,
)
from sdk.consumer.assignors.protocol import Assignment, Subscription

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(ConsumerPartitionAssignor):
    """Kafka's ``RoundRobinAssignor`` (eager only)."""

    name = "roundrobin"

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        member_instance_ids: dict[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        instance_ids = member_instance_ids or {}
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        circle = sorted(subscriptions, key=lambda m: member_order(m, instance_ids.get(m)))
        topics_of = {member: set(subscriptions[member].topics) for member in circle}
        result: dict[str, list[TopicPartition]] = {member: [] for member in circle}
        position = 0
        for topic in sorted(counts, key=java_order):
            for partition in range(counts[topic]):
                while topic not in topics_of[circle[position]]:
                    position = (position + 1) % len(circle)
                result[circle[position]].append(TopicPartition(topic, partition))
                position = (position + 1) % len(circle)
        return {member: Assignment(sorted_partitions(tps)) for member, tps in result.items()}
