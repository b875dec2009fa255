"""Client metrics in the spirit of Java's ``org.apache.kafka.common.metrics``: sensors, statistics
and named metrics (``sdk.metrics.core``); each client's ``metrics()`` gives ``{MetricName: value}``
with Java's names. Optional adapters: ``sdk.metrics.prometheus`` (prometheus-client) and
``sdk.metrics.opentelemetry`` (OpenTelemetry metrics and record-header tracing)."""

from sdk.metrics.core import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MetricConfig,
    MetricName,
    Metrics,
    Min,
    Rate,
    Sensor,
    Stat,
    Value,
    WindowedCount,
    WindowedSum,
    find_metric,
)

__all__ = [
    "Avg",
    "CumulativeCount",
    "CumulativeSum",
    "Max",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "Min",
    "Rate",
    "Sensor",
    "Stat",
    "Value",
    "WindowedCount",
    "WindowedSum",
    "find_metric",
]
