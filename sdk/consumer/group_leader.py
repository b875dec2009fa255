"""What the member the coordinator elects leader does: read every member's subscription, learn
the partition counts, run the chosen assignor and check its result.

``ConsumerCoordinator`` calls these between JoinGroup and SyncGroup; the metadata the leader
watches afterwards (a partition count that changes makes it rebalance the group) is reached
through ``TopicMetadata``, a ``KafkaClient``'s (``ClientTopics``) or a test's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sdk.client.client import KafkaClient
from sdk.consumer.assignors import (
    Assignment,
    ConsumerPartitionAssignor,
    RebalanceProtocol,
    Subscription,
    decode_subscription,
    encode_assignment,
)
from sdk.consumer.assignors.validation import cooperative_violations
from sdk.consumer.group_channel import GroupChannel
from sdk.errors import ErrorCode, KafkaError, make_error
from sdk.protocol.messages import MetadataRequest

__all__ = [
    "ClientTopics",
    "TopicMetadata",
    "assign",
    "choose_assignor",
    "decode_members",
    "partition_counts",
]

log = logging.getLogger(__name__)


class TopicMetadata(Protocol):
    """What the membership needs of the client's metadata: the leader watches the partition
    counts of the topics it assigned, and has the client track them."""

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the latest metadata (None when unknown)."""
        ...

    def track(self, topic: str) -> None:
        """Keep ``topic`` in the client's metadata refreshes."""
        ...


class ClientTopics:
    """``TopicMetadata`` of a ``KafkaClient``."""

    def __init__(self, client: KafkaClient) -> None:
        self._client = client

    def partition_count(self, topic: str) -> int | None:
        partitions = self._client.cluster.partitions_for(topic)
        return len(partitions) if partitions else None

    def track(self, topic: str) -> None:
        self._client.add_topic(topic)


def choose_assignor(
    assignors: Sequence[ConsumerPartitionAssignor], protocol_name: str | None
) -> ConsumerPartitionAssignor:
    """The assignor the coordinator chose; INCONSISTENT_GROUP_PROTOCOL if we did not offer it."""
    assignor = next((a for a in assignors if a.name == protocol_name), None)
    if assignor is None:
        raise make_error(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            f"the coordinator chose protocol {protocol_name!r}, which this member did not offer",
        )
    return assignor


def decode_members(members: Iterable[Any]) -> tuple[dict[str, Subscription], dict[str, str | None]]:
    """Each JoinGroup member's subscription and group instance id, by member id."""
    subscriptions: dict[str, Subscription] = {}
    instance_ids: dict[str, str | None] = {}
    for member in members:
        subscriptions[member.member_id] = decode_subscription(bytes(member.metadata))
        instance_ids[member.member_id] = member.group_instance_id
    return subscriptions, instance_ids


def assign(
    assignor: ConsumerPartitionAssignor,
    protocol: RebalanceProtocol,
    subscriptions: Mapping[str, Subscription],
    instance_ids: Mapping[str, str | None],
    counts: Mapping[str, int],
) -> dict[str, bytes]:
    """Every member's encoded assignment. Under the cooperative protocol an assignment that moves a
    partition between members without revoking it first is refused, as Kafka's leader does
    (``validateCooperativeAssignment``)."""
    result = assignor.assign(dict(counts), dict(subscriptions), dict(instance_ids))
    if protocol == RebalanceProtocol.COOPERATIVE:
        moved = cooperative_violations(dict(subscriptions), result)
        if moved:
            raise KafkaError(
                f"assignor {assignor.name} moved {sorted(moved)[:5]} between members without revoking "
                "them first, which the cooperative protocol forbids"
            )
    log.debug("leader assigned %s", result)
    return {
        member_id: encode_assignment(result.get(member_id) or Assignment(partitions=[]))
        for member_id in subscriptions
    }


async def partition_counts(channel: GroupChannel, topics: Sequence[str]) -> dict[str, int]:
    """Partition count of each topic that exists (one Metadata request, no auto-creation).

    Asked on the coordinator connection: any broker answers Metadata, and the connection the
    fetcher uses may have a Fetch long poll ahead of it (measured: SyncGroup up to
    fetch_max_wait_ms later)."""
    if not topics:
        return {}
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    response = (await channel.send(MetadataRequest.API_KEY, lambda _: request)).response
    return {
        topic.name: len(topic.partitions)
        for topic in response.topics
        if not topic.error_code and topic.name in topics
    }
