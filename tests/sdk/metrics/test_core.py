"""The metrics core against Java's semantics (``SampledStat``, ``Rate.windowSize``), on a fake
clock: every figure is computed from the times given, no sleeps."""

from __future__ import annotations

import math

import pytest

from sdk.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    MetricConfig,
    MetricName,
    Metrics,
    Min,
    Rate,
    Value,
    WindowedCount,
    WindowedSum,
    find_metric,
)

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def registry(samples: int = 2, window_ms: float = 1000.0) -> tuple[Metrics, FakeClock]:
    clock = FakeClock()
    return Metrics(MetricConfig(samples, window_ms), clock, {"client-id": "c1"}), clock


def add(metrics: Metrics, sensor_name: str, **stats: object) -> None:
    sensor = metrics.sensor(sensor_name)
    for metric, stat in stats.items():
        sensor.add(metrics.metric_name(metric, "g", f"{metric} of {sensor_name}"), stat)  # type: ignore[arg-type]


def test_metric_names_compare_by_name_group_and_tags_not_description() -> None:
    a = MetricName.of("x", "g", "one", {"client-id": "c", "topic": "t"})
    b = MetricName.of("x", "g", "two", {"topic": "t", "client-id": "c"})
    assert a == b and hash(a) == hash(b)
    assert a != MetricName.of("x", "g", "one", {"client-id": "d", "topic": "t"})
    assert a.tag_dict == {"client-id": "c", "topic": "t"}
    assert str(a) == "g:x{client-id=c,topic=t}"


def test_registry_tags_are_on_every_name_and_names_are_unique() -> None:
    metrics, _ = registry()
    name = metrics.metric_name("m", "g", "d", {"topic": "t"})
    assert name.tag_dict == {"client-id": "c1", "topic": "t"}
    metrics.add_gauge(name, lambda: 3.0)
    with pytest.raises(ValueError, match="already registered"):
        metrics.add_gauge(name, lambda: 4.0)
    assert metrics.metrics() == {name: 3.0}
    metrics.remove_metric(name)
    assert metrics.metrics() == {}


def test_avg_max_min_cover_the_retained_windows_only() -> None:
    metrics, clock = registry(samples=2, window_ms=1000)
    add(metrics, "s", avg=Avg(), max=Max(), min=Min(), sum=WindowedSum(), count=WindowedCount())
    assert math.isnan(metrics.value("avg")) and math.isnan(metrics.value("max"))
    sensor = metrics.sensor("s")
    sensor.record(10)
    sensor.record(30)
    clock.now += 1000  # second window
    sensor.record(20)
    assert metrics.value("avg") == 20.0
    assert metrics.value("max") == 30.0 and metrics.value("min") == 10.0
    assert metrics.value("sum") == 60.0 and metrics.value("count") == 3.0
    clock.now += 1000  # third window: the first one's sample is reused
    sensor.record(5)
    assert metrics.value("avg") == 12.5
    assert metrics.value("max") == 20.0 and metrics.value("min") == 5.0
    clock.now += 2000  # both samples now older than samples * window: purged
    assert math.isnan(metrics.value("avg")) and metrics.value("count") == 0.0


def test_cumulative_and_last_value_keep_everything() -> None:
    metrics, clock = registry()
    add(metrics, "s", total=CumulativeSum(), events=CumulativeCount(), last=Value())
    assert math.isnan(metrics.value("last"))
    sensor = metrics.sensor("s")
    for value in (1, 2, 3):
        sensor.record(value)
        clock.now += 5000
    assert metrics.value("total") == 6.0 and metrics.value("events") == 3.0 and metrics.value("last") == 3.0


def test_rate_counts_missing_windows_as_empty_as_java_does() -> None:
    # Java's Rate.windowSize: elapsed since the oldest sample, padded to samples - 1 full windows.
    metrics, clock = registry(samples=2, window_ms=1000)
    add(metrics, "s", rate=Rate(), per_second=Rate(count=True))
    sensor = metrics.sensor("s")
    assert metrics.value("rate") == 0.0
    sensor.record(100)
    clock.now += 500
    # 500 ms elapsed + one missing full window = 1.5 s.
    assert metrics.value("rate") == pytest.approx(100 / 1.5)
    assert metrics.value("per_second") == pytest.approx(1 / 1.5)
    clock.now += 1000  # 1.5 s after the first sample: one full window, no padding
    sensor.record(50)
    assert metrics.value("rate") == pytest.approx(150 / 1.5)
    clock.now += 3000  # everything obsolete: a fresh empty window
    assert metrics.value("rate") == 0.0


def test_meter_gives_rate_and_total() -> None:
    metrics, clock = registry(samples=2, window_ms=1000)
    metrics.sensor("records").add_meter(
        metrics.metric_name("record-send-rate", "g", "d"), metrics.metric_name("record-send-total", "g", "d")
    )
    metrics.sensor("requests").add_meter(
        metrics.metric_name("request-rate", "g", "d"),
        metrics.metric_name("request-total", "g", "d"),
        count=True,
    )
    for _ in range(4):
        metrics.sensor("records").record(25)
        metrics.sensor("requests").record(7.5)
    clock.now += 1000
    assert metrics.value("record-send-total") == 100.0 and metrics.value("record-send-rate") == 100.0
    assert metrics.value("request-total") == 4.0 and metrics.value("request-rate") == 4.0


def test_record_takes_an_explicit_time() -> None:
    metrics, clock = registry(samples=2, window_ms=1000)
    add(metrics, "s", avg=Avg())
    sensor = metrics.sensor("s")
    sensor.record(1, now=clock.now)
    sensor.record(3, now=clock.now + 10)
    assert metrics.value("avg") == 2.0


def test_find_metric_prefers_the_least_tagged_and_maps_underscores() -> None:
    metrics, _ = registry()
    metrics.add_gauge(metrics.metric_name("records-lag-max", "g", "d"), lambda: 9.0)
    metrics.add_gauge(
        metrics.metric_name("records-lag-max", "g", "d", {"topic": "t", "partition": "0"}), lambda: 4.0
    )
    values = metrics.metrics()
    assert find_metric(values, "records-lag-max") == 9.0
    assert find_metric(values, "records-lag-max", topic="t", partition=0) == 4.0
    assert find_metric(values, "records-lag-max", client_id="c1", partition="0") == 4.0
    with pytest.raises(KeyError):
        find_metric(values, "records-lag")


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="samples"):
        MetricConfig(samples=0)
    with pytest.raises(ValueError, match="time_window_ms"):
        MetricConfig(time_window_ms=0)
