"""RangeAssignor ("range"): each topic split into contiguous ranges, one per subscribed member.

Kafka's algorithm (and librdkafka's): per topic, the members subscribed to it in member order
(static members by group.instance.id first, then member id); each gets ``partitions // members``
consecutive partitions and the first ``partitions % members`` of them one more. Topics with the
same partition count are therefore co-partitioned across members.
"""

from __future__ import annotations

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.base import (
    ConsumerPartitionAssignor,
    member_order,
    sorted_partitions,
    subscribed_partition_counts,
)
from sdk.consumer.assignors.protocol import Assignment, Subscription

__all__ = ["RangeAssignor"]


class RangeAssignor(ConsumerPartitionAssignor):
    """Kafka's ``RangeAssignor`` (eager only), without rack awareness."""

    name = "range"

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        member_instance_ids: dict[str, str | None] | None = None,
    ) -> dict[str, Assignment]:
        instance_ids = member_instance_ids or {}
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        for topic, count in counts.items():
            members = sorted(
                (m for m, s in subscriptions.items() if topic in s.topics),
                key=lambda m: member_order(m, instance_ids.get(m)),
            )
            per_member, extra = divmod(count, len(members))
            start = 0
            for index, member in enumerate(members):
                length = per_member + (1 if index < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return {member: Assignment(sorted_partitions(tps)) for member, tps in result.items()}
