"""The broker-free parts of a rebalance: protocol choice, what moves, and listener calls."""

from __future__ import annotations

from typing import Any

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import RebalanceProtocol, Subscription
from sdk.consumer.group_rebalance import (
    assignment_change,
    rebalance_protocol,
    topics_of,
)
from sdk.consumer.listener import ConsumerRebalanceListener, call_listener

EAGER, COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


class NamedAssignor:
    """Only what rebalance_protocol reads: a name and the protocols supported."""

    def __init__(self, name: str, *protocols: RebalanceProtocol) -> None:
        self.name = name
        self.supported_protocols = protocols


def test_protocol_is_cooperative_only_when_every_assignor_supports_it() -> None:
    range_ = NamedAssignor("range", EAGER)
    coop = NamedAssignor("cooperative-sticky", COOPERATIVE, EAGER)
    coop_only = NamedAssignor("coop-only", COOPERATIVE)
    assert rebalance_protocol([coop]) == COOPERATIVE
    assert rebalance_protocol([coop, coop_only]) == COOPERATIVE
    assert rebalance_protocol([coop, range_]) == EAGER
    assert rebalance_protocol([range_]) == EAGER
    with pytest.raises(ValueError, match="share no rebalance protocol"):
        rebalance_protocol([range_, coop_only])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        rebalance_protocol([])


def test_eager_change_announces_the_whole_assignment() -> None:
    # Eager members revoked everything before joining: they own nothing when the assignment comes.
    change = assignment_change(EAGER, [], [tp("a", 0), tp("a", 1)])
    assert change.revoked == frozenset()
    assert change.assigned == {tp("a", 0), tp("a", 1)}
    assert not change.rejoin


def test_cooperative_change_revokes_only_what_moved_and_asks_for_a_second_round() -> None:
    owned = [tp("a", 0), tp("a", 1), tp("a", 2)]
    change = assignment_change(COOPERATIVE, owned, [tp("a", 0), tp("a", 1), tp("b", 0)])
    assert change.revoked == {tp("a", 2)}
    assert change.assigned == {tp("b", 0)}
    assert change.rejoin
    unchanged = assignment_change(COOPERATIVE, owned, owned)
    assert unchanged == (frozenset(), frozenset(), False)
    grown = assignment_change(COOPERATIVE, owned[:1], owned)
    assert grown.assigned == {tp("a", 1), tp("a", 2)} and not grown.rejoin


def test_topics_of_every_member() -> None:
    members = {"x": Subscription(topics=["a", "b"]), "y": Subscription(topics=["c"])}
    assert topics_of(members) == {"a", "b", "c"}


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", assigned))


async def test_listener_hooks_may_be_sync_or_async_and_lost_defaults_to_revoked() -> None:
    listener = Recorder()
    await call_listener(listener, "on_partitions_revoked", {tp("a", 0)})
    await call_listener(listener, "on_partitions_assigned", {tp("a", 1)})
    await call_listener(listener, "on_partitions_lost", {tp("a", 2)})
    assert listener.calls == [
        ("revoked", frozenset({tp("a", 0)})),
        ("assigned", frozenset({tp("a", 1)})),
        ("revoked", frozenset({tp("a", 2)})),
    ]


async def test_duck_typed_listener_without_some_hooks() -> None:
    seen: list[Any] = []

    class OnlyRevoked:
        async def on_partitions_revoked(self, revoked: Any) -> None:
            seen.append(revoked)

    await call_listener(OnlyRevoked(), "on_partitions_assigned", {tp("a", 0)})
    await call_listener(OnlyRevoked(), "on_partitions_lost", {tp("a", 1)})
    await call_listener(None, "on_partitions_revoked", {tp("a", 2)})
    assert seen == [frozenset({tp("a", 1)})]
