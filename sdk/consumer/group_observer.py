"""What a group membership tells the rest of the consumer: commits done (the commit metrics and
the interceptors' ``on_commit``) and rebalances (the rebalance metrics), so the membership code
needs one call per event and knows nothing of metrics or interceptors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdk.consumer.interceptors import ConsumerInterceptorChain
from sdk.metrics.consumer import ConsumerMetrics

__all__ = ["GroupObserver"]


class GroupObserver:
    """Receives a membership's events; safe to share between the memberships of one consumer."""

    __slots__ = ("interceptors", "metrics")

    def __init__(self, metrics: ConsumerMetrics, interceptors: ConsumerInterceptorChain | None = None):
        self.metrics = metrics
        self.interceptors = interceptors

    def committed(self, offsets: Mapping[Any, Any], latency_ms: float) -> None:
        """An OffsetCommit succeeded (by the application or by auto-commit)."""
        self.metrics.record_commit(latency_ms)
        if self.interceptors is not None:
            self.interceptors.on_commit(offsets)

    def rebalance_started(self) -> None:
        self.metrics.rebalance_started()

    def rebalance_completed(self) -> None:
        self.metrics.rebalance_completed()

    def rebalance_failed(self) -> None:
        self.metrics.rebalance_failed()
