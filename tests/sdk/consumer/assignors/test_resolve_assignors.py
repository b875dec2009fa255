"""resolve_assignors: confluent-kafka's names, objects, classes and custom assignors."""

from __future__ import annotations

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    resolve_assignors,
)
from sdk.errors import ConfigError


class EverythingToFirst(ConsumerPartitionAssignor):
    """A custom assignor: every partition to the member with the lowest id."""

    name = "everything-to-first"

    def __init__(self) -> None:
        self.generations: list[int] = []

    def assign(self, partitions_per_topic, subscriptions, member_instance_ids=None):
        first = min(subscriptions)
        result = {m: Assignment([]) for m in subscriptions}
        everything = [TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)]
        result[first] = Assignment(everything)
        return result

    def on_assignment(self, assignment, generation_id):
        self.generations.append(generation_id)


def names(assignors):
    return [a.name for a in assignors]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("range", ["range"]),
        ("roundrobin", ["roundrobin"]),
        ("sticky", ["sticky"]),
        ("cooperative-sticky", ["cooperative-sticky"]),
        ("range,roundrobin", ["range", "roundrobin"]),
        (" cooperative-sticky , range ", ["cooperative-sticky", "range"]),
        (["sticky", "range"], ["sticky", "range"]),
        (("roundrobin",), ["roundrobin"]),
    ],
)
def test_confluent_kafka_names(strategy, expected):
    assert names(resolve_assignors(strategy)) == expected


def test_classes_and_objects_and_mixtures():
    sticky = StickyAssignor()
    resolved = resolve_assignors([RangeAssignor, sticky, "roundrobin"])
    assert isinstance(resolved[0], RangeAssignor) and resolved[1] is sticky
    assert isinstance(resolved[2], RoundRobinAssignor)
    assert isinstance(resolve_assignors(CooperativeStickyAssignor)[0], CooperativeStickyAssignor)
    assert resolve_assignors(sticky) == [sticky]


def test_each_resolution_makes_fresh_assignors():
    # Sticky assignors keep per-consumer state, so two consumers must not share one.
    assert resolve_assignors("sticky")[0] is not resolve_assignors("sticky")[0]


def test_custom_assignor():
    custom = EverythingToFirst()
    [resolved] = resolve_assignors([custom])
    assert resolved.supported_protocols == (RebalanceProtocol.EAGER,)
    assert resolved.subscription_user_data({"t"}) is None
    result = resolved.assign({"t": 2}, {"b": Subscription(["t"]), "a": Subscription(["t"])})
    assert result["a"].partitions == [TopicPartition("t", 0), TopicPartition("t", 1)]
    resolved.on_assignment(result["a"], 3)
    assert custom.generations == [3]
    assert names(resolve_assignors([EverythingToFirst, "range"])) == ["everything-to-first", "range"]


@pytest.mark.parametrize(
    "strategy",
    ["", "nope", "range,nope", [], ["range", 5], 5, object(), dict, "range,range", [RangeAssignor, "range"]],
)
def test_bad_strategies_raise_config_error_naming_the_setting(strategy):
    with pytest.raises(ConfigError) as info:
        resolve_assignors(strategy)
    assert info.value.option == "partition_assignment_strategy"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match="'cooperative-sticky'"):
        resolve_assignors("Range")


def test_an_assignor_without_a_name_is_refused():
    class Nameless(ConsumerPartitionAssignor):
        def assign(self, partitions_per_topic, subscriptions, member_instance_ids=None):
            return {}

    with pytest.raises(ConfigError, match="name"):
        resolve_assignors(Nameless)


def test_a_class_needing_arguments_is_refused():
    class NeedsArgs(RangeAssignor):
        def __init__(self, factor: int) -> None:
            self.factor = factor

    with pytest.raises(ConfigError, match="without arguments"):
        resolve_assignors(NeedsArgs)
    assert resolve_assignors(NeedsArgs(2))[0].factor == 2
