"""ConsumerRebalanceListener: the application's hooks into group rebalances.

The group coordinator calls them inside ``ensure_active_group`` (from ``start()``, the background
join task or a poll; one at a time, under the join lock), never from the heartbeat task, so a
listener sees a consistent assignment and may commit, seek or read ``consumer.position``. A poll
that comes while a listener runs waits for the rebalance to end. Each hook may be a plain method
or a coroutine function; the listener need not subclass ``ConsumerRebalanceListener``
(``is_rebalance_listener``).

Order, as in Kafka's Java client: ``on_partitions_revoked`` before partitions are given up (in
the eager protocol all of them before every rejoin; in the cooperative protocol only those that
moved to another member), ``on_partitions_assigned`` after the new assignment is in place (eager:
the whole assignment; cooperative: only the partitions added), and ``on_partitions_lost`` instead
of revoked when the partitions may already belong to someone else (the member was fenced, its
session expired, or the coordinator answered UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION), so
committing them would be wrong.

An exception from a hook is logged and the rebalance goes on (as in aiokafka): the group must not
be left half-rebalanced because application code failed.
"""

from __future__ import annotations

import inspect
from collections.abc import Set
from typing import Any

from sdk.client.cluster import TopicPartition

__all__ = ["ConsumerRebalanceListener", "call_listener", "is_rebalance_listener"]


class ConsumerRebalanceListener:
    """Subclass and override what you need; every hook does nothing by default except
    ``on_partitions_lost``, which calls ``on_partitions_revoked`` as Java's default does."""

    def on_partitions_revoked(self, revoked: Set[TopicPartition]) -> Any:
        """Called before ``revoked`` stop being this consumer's (commit their offsets here)."""

    def on_partitions_assigned(self, assigned: Set[TopicPartition]) -> Any:
        """Called once ``assigned`` are this consumer's (seek here to start elsewhere)."""

    def on_partitions_lost(self, lost: Set[TopicPartition]) -> Any:
        """Called when ``lost`` were taken away without a revocation; do not commit them."""
        return self.on_partitions_revoked(lost)


def is_rebalance_listener(listener: Any) -> bool:
    """Whether ``listener`` can serve as a rebalance listener: a ``ConsumerRebalanceListener``,
    or any object with callable ``on_partitions_revoked`` and ``on_partitions_assigned`` (duck
    typing: code written for aiokafka's or another client's listener class works unchanged)."""
    if isinstance(listener, ConsumerRebalanceListener):
        return True
    hooks = ("on_partitions_revoked", "on_partitions_assigned")
    return all(callable(getattr(listener, hook, None)) for hook in hooks)


async def call_listener(listener: Any, hook: str, partitions: Set[TopicPartition]) -> None:
    """Call ``listener.<hook>(partitions)``, awaiting it if it is a coroutine; a listener without
    the hook (a duck-typed object) is skipped, except that a missing ``on_partitions_lost`` falls
    back to ``on_partitions_revoked``."""
    if listener is None:
        return
    method = getattr(listener, hook, None)
    if method is None and hook == "on_partitions_lost":
        method = getattr(listener, "on_partitions_revoked", None)
    if method is None:
        return
    result = method(frozenset(partitions))
    if inspect.isawaitable(result):
        await result
