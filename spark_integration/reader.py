"""Batch and streaming readers of Kafka topics (Spark's Kafka source options and columns).

Both plan on the driver (offsets resolved with a short-lived metadata consumer) and read on the
executors (``kafka_ranges.read_arrow``). Streaming offsets are JSON-able dicts
``{topic: {"partition": next_offset}}``, the shape Spark checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

try:  # PySpark >= 4.2: read limits and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark: batch reads work, streaming needs 4.2

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's read limit base class."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: no limit."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: at most ``max_rows`` offsets."""

        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in mixin for PySpark 4.2's Trigger.AvailableNow support."""

from sdk.client.cluster import TopicPartition
from spark_integration.kafka_ranges import (
    DataLossError,
    OffsetRange,
    metadata_consumer,
    read_arrow,
    resolve,
    split_ranges,
    topic_partitions,
)
from spark_integration.options import EARLIEST, LATEST, OffsetSpec, ReadOptions

Offsets = dict[str, dict[str, int]]


def to_json(offsets: Mapping[TopicPartition, int]) -> Offsets:
    result: Offsets = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()
    }


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format(FORMAT)``: the records between startingOffsets and endingOffsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = ReadOptions.parse(options, streaming=False)
        starting = self.options.starting
        if isinstance(starting, OffsetSpec) and LATEST in (starting.default, *starting.explicit.values()):
            raise ValueError("option 'startingOffsets' cannot be latest in a batch query")

    def partitions(self) -> Sequence[InputPartition]:
        consumer = metadata_consumer(self.options)
        try:
            tps = topic_partitions(consumer, self.options)
            starts = resolve(consumer, self.options.starting, tps, self.options)
            ends = resolve(consumer, self.options.ending, tps, self.options)
        finally:
            consumer.close()
        return split_ranges(starts, {tp: max(ends[tp], starts[tp]) for tp in tps},
                            self.options.max_records_per_partition, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):  # PySpark's own partition when we planned none
            return iter(())
        return read_arrow(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format(FORMAT)``: micro-batches of new offsets, capped by
    ``maxOffsetsPerTrigger``; with ``Trigger.AvailableNow`` it stops at the offsets that were the
    latest when the query started."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = ReadOptions.parse(options, streaming=True)
        self._consumer: Any = None
        self._available_now: dict[TopicPartition, int] | None = None
        #: The newest latest offsets seen (``reportLatestOffset``: Spark's progress shows them).
        self._reported: Offsets | None = None
        #: When the last batch was planned (``maxTriggerDelay`` counts from it).
        self._last_batch_at = time.monotonic()

    def _metadata(self) -> Any:
        if self._consumer is None:
            self._consumer = metadata_consumer(self.options)
        return self._consumer

    def initialOffset(self) -> Offsets:
        consumer = self._metadata()
        tps = topic_partitions(consumer, self.options)
        return to_json(resolve(consumer, self.options.starting, tps, self.options))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        consumer = self._metadata()
        tps = topic_partitions(consumer, self.options)
        self._available_now = resolve(consumer, OffsetSpec(LATEST), tps, self.options)

    def _latest(self) -> dict[TopicPartition, int]:
        if self._available_now is not None:
            return dict(self._available_now)
        consumer = self._metadata()
        tps = topic_partitions(consumer, self.options)
        return resolve(consumer, OffsetSpec(LATEST), tps, self.options)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = from_json(start)
        latest = self._latest()
        self._reported = to_json(latest)
        new = [tp for tp in latest if tp not in begin]
        if new:  # partitions that appeared after the query started: read them from their start
            begin.update(resolve(self._metadata(), OffsetSpec(EARLIEST), new, self.options))
        lost = _data_lost(begin, latest)
        if lost and self.options.fail_on_data_loss:
            raise DataLossError(f"{lost}; some data may have been missed (set failOnDataLoss=false to go on)")
        latest = {tp: max(end, begin[tp]) for tp, end in latest.items()}
        for tp, offset in begin.items():
            if tp in latest or not lost:
                latest.setdefault(tp, offset)
        if isinstance(limit, ReadMaxRows):
            latest = _capped(begin, latest, limit.max_rows)
        if self._too_few(begin, latest):
            return start
        if latest != {tp: begin[tp] for tp in latest}:
            self._last_batch_at = time.monotonic()
        return to_json(latest)

    def _too_few(self, begin: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> bool:
        """``minOffsetsPerTrigger``: wait for that many new offsets, at most ``maxTriggerDelay``
        after the last batch (never with Trigger.AvailableNow, which reads all there is)."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None or self._available_now is not None:
            return False
        waiting = sum(end - begin.get(tp, end) for tp, end in latest.items())
        overdue = (time.monotonic() - self._last_batch_at) * 1000 >= self.options.max_trigger_delay_ms
        return waiting < wanted and not overdue

    def reportLatestOffset(self) -> Offsets | None:
        """The latest offsets found by the last ``latestOffset`` (Spark's progress shows them as
        the source's ``latestOffset``, beside the batch's end)."""
        return self._reported

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        starts, ends = from_json(start), from_json(end)
        missing = [tp for tp in ends if tp not in starts]
        if missing:
            starts.update(resolve(self._metadata(), OffsetSpec(EARLIEST), missing, self.options))
        return split_ranges(starts, ends, self.options.max_records_per_partition, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):  # PySpark's own partition when we planned none
            return iter(())
        return read_arrow(self.options, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: like Spark's Kafka source, progress lives in the checkpoint only."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _data_lost(begin: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> str:
    """What data loss the latest offsets show: partitions gone (topic or partitions deleted), or a
    partition whose end is before where the query stands (topic deleted and created again)."""
    problems = [f"{tp.topic}-{tp.partition} is gone" for tp in sorted(begin) if tp not in latest]
    problems += [f"{tp.topic}-{tp.partition} ends at {latest[tp]}, before offset {begin[tp]} it had reached"
                 for tp in sorted(latest) if tp in begin and latest[tp] < begin[tp]]
    return "; ".join(problems)


def _capped(begin: dict[TopicPartition, int], latest: dict[TopicPartition, int],
            max_rows: int) -> dict[TopicPartition, int]:
    """Spread ``max_rows`` offsets over the partitions in proportion to what each has waiting."""
    waiting = {tp: latest[tp] - begin[tp] for tp in latest}
    total = sum(waiting.values())
    if total <= max_rows:
        return latest
    capped = {tp: begin[tp] + (waiting[tp] * max_rows) // total for tp in latest}
    spare = max_rows - sum(capped[tp] - begin[tp] for tp in latest)
    for tp in sorted(latest, key=lambda t: waiting[t], reverse=True):
        if spare <= 0:
            break
        extra = min(spare, latest[tp] - capped[tp])
        capped[tp] += extra
        spare -= extra
    return capped
