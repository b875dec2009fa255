"""Checks of an assignment against the rules every assignor must keep (used by tests and leaders).

``cooperative_violations`` is Kafka's ``ConsumerCoordinator.validateCooperativeAssignment``: under
the cooperative protocol no partition may be added to one member while another member that claimed
it gives it up in the same assignment (it has to be revoked first). Claims are compared as the
members sent them, so a stale claim that the assignor overruled (the partition stays with the
member of the newer generation) is no violation.
"""

from __future__ import annotations

from collections.abc import Mapping

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors.protocol import Assignment, Subscription

__all__ = ["assignment_problems", "cooperative_violations"]


def cooperative_violations(
    subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment]
) -> set[TopicPartition]:
    """Partitions added to some member while another member that owned them revokes them."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, subscription in subscriptions.items():
        owned = {TopicPartition(*tp) for tp in subscription.owned_partitions}
        assignment = assignments.get(member)
        new = {TopicPartition(*tp) for tp in assignment.partitions} if assignment else set()
        added |= new - owned
        revoked |= owned - new
    return added & revoked


def assignment_problems(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    assignments: Mapping[str, Assignment],
) -> list[str]:
    """Ways ``assignments`` breaks the basic rules: a partition given twice, given to a member not
    subscribed to its topic, of a topic or partition that does not exist, or a member unknown."""
    problems = []
    seen: dict[TopicPartition, str] = {}
    for member, assignment in assignments.items():
        subscription = subscriptions.get(member)
        if subscription is None:
            problems.append(f"assignment for unknown member {member}")
            continue
        for tp in assignment.partitions:
            tp = TopicPartition(*tp)
            if tp.topic not in subscription.topics:
                problems.append(f"{tp} given to {member}, which does not subscribe to {tp.topic}")
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                problems.append(f"{tp} does not exist")
            if tp in seen:
                problems.append(f"{tp} given to both {seen[tp]} and {member}")
            seen[tp] = member
    return problems
