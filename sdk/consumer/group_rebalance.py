"""The decisions of a rebalance that need no broker: which protocol, what moves, what to tell.

Kept apart from ``consumer_coordinator`` so they can be tested as plain functions: the protocol a
member runs (EAGER unless every assignor supports COOPERATIVE, as Kafka's ConsumerCoordinator
chooses), and, for a new assignment, the partitions revoked and added under each protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from typing import NamedTuple

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import ConsumerPartitionAssignor, RebalanceProtocol, Subscription

__all__ = [
    "AssignmentChange",
    "assignment_change",
    "rebalance_protocol",
    "topics_of",
]


def rebalance_protocol(assignors: Sequence[ConsumerPartitionAssignor]) -> RebalanceProtocol:
    """COOPERATIVE if every assignor supports it, else EAGER (a group may mix both during an
    upgrade only when each member can fall back to eager)."""
    if not assignors:
        raise ValueError("a group member needs at least one partition assignor")
    if all(RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in assignors):
        return RebalanceProtocol.COOPERATIVE
    if all(RebalanceProtocol.EAGER in a.supported_protocols for a in assignors):
        return RebalanceProtocol.EAGER
    names = ", ".join(a.name for a in assignors)
    raise ValueError(f"assignors {names} share no rebalance protocol")


class AssignmentChange(NamedTuple):
    """What a new assignment means for the listener.

    ``revoked``: give these up now (``on_partitions_revoked``); ``assigned``: hand these to
    ``on_partitions_assigned``; ``rejoin``: cooperative members rejoin after revoking anything,
    so the partitions they gave up can be handed out in a second round.
    """

    revoked: frozenset[TopicPartition]
    assigned: frozenset[TopicPartition]
    rejoin: bool


def assignment_change(
    protocol: RebalanceProtocol, owned: Iterable[TopicPartition], new: Iterable[TopicPartition]
) -> AssignmentChange:
    """The listener calls for moving from ``owned`` to ``new``.

    Eager: everything owned was already revoked before joining, so nothing is revoked here and
    the whole new assignment is announced. Cooperative (KIP-429): only partitions no longer
    assigned are revoked, only new ones are announced, and a revocation asks for another round.
    """
    owned_set, new_set = frozenset(owned), frozenset(new)
    if protocol == RebalanceProtocol.EAGER:
        return AssignmentChange(owned_set - new_set, new_set, False)
    revoked = owned_set - new_set
    return AssignmentChange(revoked, new_set - owned_set, bool(revoked))


def topics_of(subscriptions: Mapping[str, Subscription]) -> Set[str]:
    """Every topic some member subscribes to (the leader fetches metadata for all of them)."""
    topics: set[str] = set()
    for subscription in subscriptions.values():
        topics.update(subscription.topics)
    return topics
