"""The consumer's metrics, in Java's groups and names (tagged ``client-id``):

- ``consumer-fetch-manager-metrics`` (FetchMetricsManager): fetch rate and latency, bytes and
  records consumed, ``records-lag-max``/``records-lead-min`` over the partitions and, per partition
  (tags ``topic`` and ``partition``), ``records-lag``/``records-lead`` and their avg/max/min.
- ``consumer-coordinator-metrics`` (ConsumerCoordinator's and AbstractCoordinator's): commits,
  rebalances, assigned partitions.
- ``consumer-metrics`` (KafkaConsumerMetrics): time since and between polls.

Measurements are taken per Fetch response, per partition handed to the application per poll,
per commit and per rebalance, as Java does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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
    Value,
    monotonic_ms,
)

__all__ = ["CONSUMER_GROUP", "COORDINATOR_GROUP", "FETCH_GROUP", "ConsumerMetrics"]

FETCH_GROUP = "consumer-fetch-manager-metrics"
COORDINATOR_GROUP = "consumer-coordinator-metrics"
CONSUMER_GROUP = "consumer-metrics"


#: The per-partition metrics (tags ``topic`` and ``partition``), lag's then lead's.
_PARTITION_METRICS = (
    ("records-lag", "The latest lag of the partition"),
    ("records-lag-avg", "The average lag of the partition"),
    ("records-lag-max", "The max lag of the partition"),
    ("records-lead", "The latest lead of the partition"),
    ("records-lead-avg", "The average lead of the partition"),
    ("records-lead-min", "The min lead of the partition"),
)


class _PerHour(Rate):
    """A rate per hour (Java's ``Rate(TimeUnit.HOURS, ...)``)."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return super().measure(sensor, now) * 3600.0


class _PartitionSensors:
    __slots__ = ("lag", "lead", "names")

    def __init__(self, lag: Sensor, lead: Sensor, names: list[MetricName]):
        self.lag = lag
        self.lead = lead
        self.names = names


class ConsumerMetrics:
    """The consumer's sensors. The fetcher makes it; the group coordinator and the consumer record
    into the same registry."""

    def __init__(
        self,
        client_id: str,
        time_ms: Callable[[], float] = monotonic_ms,
        config: MetricConfig | None = None,
    ):
        self.registry = metrics = Metrics(config, time_ms, {"client-id": client_id})
        self._partitions: dict[Any, _PartitionSensors] = {}

        def fetch_name(name: str, description: str) -> MetricName:
            return metrics.metric_name(name, FETCH_GROUP, description)

        def coordinator_name(name: str, description: str) -> MetricName:
            return metrics.metric_name(name, COORDINATOR_GROUP, description)

        self.fetch_latency = metrics.sensor("fetch-latency")
        self.fetch_latency.add(
            fetch_name("fetch-latency-avg", "The average time taken for a fetch request."), Avg()
        )
        self.fetch_latency.add(
            fetch_name("fetch-latency-max", "The max time taken for any fetch request."), Max()
        )
        self.fetch_latency.add_meter(
            fetch_name("fetch-rate", "The number of fetch requests per second."),
            fetch_name("fetch-total", "The total number of fetch requests."),
            count=True,
        )
        self.bytes_fetched = metrics.sensor("bytes-fetched")
        self.bytes_fetched.add(
            fetch_name("fetch-size-avg", "The average number of bytes fetched per request."), Avg()
        )
        self.bytes_fetched.add(
            fetch_name("fetch-size-max", "The maximum number of bytes fetched per request."), Max()
        )
        self.bytes_fetched.add_meter(
            fetch_name("bytes-consumed-rate", "The average number of bytes consumed per second."),
            fetch_name("bytes-consumed-total", "The total number of bytes consumed."),
        )
        self.records_consumed = metrics.sensor("records-consumed")
        self.records_consumed.add_meter(
            fetch_name("records-consumed-rate", "The average number of records consumed per second."),
            fetch_name("records-consumed-total", "The total number of records consumed."),
        )
        self.records_lag = metrics.sensor("records-lag")
        self.records_lag.add(
            fetch_name("records-lag-max", "The maximum lag in terms of number of records for any partition."),
            Max(),
        )
        for name, description in _PARTITION_METRICS:
            metrics.declare(name, FETCH_GROUP, description)
        self.records_lead = metrics.sensor("records-lead")
        self.records_lead.add(
            fetch_name(
                "records-lead-min", "The minimum lead in terms of number of records for any partition."
            ),
            Min(),
        )

        self.commits = metrics.sensor("commit-latency")
        self.commits.add(
            coordinator_name("commit-latency-avg", "The average time taken for a commit request."), Avg()
        )
        self.commits.add(
            coordinator_name("commit-latency-max", "The max time taken for a commit request."), Max()
        )
        self.commits.add_meter(
            coordinator_name("commit-rate", "The number of commit calls per second."),
            coordinator_name("commit-total", "The total number of commit calls."),
            count=True,
        )
        self.rebalances = metrics.sensor("rebalance-latency")
        self.rebalances.add(
            coordinator_name(
                "rebalance-latency-avg", "The average time taken for a group to complete a rebalance."
            ),
            Avg(),
        )
        self.rebalances.add(
            coordinator_name(
                "rebalance-latency-max", "The max time taken for a group to complete a rebalance."
            ),
            Max(),
        )
        self.rebalances.add(
            coordinator_name(
                "rebalance-latency-total", "The total number of milliseconds spent in rebalances."
            ),
            CumulativeSum(),
        )
        self.rebalances.add(
            coordinator_name("rebalance-total", "The total number of rebalance events."), CumulativeCount()
        )
        self.rebalances.add(
            coordinator_name("rebalance-rate-per-hour", "The number of rebalance events per hour."),
            _PerHour(count=True),
        )
        self.failed_rebalances = metrics.sensor("failed-rebalance")
        self.failed_rebalances.add(
            coordinator_name("failed-rebalance-total", "The total number of failed rebalance events."),
            CumulativeCount(),
        )
        self.failed_rebalances.add(
            coordinator_name(
                "failed-rebalance-rate-per-hour", "The number of failed rebalance events per hour."
            ),
            _PerHour(count=True),
        )
        self._rebalance_started_ms: float | None = None
        self._last_rebalance_end_ms: float | None = None
        metrics.add_gauge(
            coordinator_name(
                "last-rebalance-seconds-ago",
                "The number of seconds since the last rebalance event (-1 before the first).",
            ),
            lambda: _seconds_since(self._last_rebalance_end_ms, metrics.time_ms()),
        )

        self.poll_interval = metrics.sensor("time-between-poll")
        self.poll_interval.add(
            metrics.metric_name(
                "time-between-poll-avg",
                CONSUMER_GROUP,
                "The average delay in ms between invocations of poll().",
            ),
            Avg(),
        )
        self.poll_interval.add(
            metrics.metric_name(
                "time-between-poll-max", CONSUMER_GROUP, "The max delay in ms between invocations of poll()."
            ),
            Max(),
        )
        self._last_poll_ms: float | None = None
        metrics.add_gauge(
            metrics.metric_name(
                "last-poll-seconds-ago",
                CONSUMER_GROUP,
                "The number of seconds since the last poll() invocation (-1 before the first).",
            ),
            lambda: _seconds_since(self._last_poll_ms, metrics.time_ms()),
        )

    # -- bindings -------------------------------------------------------------------------------

    def bind_assigned_partitions(self, count: Callable[[], int]) -> None:
        """Publish ``assigned-partitions``, read from the subscription state."""
        self.registry.add_gauge(
            self.registry.metric_name(
                "assigned-partitions",
                COORDINATOR_GROUP,
                "The number of partitions currently assigned to this consumer.",
            ),
            lambda: float(count()),
        )

    # -- fetching -------------------------------------------------------------------------------

    def record_fetch(self, latency_ms: float, size: int, now: float) -> None:
        """One Fetch response: its latency and the record bytes it brought."""
        self.fetch_latency.record(latency_ms, now)
        self.bytes_fetched.record(float(size), now)

    def record_consumed(self, tp: Any, count: int, lag: int | None, lead: int | None, now: float) -> None:
        """``count`` records of ``tp`` handed to the application; ``lag`` (high watermark, or last
        stable offset under read_committed, minus the new position) and ``lead`` (the position
        minus the log start offset) where known."""
        if count:
            self.records_consumed.record(float(count), now)
        if lag is None and lead is None:
            return
        sensors = self._partitions.get(tp)
        if sensors is None:
            sensors = self._partition_sensors(tp)
        if lag is not None:
            self.records_lag.record(float(lag), now)
            sensors.lag.record(float(lag), now)
        if lead is not None:
            self.records_lead.record(float(lead), now)
            sensors.lead.record(float(lead), now)

    def _partition_sensors(self, tp: Any) -> _PartitionSensors:
        metrics = self.registry
        tags = {"topic": tp.topic, "partition": str(tp.partition)}
        lag = metrics.sensor(f"{tp.topic}-{tp.partition}.records-lag")
        lead = metrics.sensor(f"{tp.topic}-{tp.partition}.records-lead")
        names = []
        stats = (Value(), Avg(), Max(), Value(), Avg(), Min())
        for (name, description), stat in zip(_PARTITION_METRICS, stats, strict=True):
            metric = metrics.metric_name(name, FETCH_GROUP, description, tags)
            (lag if name.startswith("records-lag") else lead).add(metric, stat)
            names.append(metric)
        sensors = self._partitions[tp] = _PartitionSensors(lag, lead, names)
        return sensors

    def remove_partition(self, tp: Any) -> None:
        """Drop a partition's lag and lead metrics (it is no longer assigned), as Java does."""
        sensors = self._partitions.pop(tp, None)
        if sensors is None:
            return
        for name in sensors.names:
            self.registry.remove_metric(name)
        self.registry.remove_sensor(sensors.lag.name)
        self.registry.remove_sensor(sensors.lead.name)

    def partitions(self) -> list[Any]:
        return list(self._partitions)

    # -- the group ------------------------------------------------------------------------------

    def record_commit(self, latency_ms: float) -> None:
        self.commits.record(latency_ms)

    def rebalance_started(self) -> None:
        """A join began (the first of a rebalance's attempts sets the start)."""
        if self._rebalance_started_ms is None:
            self._rebalance_started_ms = self.registry.time_ms()

    def rebalance_completed(self) -> None:
        """The member got its assignment: the rebalance's time since it started."""
        now = self.registry.time_ms()
        started = self._rebalance_started_ms if self._rebalance_started_ms is not None else now
        self.rebalances.record(now - started, now)
        self._rebalance_started_ms = None
        self._last_rebalance_end_ms = now

    def rebalance_failed(self) -> None:
        """A join or sync failed; the rebalance goes on (its start is kept)."""
        self.failed_rebalances.record()

    def record_poll(self) -> None:
        """The application polled: time since the previous poll."""
        now = self.registry.time_ms()
        if self._last_poll_ms is not None:
            self.poll_interval.record(now - self._last_poll_ms, now)
        self._last_poll_ms = now


def _seconds_since(then: float | None, now: float) -> float:
    """Whole seconds since ``then`` (Java's ``TimeUnit.SECONDS.convert``), -1 if never."""
    if then is None:
        return -1.0
    return float(math.floor((now - then) / 1000.0))
