"""The asyncio consumer (aiokafka-style API) and what it hands out.

Names are resolved lazily (PEP 562), so importing ``sdk.consumer.subscription`` or
``sdk.consumer.records`` from the group coordinator or the assignors does not import the whole
consumer, and the package has no import cycles.
"""

from __future__ import annotations

import importlib
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp

__all__ = [
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerInterceptor",
    "ConsumerPartitionAssignor",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CooperativeStickyAssignor",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RangeAssignor",
    "RangePartitionAssignor",
    "RoundRobinAssignor",
    "RoundRobinPartitionAssignor",
    "StickyAssignor",
    "StickyPartitionAssignor",
    "TopicPartition",
]

_LAZY = {
    "Consumer": "sdk.consumer.consumer",
    "ConsumerRebalanceListener": "sdk.consumer.listener",
    "ConsumerInterceptor": "sdk.consumer.interceptors",
    "ConsumerPartitionAssignor": "sdk.consumer.assignors",
    "RangeAssignor": "sdk.consumer.assignors",
    "RoundRobinAssignor": "sdk.consumer.assignors",
    "StickyAssignor": "sdk.consumer.assignors",
    "CooperativeStickyAssignor": "sdk.consumer.assignors",
    "RangePartitionAssignor": "sdk.consumer.assignors",
    "RoundRobinPartitionAssignor": "sdk.consumer.assignors",
    "StickyPartitionAssignor": "sdk.consumer.assignors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sdk.consumer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
