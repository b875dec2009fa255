"""Regular expression subscriptions (ConsumerGroupHeartbeat v1 SubscribedTopicRegex) resolved on
the broker as Kafka 4.1 does: with RE2 semantics (whole-name match), after the heartbeat is
answered, the resolved topics kept in ConsumerGroupRegularExpression records and replayed, new
matching topics picked up at a later heartbeat with a group epoch bump, an invalid expression
refused with INVALID_REGULAR_EXPRESSION."""

from __future__ import annotations

import struct
import uuid

from reference_broker.coordinator.group import consumer_records as rec
from reference_broker.coordinator.group.consumer_coordinator import REGEX_REFRESH_MIN_INTERVAL_MS
from reference_broker.coordinator.group.consumer_group import TopicInfo
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.group.test_consumer_coordinator import Member, Node

REGEX = "^orders.*"


class RegexNode(Node):
    """A coordinator whose topic table also answers the names a regex is matched against."""

    def __init__(self) -> None:
        super().__init__()
        self.topics["orders-eu"] = TopicInfo(uuid.UUID(int=2), "orders-eu", 2)
        self.topics["payments"] = TopicInfo(uuid.UUID(int=3), "payments", 2)
        self.consumer.configure(self.consumer.config, self.topics.get, lambda: list(self.topics))

    def restart(self) -> None:
        super().restart()
        self.consumer.configure(self.consumer.config, self.topics.get, lambda: list(self.topics))

    def topic_ids(self, *names: str) -> set[uuid.UUID]:
        return {self.topics[n].topic_id for n in names}


def _regex_member(node: Node, member_id: str, regex: str = REGEX) -> Member:
    member = Member(node, member_id)
    answer = member.heartbeat(subscribed_topic_names=None, subscribed_topic_regex=regex)
    assert answer.error == 0, answer
    return member


def _beat(member: Member, rounds: int = 4) -> None:
    for _ in range(rounds):
        assert member.heartbeat().error == 0


def _regex_records(node: Node) -> list[tuple[bytes, bytes | None]]:
    records = node.store.partitions.get(0, [])
    return [(k, v) for k, v in records if struct.unpack_from(">h", k)[0] == rec.REGEX]


def test_the_regex_is_resolved_after_the_heartbeat_and_its_topics_assigned() -> None:
    node = RegexNode()
    member = _regex_member(node, "a")
    assert member.owned == {}  # answered before the regex is resolved
    epoch = node.consumer.groups["g"].group_epoch
    node.clock.advance(0)  # the resolution runs
    group = node.consumer.groups["g"]
    assert group.resolved_regexes[REGEX].topics == {"orders", "orders-eu"}
    assert group.group_epoch == epoch + 1
    _beat(member)
    assert set(member.owned) == node.topic_ids("orders", "orders-eu")
    assert len(_regex_records(node)) == 1


def test_a_new_matching_topic_is_picked_up_with_a_group_epoch_bump() -> None:
    node = RegexNode()
    member = _regex_member(node, "a")
    node.clock.advance(0)
    _beat(member)
    epoch = node.consumer.groups["g"].group_epoch
    node.topics["orders-us"] = TopicInfo(uuid.UUID(int=4), "orders-us", 1)
    node.topics["not-orders"] = TopicInfo(uuid.UUID(int=5), "not-orders", 1)
    node.clock.advance(REGEX_REFRESH_MIN_INTERVAL_MS)
    _beat(member)
    node.clock.advance(0)
    _beat(member)
    assert node.consumer.groups["g"].group_epoch == epoch + 1
    assert set(member.owned) == node.topic_ids("orders", "orders-eu", "orders-us")


def test_an_invalid_regex_is_refused_with_invalid_regular_expression() -> None:
    node = RegexNode()
    answer = Member(node, "a").heartbeat(subscribed_topic_names=None, subscribed_topic_regex="orders(")
    assert answer.error == E.INVALID_REGULAR_EXPRESSION, answer
    # RE2 has no backreferences: what Java's own regex engine accepts is refused here as by Kafka.
    answer = Member(node, "b").heartbeat(subscribed_topic_names=None, subscribed_topic_regex=r"(a)\1")
    assert answer.error == E.INVALID_REGULAR_EXPRESSION, answer


def test_the_resolved_regex_is_replayed_and_dropped_when_no_member_uses_it() -> None:
    node = RegexNode()
    a, b = _regex_member(node, "a"), Member(node, "b")
    b.heartbeat()
    node.clock.advance(0)
    for _ in range(4):
        _beat(a, 1)
        _beat(b, 1)
    group = node.consumer.groups["g"]
    expected = (group.group_epoch, dict(group.resolved_regexes), dict(group.target))
    node.restart()
    group = node.consumer.groups["g"]
    assert (group.group_epoch, dict(group.resolved_regexes), dict(group.target)) == expected
    a.heartbeat(member_epoch=-1)
    assert node.consumer.groups["g"].resolved_regexes == {}
    _, value = _regex_records(node)[-1]
    assert value is None
    node.restart()
    assert node.consumer.groups["g"].resolved_regexes == {}
