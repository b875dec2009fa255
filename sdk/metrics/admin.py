"""The admin client's metrics (Java's ``admin-client-metrics`` group, tagged ``client-id``):
requests sent, their latency, and requests that got no answer."""

from __future__ import annotations

from collections.abc import Callable

from sdk.metrics.core import Avg, Max, MetricConfig, Metrics

__all__ = ["GROUP", "AdminMetrics"]

GROUP = "admin-client-metrics"


class AdminMetrics:
    """One measurement per request: its latency when answered, an error when not."""

    def __init__(self, client_id: str, time_ms: Callable[[], float], config: MetricConfig | None = None):
        self.registry = metrics = Metrics(config, time_ms, {"client-id": client_id})
        self.requests = metrics.sensor("request-latency")
        self.requests.add_meter(
            metrics.metric_name("request-rate", GROUP, "The number of requests sent per second."),
            metrics.metric_name("request-total", GROUP, "The total number of requests sent."),
            count=True,
        )
        self.requests.add(
            metrics.metric_name("request-latency-avg", GROUP, "The average request latency in ms."), Avg()
        ).add(metrics.metric_name("request-latency-max", GROUP, "The maximum request latency in ms."), Max())
        self.errors = metrics.sensor("request-errors")
        self.errors.add_meter(
            metrics.metric_name(
                "request-error-rate", GROUP, "The number of requests per second that got no answer."
            ),
            metrics.metric_name(
                "request-error-total", GROUP, "The total number of requests that got no answer."
            ),
            count=True,
        )
