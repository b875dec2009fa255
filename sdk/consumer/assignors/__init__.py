"""Partition assignors and the consumer protocol's subscription/assignment encoding (sans-IO).

The group coordinator offers every configured assignor in JoinGroup (their names are the
protocol names, the same as Java's and librdkafka's), and the member the broker elects leader
runs the one the group agreed on. ``resolve_assignors`` turns the consumer's
``partition_assignment_strategy`` setting into assignor objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sdk.consumer.assignors.base import ConsumerPartitionAssignor
from sdk.consumer.assignors.protocol import (
    Assignment,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from sdk.consumer.assignors.range import RangeAssignor
from sdk.consumer.assignors.roundrobin import RoundRobinAssignor
from sdk.consumer.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from sdk.errors import ConfigError

__all__ = [
    "ASSIGNORS_BY_NAME",
    "Assignment",
    "ConsumerPartitionAssignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RangePartitionAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "RoundRobinPartitionAssignor",
    "StickyAssignor",
    "StickyPartitionAssignor",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "resolve_assignors",
]

#: aiokafka's (and kafka-python's) class names for the same assignors, accepted in
#: ``partition_assignment_strategy`` like any assignor class.
RangePartitionAssignor = RangeAssignor
RoundRobinPartitionAssignor = RoundRobinAssignor
StickyPartitionAssignor = StickyAssignor

ASSIGNORS_BY_NAME: dict[str, type[ConsumerPartitionAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}

_OPTION = "partition_assignment_strategy"


def _one(item: Any) -> list[ConsumerPartitionAssignor]:
    if isinstance(item, str):
        names = [name.strip() for name in item.split(",") if name.strip()]
        if not names:
            raise ConfigError(_OPTION, f"no assignor named in {item!r}")
        unknown = [name for name in names if name not in ASSIGNORS_BY_NAME]
        if unknown:
            known = ", ".join(repr(n) for n in ASSIGNORS_BY_NAME)
            raise ConfigError(_OPTION, f"unknown assignor {unknown[0]!r} (known: {known})")
        return [ASSIGNORS_BY_NAME[name]() for name in names]
    if isinstance(item, type) and issubclass(item, ConsumerPartitionAssignor):
        try:
            instance = item()
        except TypeError as exc:
            raise ConfigError(_OPTION, f"cannot create {item.__name__} without arguments: {exc}") from exc
        return [instance]
    if isinstance(item, ConsumerPartitionAssignor):
        return [item]
    raise ConfigError(
        _OPTION,
        f"expected an assignor name, a ConsumerPartitionAssignor subclass or instance, not {item!r}",
    )


def resolve_assignors(
    strategy: str | ConsumerPartitionAssignor | type[ConsumerPartitionAssignor] | Sequence[Any],
) -> list[ConsumerPartitionAssignor]:
    """Assignor objects for a ``partition_assignment_strategy`` setting, in preference order.

    Takes confluent-kafka's names ("range", "roundrobin", "sticky", "cooperative-sticky"), alone,
    comma-separated or in a list, and assignor instances or classes (a custom assignor subclasses
    ``ConsumerPartitionAssignor``). Raises ``ConfigError`` naming the setting otherwise.
    """
    items = [strategy] if isinstance(strategy, (str, type, ConsumerPartitionAssignor)) else strategy
    try:
        items = list(items)
    except TypeError:
        raise ConfigError(_OPTION, f"expected assignor names or assignors, not {strategy!r}") from None
    assignors = [assignor for item in items for assignor in _one(item)]
    if not assignors:
        raise ConfigError(_OPTION, "at least one assignor is needed")
    seen: set[str] = set()
    for assignor in assignors:
        name = getattr(assignor, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(_OPTION, f"{assignor!r} has no protocol name (set its `name`)")
        if name in seen:
            raise ConfigError(_OPTION, f"assignor {name!r} is given twice")
        seen.add(name)
    return assignors
