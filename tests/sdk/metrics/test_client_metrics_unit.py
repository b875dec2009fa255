"""The clients' metric sets on a fake clock: rebalance and poll times, per-partition metrics that
come and go with the assignment, and the interceptors' isolation."""

from __future__ import annotations

import logging
import math

import pytest

from sdk.client.cluster import TopicPartition
from sdk.consumer.group_observer import GroupObserver
from sdk.consumer.interceptors import ConsumerInterceptor, ConsumerInterceptorChain
from sdk.metrics import MetricConfig, find_metric
from sdk.metrics.consumer import ConsumerMetrics
from sdk.metrics.producer import ProducerMetrics

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 50_000.0

    def __call__(self) -> float:
        return self.now


def test_rebalance_latency_runs_from_the_first_attempt_to_the_assignment() -> None:
    clock = FakeClock()
    metrics = ConsumerMetrics("c", clock, MetricConfig(2, 30_000))
    value = metrics.registry.value
    assert value("last-rebalance-seconds-ago") == -1
    assert value("rebalance-total") == 0 and math.isnan(value("rebalance-latency-avg"))
    metrics.rebalance_started()
    clock.now += 100
    metrics.rebalance_failed()
    metrics.rebalance_started()  # the retry belongs to the same rebalance
    clock.now += 150
    metrics.rebalance_completed()
    assert value("rebalance-total") == 1 and value("failed-rebalance-total") == 1
    assert value("rebalance-latency-avg") == 250 and value("rebalance-latency-total") == 250
    clock.now += 2_500
    assert value("last-rebalance-seconds-ago") == 2
    # One rebalance over the 2.75 s since the first sample plus one empty 30 s window (Java's
    # padding while fewer than samples - 1 windows are full), per hour.
    assert value("rebalance-rate-per-hour") == pytest.approx(3600 / 32.75)


def test_poll_and_commit_figures() -> None:
    clock = FakeClock()
    metrics = ConsumerMetrics("c", clock)
    value = metrics.registry.value
    assert value("last-poll-seconds-ago") == -1
    metrics.record_poll()
    clock.now += 400
    metrics.record_poll()
    clock.now += 1_200
    assert value("last-poll-seconds-ago") == 1
    assert value("time-between-poll-avg") == 400 and value("time-between-poll-max") == 400
    metrics.record_commit(12.0)
    metrics.record_commit(30.0)
    assert (
        value("commit-total") == 2 and value("commit-latency-avg") == 21 and value("commit-latency-max") == 30
    )


def test_partition_metrics_follow_the_assignment() -> None:
    clock = FakeClock()
    metrics = ConsumerMetrics("c", clock)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    metrics.record_consumed(tp0, 5, lag=7, lead=5, now=clock.now)
    metrics.record_consumed(tp1, 2, lag=3, lead=None, now=clock.now)
    values = metrics.registry.metrics()
    assert find_metric(values, "records-lag", topic="t", partition=0) == 7
    assert find_metric(values, "records-lag", topic="t", partition=1) == 3
    assert find_metric(values, "records-lag-max") == 7 and find_metric(values, "records-lead-min") == 5
    assert find_metric(values, "records-consumed-total") == 7
    metrics.remove_partition(tp0)
    values = metrics.registry.metrics()
    with pytest.raises(KeyError):
        find_metric(values, "records-lag", topic="t", partition=0)
    assert metrics.partitions() == [tp1]
    metrics.record_consumed(tp0, 1, lag=0, lead=6, now=clock.now)  # assigned again: new sensors
    assert metrics.registry.value("records-lag", topic="t", partition="0") == 0
    kinds = metrics.registry.kinds()
    assert ("consumer-fetch-manager-metrics", "records-lead-avg") in kinds


def test_group_observer_feeds_metrics_and_interceptors(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[dict[object, object]] = []

    class Broken(ConsumerInterceptor):
        def on_commit(self, offsets: object) -> None:
            raise RuntimeError("bug")

    class Recorder(ConsumerInterceptor):
        def on_commit(self, offsets: object) -> None:
            seen.append(dict(offsets))  # type: ignore[call-overload]

    metrics = ConsumerMetrics("c", FakeClock())
    observer = GroupObserver(metrics, ConsumerInterceptorChain([Broken(), Recorder()]))
    caplog.set_level(logging.WARNING)
    observer.committed({TopicPartition("t", 0): 3}, 5.0)
    assert seen == [{TopicPartition("t", 0): 3}]
    assert metrics.registry.value("commit-total") == 1
    assert "failed in on_commit" in caplog.text


def test_interceptor_chain_refuses_objects_without_on_consume() -> None:
    with pytest.raises(TypeError, match="on_consume"):
        ConsumerInterceptorChain([object()])  # type: ignore[list-item]


def test_producer_transaction_timer_counts_failures_too() -> None:
    metrics = ProducerMetrics("p", FakeClock())
    with pytest.raises(RuntimeError), metrics.timed("txn-commit"):
        raise RuntimeError("commit failed")
    assert metrics.registry.value("txn-commit-time-ns-total") > 0
    assert metrics.registry.value("txn-abort-time-ns-total") == 0
