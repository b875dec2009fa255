"""Offset ranges of Kafka partitions: resolved on the driver, read on the executors.

The driver turns the options into one ``OffsetRange`` per Kafka partition (``resolve_ranges``);
ranges larger than ``maxRecordsPerPartition`` are cut into several Spark partitions. An executor
reads its range with an ``sdk.sync.Consumer`` in assign mode, no group, and stops at the range's
end offset (``read_arrow``: Arrow record batches, filled column by column). With read_committed
the end is at most the last stable offset, and the records of aborted transactions (and the
transaction markers) are skipped by the consumer, so a range's last offsets may yield no row.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql.datasource import InputPartition

from sdk.client.cluster import TopicPartition
from sdk.sync import Consumer
from spark_integration.client_pool import ClientPool, new_pool, settings_key
from spark_integration.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, TimestampSpec

T = TypeVar("T")


log = logging.getLogger(__name__)


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
            # A metadata round trip for every topic: a deleted topic is gone from it at once,
            # while the cache behind partitions_for_topic would still name its partitions.
            if topic in consumer.topics():
                partitions = consumer.partitions_for_topic(topic)
            else:
                time.sleep(0.2)
        found.extend(TopicPartition(topic, p) for p in sorted(partitions or ()))
    return found


def with_retries(options: ReadOptions, what: str, lookup: Callable[[], T]) -> T:
    """``lookup()``, tried again ``fetchOffset.numRetries`` times ``fetchOffset.retryIntervalMs``
    apart when it fails (Spark's offset fetches do the same)."""
    for attempt in range(options.fetch_offset_retries + 1):
        try:
            return lookup()
        except Exception:
            if attempt == options.fetch_offset_retries:
                raise
            log.warning("%s failed (attempt %d of %d), retrying", what, attempt + 1,
                        options.fetch_offset_retries + 1, exc_info=True)
            time.sleep(options.fetch_offset_retry_interval_s)
    raise AssertionError("unreachable")


def resolve(consumer: Consumer, spec: OffsetSpec | TimestampSpec, partitions: list[TopicPartition],
            options: ReadOptions) -> dict[TopicPartition, int]:
    """Absolute offsets for ``spec``; explicit offsets below the log start are data loss."""
    if not partitions:
        return {}
    beginning = with_retries(options, "looking up the earliest offsets",
                             lambda: consumer.beginning_offsets(partitions))
    end = with_retries(options, "looking up the latest offsets", lambda: consumer.end_offsets(partitions))
    if isinstance(spec, TimestampSpec):
        return _by_timestamp(consumer, spec, partitions, end, options)
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


def _by_timestamp(consumer: Consumer, spec: TimestampSpec, partitions: list[TopicPartition],
                  end: dict[TopicPartition, int], options: ReadOptions) -> dict[TopicPartition, int]:
    """The first offset at or after each partition's timestamp (ListOffsets by time); a partition
    with no such record: its latest offset (``missing="latest"``) or an error."""
    if spec.default is None:
        unnamed = [tp for tp in partitions if tp not in spec.explicit]
        if unnamed:
            raise ValueError(
                "startingOffsetsByTimestamp/endingOffsetsByTimestamp must name every partition read; "
                f"missing: {', '.join(f'{tp.topic}-{tp.partition}' for tp in unnamed)}")
    wanted = {tp: spec.explicit.get(tp, spec.default or 0) for tp in partitions}
    found = with_retries(options, "looking up offsets by timestamp",
                         lambda: consumer.offsets_for_times(wanted))
    resolved: dict[TopicPartition, int] = {}
    for tp in partitions:
        match = found.get(tp)
        if match is not None:
            resolved[tp] = match.offset
        elif spec.missing == "latest":
            resolved[tp] = end[tp]
        else:
            raise ValueError(
                f"{tp.topic}-{tp.partition} has no record at or after timestamp {wanted[tp]} (set "
                "startingOffsetsByTimestampStrategy=latest to start such partitions at their latest offset)")
    return resolved


def split_ranges(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
                 max_records: int | None, min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per partition with data, cut into pieces of at most ``max_records`` offsets, and
    further, in proportion to their sizes, until there are ``min_partitions`` of them (as Spark's
    KafkaOffsetRangeCalculator: a range gets round(size / total * minPartitions) pieces, at least
    one). No data gives no range (PySpark then reads one empty partition of its own)."""
    ranges: list[OffsetRange] = []
    for tp in sorted(ends):
        start, end = starts.get(tp, 0), ends[tp]
        step = max_records or max(end - start, 1)
        for piece_start in range(start, end, step):
            ranges.append(OffsetRange(tp.topic, tp.partition, piece_start, min(piece_start + step, end)))
    if min_partitions is not None and len(ranges) < min_partitions:
        total = sum(r.end - r.start for r in ranges)
        cut: list[OffsetRange] = []
        for r in ranges:
            size = r.end - r.start
            pieces = min(size, max(round(size / total * min_partitions), 1))
            bounds = [r.start + size * i // pieces for i in range(pieces + 1)]
            cut.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds))
        ranges = cut
    return ranges


#: Rows per Arrow record batch handed to Spark.
ARROW_BATCH_ROWS = 8192


def arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema of the source's columns (``spark_integration.source.SCHEMA``), as PySpark
    converts it: binary, utf8, int32, int64, and microsecond UTC timestamps."""
    import pyarrow as pa

    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)


def read_arrow(options: ReadOptions, offsets: OffsetRange) -> Iterator[Any]:
    """The rows of ``offsets`` as ``pyarrow.RecordBatch``es of about ``ARROW_BATCH_ROWS`` rows
    (the consumer's chunks are not cut): columns are filled a chunk of records at a time, without
    PySpark's per-row conversion; topic and partition, the same in every row, are repeated by
    Arrow."""
    import pyarrow as pa

    schema = arrow_schema(options.include_headers)
    chunks: list[list[Any]] = []
    rows = 0
    for chunk in _record_chunks(options, offsets):
        chunks.append(chunk)
        rows += len(chunk)
        if rows >= ARROW_BATCH_ROWS:
            yield _arrow_batch(chunks, schema, offsets, pa)
            chunks, rows = [], 0
    if chunks:
        yield _arrow_batch(chunks, schema, offsets, pa)


def _arrow_batch(chunks: list[list[Any]], schema: Any, offsets: OffsetRange, pa: Any) -> Any:
    records = chunks[0] if len(chunks) == 1 else [r for chunk in chunks for r in chunk]
    types = schema.types
    arrays = [
        pa.array([r.key for r in records], type=types[0]),
        pa.array([r.value for r in records], type=types[1]),
        pa.repeat(pa.scalar(offsets.topic, type=types[2]), len(records)),
        pa.repeat(pa.scalar(offsets.partition, type=types[3]), len(records)),
        pa.array([r.offset for r in records], type=types[4]),
        pa.array([r.timestamp * 1000 for r in records], type=types[5]),
        pa.array([r.timestamp_type for r in records], type=types[6]),
    ]
    if len(types) > 7:
        arrays.append(pa.array(
            [[{"key": name, "value": value} for name, value in (r.headers or ())] for r in records],
            type=types[7]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(options: ReadOptions, offsets: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """The rows of ``offsets``, in offset order, read through the SDK on this executor."""
    for chunk in _record_chunks(options, offsets):
        for record in chunk:
            yield _row(record, options.include_headers)


def _consumer_key(options: ReadOptions, tp: TopicPartition) -> tuple[Any, ...]:
    return (settings_key(options.consumer_settings), options.isolation_level, options.fail_on_data_loss, tp)


def _new_consumer(options: ReadOptions, tp: TopicPartition) -> Consumer:
    consumer = Consumer(**options.consumer_settings, isolation_level=options.isolation_level,
                        enable_auto_commit=False,
                        auto_offset_reset="none" if options.fail_on_data_loss else "earliest")
    consumer.start()
    consumer.assign([tp])
    return consumer


#: This worker's idle range consumers, by settings and partition: the next range of a partition
#: (the next micro-batch) goes on with the records its consumer already fetched.
_consumers: ClientPool[Consumer] = new_pool("range consumers", lambda consumer: consumer.close())


def _record_chunks(options: ReadOptions, offsets: OffsetRange) -> Iterator[list[Any]]:
    """The consumer records of ``offsets``, in offset order, in the chunks the consumer returns,
    read through the SDK with a consumer of this worker's pool (taken for the task, given back
    when the range is read or the reader stops early, closed if reading failed). At most the
    range's size is taken from the consumer, so it stands at the range's end, where the next
    range of the partition starts. The consumer's position is asked only after an empty poll
    (aborted records and markers move it without records)."""
    if offsets.start >= offsets.end:
        return
    tp = TopicPartition(offsets.topic, offsets.partition)
    key = _consumer_key(options, tp)
    pooled = _consumers.borrow(key)
    consumer = pooled or _new_consumer(options, tp)
    try:
        if pooled is None or consumer.position(tp) != offsets.start:
            consumer.seek(tp, offsets.start)
        position = offsets.start
        last_progress = time.monotonic()
        while position < offsets.end:
            records = consumer.getmany(tp, timeout_ms=500, max_records=offsets.end - position).get(tp)
            if records:
                if records[-1].offset >= offsets.end:  # the next range seeks back to its start
                    yield [r for r in records if r.offset < offsets.end]
                    break
                yield records
                position = records[-1].offset + 1
                last_progress = time.monotonic()
                continue
            position = consumer.position(tp)
            if position < offsets.end and time.monotonic() - last_progress > options.poll_timeout_s:
                raise TimeoutError(
                    f"{tp.topic}-{tp.partition}: no records for {options.poll_timeout_s:.0f} s at offset "
                    f"{position}, the range ends at {offsets.end}")
    except GeneratorExit:  # the task stopped reading early: the consumer is sound
        _consumers.give_back(key, consumer)
        raise
    except BaseException:
        _consumers.discard(consumer)
        raise
    _consumers.give_back(key, consumer)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _row(record: Any, include_headers: bool) -> tuple[Any, ...]:
    timestamp = _EPOCH + datetime.timedelta(milliseconds=record.timestamp)
    row = (record.key, record.value, record.topic, record.partition, record.offset, timestamp,
           record.timestamp_type)
    if not include_headers:
        return row
    return (*row, [(name, value) for name, value in (record.headers or ())])


