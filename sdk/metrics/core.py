"""The metrics core: named metrics, sensors and their statistics (Java's
``org.apache.kafka.common.metrics``).

A ``Sensor`` takes measurements (``record(value)``: a batch's size, a request's latency) and its
statistics read them: windowed ones (``Rate``, ``Avg``, ``Max``, ``Min``, ``WindowedSum``,
``WindowedCount``) over the last ``MetricConfig.samples`` windows of ``time_window_ms`` each, as
Java's ``SampledStat`` does, and cumulative ones (``CumulativeSum``, ``CumulativeCount``) and the
last value (``Value``) over the sensor's life. A ``Metrics`` registry names each statistic
(``MetricName``: name, group, tags such as client-id/topic/partition) and gives the current value
of every metric, ``metrics()``, computed when read.

Recording is on the clients' hot paths, so a sensor keeps one set of samples for all its
statistics (count, sum, max and min per window): a ``record`` is one window check and a few
additions whatever statistics read it. Java keeps samples per statistic, but all of a sensor's
statistics roll their windows at the same measurements, so the values are the same.

Time comes from the registry's ``time_ms`` (milliseconds, monotonic by default), so tests drive it
with a fake clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

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
    "monotonic_ms",
]


def monotonic_ms() -> float:
    """The default clock of a registry: monotonic milliseconds."""
    return time.monotonic() * 1000.0


@dataclass(frozen=True)
class MetricConfig:
    """How windowed statistics sample: ``samples`` windows of ``time_window_ms`` (Java's
    ``metrics.num.samples`` = 2 and ``metrics.sample.window.ms`` = 30000)."""

    samples: int = 2
    time_window_ms: float = 30_000.0

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"metrics samples must be at least 1, not {self.samples}")
        if self.time_window_ms <= 0:
            raise ValueError(f"metrics time_window_ms must be positive, not {self.time_window_ms}")


@dataclass(frozen=True)
class MetricName:
    """A metric's identity: ``name``, ``group`` and ``tags`` (sorted ``(key, value)`` pairs).
    ``description`` says what it measures and takes no part in equality, as in Java."""

    name: str
    group: str
    tags: tuple[tuple[str, str], ...] = ()
    description: str = field(default="", compare=False)

    @classmethod
    def of(
        cls, name: str, group: str, description: str = "", tags: Mapping[str, str] | None = None
    ) -> MetricName:
        return cls(name, group, tuple(sorted((tags or {}).items())), description)

    @property
    def tag_dict(self) -> dict[str, str]:
        return dict(self.tags)

    def __str__(self) -> str:
        tags = ",".join(f"{k}={v}" for k, v in self.tags)
        return f"{self.group}:{self.name}{{{tags}}}"


class _Sample:
    """One window of a sensor's measurements."""

    __slots__ = ("count", "max", "min", "start", "total")

    def __init__(self, start: float):
        self.reset(start)

    def reset(self, start: float) -> None:
        self.start = start
        self.count = 0
        self.total = 0.0
        self.max = -math.inf
        self.min = math.inf


class Stat:
    """A statistic over a sensor's measurements; ``measure`` is called when the metric is read."""

    def measure(self, sensor: Sensor, now: float) -> float:
        raise NotImplementedError


class WindowedSum(Stat):
    """Sum of the values in the retained windows."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return sum(s.total for s in sensor._live_samples(now))


class WindowedCount(Stat):
    """Number of measurements in the retained windows."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return float(sum(s.count for s in sensor._live_samples(now)))


class Avg(Stat):
    """Mean of the values in the retained windows; NaN without any."""

    def measure(self, sensor: Sensor, now: float) -> float:
        samples = sensor._live_samples(now)
        count = sum(s.count for s in samples)
        return sum(s.total for s in samples) / count if count else math.nan

    def __repr__(self) -> str:
        return "Avg()"


class Max(Stat):
    """Largest value in the retained windows; NaN without any."""

    def measure(self, sensor: Sensor, now: float) -> float:
        samples = [s for s in sensor._live_samples(now) if s.count]
        return max(s.max for s in samples) if samples else math.nan


class Min(Stat):
    """Smallest value in the retained windows; NaN without any."""

    def measure(self, sensor: Sensor, now: float) -> float:
        samples = [s for s in sensor._live_samples(now) if s.count]
        return min(s.min for s in samples) if samples else math.nan


