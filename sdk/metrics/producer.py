"""The producer's metrics: Java's ``producer-metrics`` group (SenderMetricsRegistry,
RecordAccumulator's buffer pool, KafkaProducerMetrics' transaction times), tagged ``client-id``.

Measurements are taken per Produce request and per batch, where Java takes them, never per record:
the sender records a request's batches when it puts them on the wire, its latency and throttle time
when the answer comes, and retries and failures per batch (counting the batch's records).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sdk.metrics.core import Avg, CumulativeSum, Max, MetricConfig, Metrics, Rate, Sensor

__all__ = ["GROUP", "ProducerMetrics"]

GROUP = "producer-metrics"

_TXN_OPERATIONS = {
    "txn-init": "Total time producer has spent in initTransactions in nanoseconds.",
    "txn-begin": "Total time producer has spent in beginTransaction in nanoseconds.",
    "txn-send-offsets": "Total time producer has spent in sendOffsetsToTransaction in nanoseconds.",
    "txn-commit": "Total time producer has spent in commitTransaction in nanoseconds.",
    "txn-abort": "Total time producer has spent in abortTransaction in nanoseconds.",
    "flush": "Total time producer has spent in flush in nanoseconds.",
}


class ProducerMetrics:
    """The producer's sensors; ``buffer`` gives the buffer pool's figures once the producer
    started (``bind_buffer``)."""

    def __init__(self, client_id: str, time_ms: Callable[[], float], config: MetricConfig | None = None):
        self.registry = metrics = Metrics(config, time_ms, {"client-id": client_id})

        def meter(sensor_name: str, what: str, description: str) -> Sensor:
            sensor = metrics.sensor(sensor_name)
            sensor.add_meter(
                metrics.metric_name(
                    f"{what}-rate", GROUP, f"The average per-second number of {description}."
                ),
                metrics.metric_name(f"{what}-total", GROUP, f"The total number of {description}."),
            )
            return sensor

        self.records_per_request = meter("records-per-request", "record-send", "records sent")
        self.records_per_request.add(
            metrics.metric_name(
                "records-per-request-avg", GROUP, "The average number of records per request."
            ),
            Avg(),
        )
        self.batch_size = metrics.sensor("batch-size")
        self.batch_size.add(
            metrics.metric_name(
                "batch-size-avg", GROUP, "The average number of bytes sent per partition per-request."
            ),
            Avg(),
        ).add(
            metrics.metric_name(
                "batch-size-max", GROUP, "The max number of bytes sent per partition per-request."
            ),
            Max(),
        )
        self.compression_rate = metrics.sensor("compression-rate")
        self.compression_rate.add(
            metrics.metric_name(
                "compression-rate-avg",
                GROUP,
                "The average compression rate of record batches, defined as the average ratio of the "
                "compressed batch size over the uncompressed size.",
            ),
            Avg(),
        )
        self.queue_time = metrics.sensor("queue-time")
        self.queue_time.add(
            metrics.metric_name(
                "record-queue-time-avg",
                GROUP,
                "The average time in ms record batches spent in the send buffer.",
            ),
            Avg(),
        ).add(
            metrics.metric_name(
                "record-queue-time-max",
                GROUP,
                "The maximum time in ms record batches spent in the send buffer.",
            ),
            Max(),
        )
        self.request_latency = metrics.sensor("request-time")
        self.request_latency.add(
            metrics.metric_name("request-latency-avg", GROUP, "The average request latency in ms."), Avg()
        ).add(metrics.metric_name("request-latency-max", GROUP, "The maximum request latency in ms."), Max())
        self.throttle_time = metrics.sensor("produce-throttle-time")
        self.throttle_time.add(
            metrics.metric_name(
                "produce-throttle-time-avg",
                GROUP,
                "The average time in ms a request was throttled by a broker.",
            ),
            Avg(),
        ).add(
            metrics.metric_name(
                "produce-throttle-time-max",
                GROUP,
                "The maximum time in ms a request was throttled by a broker.",
            ),
            Max(),
        )
        self.retries = meter("record-retries", "record-retry", "retried record sends")
        self.errors = meter("errors", "record-error", "record sends that resulted in errors")
        self.splits = meter("batch-split-rate", "batch-split", "batch splits")
        self.buffer_wait = metrics.sensor("bufferpool-wait-time")
        self.buffer_wait.add(
            metrics.metric_name(
                "bufferpool-wait-ratio", GROUP, "The fraction of time an appender waits for space allocation."
            ),
            _NanosRatio(),
        )
        self.buffer_wait.add(
            metrics.metric_name(
                "bufferpool-wait-time-ns-total",
                GROUP,
                "The total time in nanoseconds an appender waits for space allocation.",
            ),
            CumulativeSum(),
        )
        self._txn_sensors: dict[str, Sensor] = {}
        for operation, description in _TXN_OPERATIONS.items():
            sensor = metrics.sensor(f"{operation}-time-ns-total")
            sensor.add(metrics.metric_name(f"{operation}-time-ns-total", GROUP, description), CumulativeSum())
            self._txn_sensors[operation] = sensor

    def bind(
        self,
        buffer_total: Callable[[], float],
        buffer_available: Callable[[], float],
        waiting: Callable[[], float],
        in_flight: Callable[[], float],
    ) -> None:
        """Publish the started producer's gauges (buffer pool, requests in flight)."""
        registry = self.registry
        registry.add_gauge(
            registry.metric_name(
                "buffer-total-bytes",
                GROUP,
                "The maximum amount of buffer memory the client can use (whether or not it is used).",
            ),
            buffer_total,
        )
        registry.add_gauge(
            registry.metric_name(
                "buffer-available-bytes", GROUP, "The total amount of buffer memory that is not being used."
            ),
            buffer_available,
        )
        registry.add_gauge(
            registry.metric_name(
                "waiting-threads",
                GROUP,
                "The number of appenders waiting for buffer memory to enqueue their records.",
            ),
            waiting,
        )
        registry.add_gauge(
            registry.metric_name(
                "requests-in-flight",
                GROUP,
                "The current number of in-flight requests awaiting a response.",
            ),
            in_flight,
        )

    @contextmanager
    def timed(self, operation: str) -> Iterator[None]:
        """Add the time the block takes (also when it raises) to ``<operation>-time-ns-total``."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self._txn_sensors[operation].record(float(time.perf_counter_ns() - start))


class _NanosRatio(Rate):
    """A rate of nanoseconds per second, as a fraction of time (Java's ``Rate(TimeUnit.NANOSECONDS)``)."""

    def measure(self, sensor: Sensor, now: float) -> float:
        return super().measure(sensor, now) / 1e9
