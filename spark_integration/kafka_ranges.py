"""Offset ranges of Kafka partitions: resolved on the driver, read on the executors.

The driver turns the options into one ``OffsetRange`` per Kafka partition (``resolve_ranges``);
ranges larger than ``maxRecordsPerPartition`` are cut into several Spark partitions. An executor
reads its range with an ``sdk.sync.Consumer`` in assign mode, no group, and stops at the range's
end offset (``read_range``). With read_committed the end is at most the last stable offset, and
the records of aborted transactions (and the transaction markers) are skipped by the consumer,
so a range's last offsets may yield no row.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from sdk.client.cluster import TopicPartition
from sdk.sync import Consumer
from spark_integration.options import EARLIEST, LATEST, OffsetSpec, ReadOptions

#: The columns of Spark's Kafka source (with headers, as with its includeHeaders=true).
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)


class DataLossError(RuntimeError):
    """Records a query needs are gone (deleted by retention) and failOnDataLoss is true."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one Kafka partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int


def metadata_consumer(options: ReadOptions) -> Consumer:
    """A started consumer for offset look-ups (no group, nothing fetched)."""
    consumer = Consumer(**options.consumer_settings, isolation_level=options.isolation_level,
                        enable_auto_commit=False)
    consumer.start()
    return consumer


def topic_partitions(consumer: Consumer, options: ReadOptions) -> list[TopicPartition]:
    """The partitions the options select, sorted, as the cluster knows them now."""
    if options.assigned:
        return sorted(options.assigned)
    if options.pattern is not None:
        matcher = re.compile(options.pattern)
        topics = sorted(t for t in consumer.topics() if matcher.fullmatch(t))
    else:
        topics = list(options.topics)
    found: list[TopicPartition] = []
    for topic in topics:
        partitions = None
        deadline = time.monotonic() + 10
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                consumer.topics()  # a metadata round trip fills the cache
        found.extend(TopicPartition(topic, p) for p in sorted(partitions or ()))
    return found


def resolve(consumer: Consumer, spec: OffsetSpec, partitions: list[TopicPartition],
            options: ReadOptions) -> dict[TopicPartition, int]:
    """Absolute offsets for ``spec``; explicit offsets below the log start are data loss."""
    if not partitions:
        return {}
    beginning = consumer.beginning_offsets(partitions)
    end = consumer.end_offsets(partitions)
    resolved: dict[TopicPartition, int] = {}
    for tp in partitions:
        wanted = spec.explicit.get(tp, spec.default)
        if wanted == EARLIEST:
            resolved[tp] = beginning[tp]
        elif wanted == LATEST:
            resolved[tp] = end[tp]
        else:
            if wanted < beginning[tp]:
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{tp.topic}-{tp.partition}: offset {wanted} was deleted, the log starts at "
                        f"{beginning[tp]} (set failOnDataLoss=false to skip ahead)")
                wanted = beginning[tp]
            resolved[tp] = min(wanted, end[tp])
    return resolved


def split_ranges(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
                 max_records: int | None) -> list[OffsetRange]:
    """One range per partition with data, cut into pieces of at most ``max_records`` offsets."""
    ranges: list[OffsetRange] = []
    for tp in sorted(ends):
        start, end = starts.get(tp, 0), ends[tp]
        step = max_records or max(end - start, 1)
        for piece_start in range(start, end, step):
            ranges.append(OffsetRange(tp.topic, tp.partition, piece_start, min(piece_start + step, end)))
    return ranges


def read_range(options: ReadOptions, offsets: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """The rows of ``offsets``, in offset order, read through the SDK on this executor."""
    if offsets.start >= offsets.end:
        return
    tp = TopicPartition(offsets.topic, offsets.partition)
    consumer = Consumer(**options.consumer_settings, isolation_level=options.isolation_level,
                        enable_auto_commit=False,
                        auto_offset_reset="none" if options.fail_on_data_loss else "earliest")
    consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, offsets.start)
        last_progress = time.monotonic()
        while True:
            records = consumer.getmany(tp, timeout_ms=500).get(tp, ())
            for record in records:
                if record.offset >= offsets.end:
                    return
                yield _row(record)
            position = consumer.position(tp)
            if position >= offsets.end:
                return
            if records:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > options.poll_timeout_s:
                raise TimeoutError(
                    f"{tp.topic}-{tp.partition}: no records for {options.poll_timeout_s:.0f} s at offset "
                    f"{position}, the range ends at {offsets.end}")
    finally:
        consumer.close()


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _row(record: Any) -> tuple[Any, ...]:
    timestamp = _EPOCH + datetime.timedelta(milliseconds=record.timestamp)
    headers = [(name, value) for name, value in (record.headers or ())]
    return (record.key, record.value, record.topic, record.partition, record.offset, timestamp,
            record.timestamp_type, headers)