class Rate(Stat):
    """Per second: the windowed sum (or, with ``count=True``, the number of measurements) divided
    by the time the retained windows span. As Java's ``Rate.windowSize``: while fewer than
    ``samples - 1`` full windows have passed, the missing ones count as empty windows, so a first
    burst does not read as a huge rate."""

    def __init__(self, count: bool = False):
        self.count = count

    def measure(self, sensor: Sensor, now: float) -> float:
        samples = sensor._live_samples(now)
        amount = sum(s.count for s in samples) if self.count else sum(s.total for s in samples)
        config = sensor.config
        elapsed = now - min(s.start for s in samples)
        full_windows = int(elapsed // config.time_window_ms)
        if full_windows < config.samples - 1:
            elapsed += (config.samples - 1 - full_windows) * config.time_window_ms
        return amount / (max(elapsed, 1.0) / 1000.0)


class CumulativeSum(Stat):
    """Sum of every value recorded."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return sensor.total


class CumulativeCount(Stat):
    """Number of measurements ever recorded."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return float(sensor.count)


class Value(Stat):
    """The last value recorded (NaN before the first)."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return sensor.last


class Sensor:
    """Takes measurements for the statistics added to it (``add``, ``add_meter``)."""

    __slots__ = ("_current", "_samples", "_window", "config", "count", "last", "metrics", "name", "total")

    def __init__(self, metrics: Metrics, name: str, config: MetricConfig):
        self.metrics = metrics
        self.name = name
        self.config = config
        self._window = config.time_window_ms
        self._samples: list[_Sample] = []
        self._current: _Sample | None = None
        #: Cumulative figures over the sensor's life.
        self.count = 0
        self.total = 0.0
        self.last = math.nan

    def record(self, value: float = 1.0, now: float | None = None) -> None:
        """Take one measurement at ``now`` (the registry's clock when None)."""
        if now is None:
            now = self.metrics.time_ms()
        sample = self._current
        if sample is None or now - sample.start >= self._window:
            sample = self._advance(now)
        sample.count += 1
        sample.total += value
        if value > sample.max:
            sample.max = value
        if value < sample.min:
            sample.min = value
        self.count += 1
        self.total += value
        self.last = value

    def _advance(self, now: float) -> _Sample:
        """Start a new window at ``now``, reusing the oldest once ``samples`` are kept."""
        samples = self._samples
        if len(samples) < self.config.samples:
            sample = _Sample(now)
            samples.append(sample)
        else:
            index = (samples.index(self._current) + 1) % len(samples) if self._current is not None else 0
            sample = samples[index]
            sample.reset(now)
        self._current = sample
        return sample

    def _live_samples(self, now: float) -> list[_Sample]:
        """The windows still relevant at ``now``: those older than ``samples`` windows are
        emptied and restarted at ``now`` (Java's ``purgeObsoleteSamples``); a sensor without any
        gets an empty one starting now."""
        if not self._samples:
            self._current = _Sample(now)
            self._samples.append(self._current)
        expire = self.config.samples * self._window
        for sample in self._samples:
            if now - sample.start >= expire:
                sample.reset(now)
        return self._samples

    def add(self, name: MetricName, stat: Stat) -> Sensor:
        """Publish ``stat`` of this sensor under ``name``."""
        self.metrics._register(name, lambda now: stat.measure(self, now))
        return self

    def add_meter(self, rate: MetricName, total: MetricName, count: bool = False) -> Sensor:
        """Java's ``Meter``: a rate per second and a cumulative total, of the values recorded (or,
        with ``count=True``, of the measurements)."""
        self.add(rate, Rate(count=count))
        return self.add(total, CumulativeCount() if count else CumulativeSum())


class Metrics:
    """A client's metrics: sensors, gauges and the values of everything, by name.

    ``tags`` are added to every metric name made with ``metric_name`` (Java's client-id tag).
    Reading (``metrics()``) may run on another thread than recording (the sync facades read from
    the caller's thread): registration is locked; a value read while a measurement is recorded
    may miss that measurement, never fail.
    """

    def __init__(
        self,
        config: MetricConfig | None = None,
        time_ms: Callable[[], float] = monotonic_ms,
        tags: Mapping[str, str] | None = None,
    ):
        self.config = config or MetricConfig()
        self.time_ms = time_ms
        self.tags = dict(tags or {})
        self._sensors: dict[str, Sensor] = {}
        self._metrics: dict[MetricName, Callable[[float], float]] = {}
        #: ``(group, name) -> description`` of metrics that appear later (per partition).
        self._declared: dict[tuple[str, str], str] = {}
        #: Called before values are read: a recorder that batches measurements flushes them.
        self._before_read: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def metric_name(
        self, name: str, group: str, description: str, tags: Mapping[str, str] | None = None
    ) -> MetricName:
        """A name carrying the registry's tags plus ``tags``."""
        return MetricName.of(name, group, description, {**self.tags, **(tags or {})})

    def sensor(self, name: str, config: MetricConfig | None = None) -> Sensor:
        """The sensor called ``name``, made on first use."""
        sensor = self._sensors.get(name)
        if sensor is None:
            with self._lock:
                sensor = self._sensors.get(name)
                if sensor is None:
                    sensor = self._sensors[name] = Sensor(self, name, config or self.config)
        return sensor

    def get_sensor(self, name: str) -> Sensor | None:
        return self._sensors.get(name)

    def add_gauge(self, name: MetricName, read: Callable[[], float]) -> None:
        """Publish a value read when the metrics are read (e.g. free buffer memory)."""
        self._register(name, lambda now: read())

    def _register(self, name: MetricName, measure: Callable[[float], float]) -> None:
        with self._lock:
            if name in self._metrics:
                raise ValueError(f"metric {name} is already registered")
            self._metrics[name] = measure

    def remove_metric(self, name: MetricName) -> None:
        with self._lock:
            self._metrics.pop(name, None)

    def remove_sensor(self, name: str) -> None:
        """Drop a sensor; its metrics must be removed by name (``remove_metric``)."""
        with self._lock:
            self._sensors.pop(name, None)

    def declare(self, name: str, group: str, description: str) -> None:
        """Announce a metric registered later, per partition for instance, so exporters that
        must know every name up front (OpenTelemetry's observable instruments) know it."""
        self._declared[(group, name)] = description

    def kinds(self) -> dict[tuple[str, str], str]:
        """``(group, name) -> description`` of every metric registered or declared."""
        with self._lock:
            kinds = dict(self._declared)
            for metric in self._metrics:
                kinds.setdefault((metric.group, metric.name), metric.description)
        return kinds

    def names(self) -> list[MetricName]:
        with self._lock:
            return list(self._metrics)

    def before_read(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` before every read of the values (``metrics()``), so a hot path may
        count in a plain integer and record into its sensors only now and then."""
        self._before_read.append(flush)

    def metrics(self) -> dict[MetricName, float]:
        """Every metric's current value, computed now."""
        for flush in self._before_read:
            flush()
        now = self.time_ms()
        with self._lock:
            measures = list(self._metrics.items())
        return {name: float(measure(now)) for name, measure in measures}

    def value(self, name: str, group: str | None = None, **tags: str) -> float:
        """The value of the one metric called ``name`` (in ``group``, with ``tags``, where given;
        tag keys with ``_`` match Kafka's ``-``). ``KeyError`` if none or several match."""
        return find_metric(self.metrics(), name, group, **tags)

    def __iter__(self) -> Iterator[MetricName]:
        return iter(self.names())


def find_metric(
    values: Mapping[MetricName, float], name: str, group: str | None = None, **tags: str
) -> float:
    """The value of the one metric of ``values`` (a ``metrics()`` answer) called ``name``, in
    ``group`` and with ``tags`` where given (``client_id=`` matches the ``client-id`` tag).
    ``KeyError`` when none or several match."""
    wanted = {key.replace("_", "-"): str(value) for key, value in tags.items()}
    found = [
        (metric, value)
        for metric, value in values.items()
        if metric.name == name
        and (group is None or metric.group == group)
        and all(metric.tag_dict.get(k) == v for k, v in wanted.items())
    ]
    if len(found) > 1:
        # The least tagged of them: ``records-lag-max`` is the client's figure, the same name with
        # topic and partition tags is the partition's.
        fewest = min(len(metric.tags) for metric, _ in found)
        found = [(metric, value) for metric, value in found if len(metric.tags) == fewest]
    if len(found) != 1:
        raise KeyError(f"{len(found)} metrics match {name!r} group={group!r} tags={wanted}")
    return found[0][1]
