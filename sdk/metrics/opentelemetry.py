"""Feed a client's ``metrics()`` to OpenTelemetry (needs the ``otel`` extra:
``pip install topicwright[otel]``)::

    from opentelemetry import metrics
    from sdk.metrics.opentelemetry import instrument_metrics

    instrument_metrics(consumer)                     # the global MeterProvider's meter
    instrument_metrics(producer, meter=my_meter)

One observable instrument per metric name, called ``<group>.<name>``
(``producer-metrics.record-send-rate``, as OpenTelemetry's Java Kafka metrics bridge names them):
``-total`` metrics are observable counters, the rest observable gauges; tags are attributes
(``client-id``, ``topic``, ``partition``). Each collection reads ``metrics()`` once for all
instruments of the client. Names a client only registers later (per-partition lag) are known in
advance (``Metrics.declare``), so their instruments exist from the start.

Record-header tracing is in ``sdk.metrics.tracing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from sdk.metrics.core import MetricName

__all__ = ["instrument_metrics"]

_METER_NAME = "sdk.metrics"


class _Snapshot:
    """One ``metrics()`` read shared by a client's instruments in one collection: the SDK passes
    the same ``CallbackOptions`` to every callback of a collection, so a new one means a new read."""

    def __init__(self, read: Callable[[], Mapping[MetricName, float]]):
        self._read = read
        self._options: CallbackOptions | None = None
        self._values: dict[tuple[str, str], list[tuple[MetricName, float]]] = {}

    def values(self, options: CallbackOptions, key: tuple[str, str]) -> list[tuple[MetricName, float]]:
        if options is not self._options:
            grouped: dict[tuple[str, str], list[tuple[MetricName, float]]] = {}
            for metric, value in self._read().items():
                grouped.setdefault((metric.group, metric.name), []).append((metric, value))
            self._values = grouped
            self._options = options
        return self._values.get(key, [])


def instrument_metrics(client: Any, meter: Meter | None = None) -> list[Any]:
    """Create observable instruments reading ``client.metrics()`` (a producer, consumer, admin
    client or one of their ``sdk.sync`` facades). Returns the instruments."""
    registry = _registry_of(client)
    meter = meter or otel_metrics.get_meter(_METER_NAME)
    kinds = registry.kinds()
    snapshot = _Snapshot(client.metrics)
    instruments: list[Any] = []
    for (group, name), description in sorted(kinds.items()):
        callback = _callback(snapshot, (group, name))
        instrument_name = f"{group}.{name}"
        if name.endswith("-total"):
            instruments.append(
                meter.create_observable_counter(instrument_name, [callback], description=description)
            )
        else:
            instruments.append(
                meter.create_observable_gauge(instrument_name, [callback], description=description)
            )
    return instruments


def _callback(
    snapshot: _Snapshot, key: tuple[str, str]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, dict(metric.tags)) for metric, value in snapshot.values(options, key)]

    return observe


def _registry_of(client: Any) -> Any:
    """The ``sdk.metrics.Metrics`` behind a client's ``metrics()``."""
    registry = getattr(client, "metrics_registry", None)
    if registry is None or not hasattr(registry, "kinds"):
        raise TypeError(f"{client!r} is not an sdk client with metrics()")
    return registry
