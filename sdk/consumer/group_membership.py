"""The consumer's group membership, whichever rebalance protocol speaks it.

``Consumer`` sees one interface (``GroupMembership``) with two implementations, as the Java
client's ``ClassicKafkaConsumer`` and ``AsyncKafkaConsumer`` do: ``ConsumerCoordinator``
(``group_protocol="classic"``: JoinGroup/SyncGroup/Heartbeat, client-side assignors) and
``ConsumerMembershipManager`` (``group_protocol="consumer"``, KIP-848: ConsumerGroupHeartbeat,
assignment computed by the broker). Both own the listener calls, the commits (auto and
explicit), the committed-offset lookups and ``group_metadata()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import ConsumerPartitionAssignor
from sdk.consumer.config import ConsumerConfig
from sdk.consumer.group_observer import GroupObserver
from sdk.consumer.records import ConsumerGroupMetadata, OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState

__all__ = ["GroupMembership", "membership_for"]


class GroupMembership(Protocol):
    """What ``Consumer`` needs of a group membership."""

    #: Told of commits and rebalances (metrics, interceptors), when set.
    observer: GroupObserver | None

    async def start(self, *, join_in_background: bool = False) -> None:
        """Start the background tasks (heartbeat, auto-commit, and the join task)."""

    async def close(self, *, leave: bool = True) -> None:
        """Commit (auto-commit), tell the listener, leave the group."""

    def record_poll(self) -> None:
        """The application polled (``max_poll_interval_ms``)."""

    def wake_join(self) -> None:
        """The subscription changed: act on it soon."""

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The identity a transactional producer sends offsets with."""
        ...

    async def maybe_leave_group(self, reason: str) -> None:
        """Leave now (``unsubscribe``)."""

    async def ensure_active_group(self, timeout_ms: float | None = None) -> bool:
        """Run the pending rebalance steps (listener calls) until the member is stable."""
        ...

    async def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit with the member's identity."""

    async def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        ...


def membership_for(
    client: KafkaClient,
    subscription: SubscriptionState,
    config: ConsumerConfig,
    assignors: Sequence[ConsumerPartitionAssignor],
) -> GroupMembership:
    """The membership ``config.group_protocol`` asks for, over ``client``."""
    from sdk.consumer.consumer_coordinator import ConsumerCoordinator
    from sdk.consumer.consumer_membership import ConsumerMembershipManager

    assert config.group_id is not None
    if config.group_protocol == "consumer":
        return ConsumerMembershipManager.for_client(
            client,
            subscription,
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            rack_id=config.client_rack,
            server_assignor=config.group_remote_assignor,
            # As Java's consumer: the time the broker waits for a revocation is the poll interval.
            rebalance_timeout_ms=int(config.max_poll_interval_ms),
            max_poll_interval_ms=int(config.max_poll_interval_ms),
            retry_backoff_ms=int(config.retry_backoff_ms),
            enable_auto_commit=config.enable_auto_commit,
            auto_commit_interval_ms=int(config.auto_commit_interval_ms),
        )
    return ConsumerCoordinator.for_client(
        client,
        subscription,
        group_id=config.group_id,
        group_instance_id=config.group_instance_id,
        session_timeout_ms=int(config.session_timeout_ms),
        heartbeat_interval_ms=int(config.heartbeat_interval_ms),
        rebalance_timeout_ms=int(config.rebalance_timeout_ms or config.session_timeout_ms),
        max_poll_interval_ms=int(config.max_poll_interval_ms),
        retry_backoff_ms=int(config.retry_backoff_ms),
        enable_auto_commit=config.enable_auto_commit,
        auto_commit_interval_ms=int(config.auto_commit_interval_ms),
        assignors=assignors,
        exclude_internal_topics=config.exclude_internal_topics,
    )
