"""Expose a client's ``metrics()`` to Prometheus (needs the ``prometheus`` extra:
``pip install topicwright[prometheus]``)::

    from prometheus_client import REGISTRY, start_http_server
    from sdk.metrics.prometheus import KafkaClientCollector

    REGISTRY.register(KafkaClientCollector(producer))
    start_http_server(8000)

Every scrape reads ``metrics()`` afresh. A metric ``<group>:<name>`` becomes
``<namespace>_<group>_<name>`` with ``-`` as ``_`` (``kafka_producer_metrics_record_send_rate``);
``-total`` metrics are counters (exposed as ``..._total``), the rest gauges. Tags become labels
(``client-id`` -> ``client_id``); metrics of one name with fewer tags (``records-lag-max`` of the
client next to each partition's) get the missing labels empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sdk.metrics.core import MetricName

__all__ = ["KafkaClientCollector", "prometheus_name"]

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(*parts: str) -> str:
    """Parts joined by ``_``, every character Prometheus does not allow in a name made ``_``."""
    return _INVALID.sub("_", "_".join(part for part in parts if part))


class KafkaClientCollector(Collector):
    """A prometheus_client collector for one or more clients: anything with ``metrics()``
    (producer, consumer, admin client, their ``sdk.sync`` facades), or a function returning such
    a mapping."""

    def __init__(self, *clients: Any, namespace: str = "kafka"):
        if not clients:
            raise ValueError("KafkaClientCollector needs at least one client")
        self._sources: list[Callable[[], Mapping[MetricName, float]]] = []
        for client in clients:
            source = getattr(client, "metrics", client)
            if not callable(source):
                raise TypeError(f"{client!r} has no metrics() and is not callable")
            self._sources.append(source)
        self._namespace = namespace

    def collect(self) -> Iterator[Metric]:
        by_family: dict[str, list[tuple[MetricName, float]]] = {}
        descriptions: dict[str, str] = {}
        counters: set[str] = set()
        for source in self._sources:
            for metric, value in source().items():
                counter = metric.name.endswith("-total")
                base = metric.name[: -len("-total")] if counter else metric.name
                family = prometheus_name(self._namespace, metric.group, base)
                by_family.setdefault(family, []).append((metric, value))
                descriptions.setdefault(family, metric.description)
                if counter:
                    counters.add(family)
        for family, samples in sorted(by_family.items()):
            labels = sorted({key for metric, _ in samples for key, _ in metric.tags})
            label_names = [prometheus_name(key) for key in labels]
            made: CounterMetricFamily | GaugeMetricFamily
            if family in counters:
                made = CounterMetricFamily(family, descriptions[family], labels=label_names)
            else:
                made = GaugeMetricFamily(family, descriptions[family], labels=label_names)
            for metric, value in samples:
                tags = metric.tag_dict
                made.add_metric([tags.get(key, "") for key in labels], value)
            yield made

    def describe(self) -> Iterator[Metric]:
        """Nothing up front: the families depend on what the clients measured by scrape time
        (registering then does not call ``collect``)."""
        return iter(())
