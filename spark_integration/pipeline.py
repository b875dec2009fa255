"""``run_exactly_once``: consume-transform-produce on Spark, Kafka-Streams style.

Each round, the driver plans one Spark task per input partition that has records past its
group's committed offset. The task owns the transactional id ``<prefix>-<topic>-<partition>``;
creating its producer fences any older task for that partition (a retry, a speculative copy, a
leftover of a dead driver) and resolves its transaction. Only then does it read the group's
committed offset, which is therefore final, read the records up to the planned end, send the
transform's outputs, and commit the outputs together with the new group offset in one
transaction. The group's offsets are the only state: no checkpoint, so losing the driver, its
checkpoint or any task loses nothing and repeats nothing, provided the transform is deterministic
and the output topic keeps its number of partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import KafkaConnectionError
from sdk.sync import Consumer, Producer

log = logging.getLogger(__name__)

#: ``transform(key, value)`` -> the output records ``(key, value)`` of one input record.
Transform = Callable[[bytes | None, bytes | None], Iterable[tuple[bytes | None, bytes | None]]]

_crashed_producers: list[Producer] = []


class InjectedFailure(RuntimeError):
    """The test hook's failure after producing and before committing."""


@dataclass(frozen=True)
class PipelineTask:
    """What a task needs; pickled to the executors (``transform`` with cloudpickle)."""

    bootstrap_servers: str
    input_topic: str
    output_topic: str
    group_id: str
    prefix: str
    transform: Transform
    producer_config: Mapping[str, Any]
    consumer_config: Mapping[str, Any]
    max_records: int | None
    fail_before_commit: tuple[int, bool] | None

    def consumer(self) -> Consumer:
        return Consumer(bootstrap_servers=self.bootstrap_servers, group_id=self.group_id,
                        enable_auto_commit=False, isolation_level="read_committed",
                        auto_offset_reset="earliest", **self.consumer_config)

    def run(self, partition: int, end: int) -> tuple[int, int, int, int]:
        """Process ``[committed, end)`` of one input partition (at most ``max_records`` offsets):
        (partition, its committed offset now, records consumed, records produced)."""
        tp = TopicPartition(self.input_topic, partition)
        producer = Producer(bootstrap_servers=self.bootstrap_servers, **self.producer_config,
                            transactional_id=f"{self.prefix}-{self.input_topic}-{partition}")
        crashed = False
        try:
            with self.consumer() as consumer:
                committed = consumer.committed(tp)
                start = committed if committed is not None else consumer.beginning_offsets([tp])[tp]
                if self.max_records is not None:
                    end = min(end, start + self.max_records)
                if start >= end:
                    return partition, start, 0, 0
                producer.begin_transaction()
                consumed = produced = 0
                for record in _records(consumer, tp, start, end):
                    consumed += 1
                    for key, value in self.transform(record.key, record.value):
                        producer.send(self.output_topic, value, key=key)
                        produced += 1
                producer.send_offsets_to_transaction({tp: OffsetAndMetadata(end, "")}, self.group_id)
                if self._fail_now(partition):
                    producer.flush()
                    crashed = True
                    _crashed_producers.append(producer)
                    raise InjectedFailure(f"{self.input_topic}-{partition}: injected failure before commit")
                producer.commit_transaction()
                return partition, end, consumed, produced
        except BaseException:
            if not crashed:
                try:
                    producer.abort_transaction()
                except Exception:
                    log.debug("abort failed", exc_info=True)
            raise
        finally:
            if not crashed:
                producer.close()

    def _fail_now(self, partition: int) -> bool:
        if self.fail_before_commit is None:
            return False
        hook_partition, every_attempt = self.fail_before_commit
        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        return hook_partition == partition and (every_attempt or attempt == 0)


def _records(consumer: Consumer, tp: TopicPartition, start: int, end: int) -> Iterable[Any]:
    consumer.assign([tp])
    consumer.seek(tp, start)
    deadline = time.monotonic() + 60
    while consumer.position(tp) < end:
        for record in consumer.getmany(tp, timeout_ms=500).get(tp, ()):
            if record.offset >= end:
                return
            yield record
            deadline = time.monotonic() + 60
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tp.topic}-{tp.partition}: stuck at {consumer.position(tp)} below {end}")


@dataclass
class PipelineResult:
    """What ``run_exactly_once`` did: rounds run, records consumed and produced."""

    rounds: int = 0
    consumed: int = 0
    produced: int = 0
    committed_offsets: dict[int, int] = field(default_factory=dict)


def run_exactly_once(
    spark: Any,
    *,
    bootstrap_servers: str,
    input_topic: str,
    output_topic: str,
    group_id: str,
    transform: Transform,
    transactional_id_prefix: str | None = None,
    max_records: int | None = None,
    max_rounds: int | None = None,
    producer_config: Mapping[str, Any] | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    fail_before_commit: tuple[int, bool] | None = None,
) -> PipelineResult:
    """Copy ``input_topic`` through ``transform`` into ``output_topic`` exactly once, in rounds
    of Spark jobs (one task per input partition, at most ``max_records`` offsets each), until the
    group has consumed every record committed to the input when the round began (or
    ``max_rounds``). Safe to call again after any failure: the group's offsets say where to go on.

    ``fail_before_commit=(partition, every_attempt)`` is a test hook: that partition's task fails
    after producing and before committing (in its first attempt, or in every attempt).
    """
    task = PipelineTask(bootstrap_servers, input_topic, output_topic, group_id,
                        transactional_id_prefix or group_id, transform, dict(producer_config or {}),
                        dict(consumer_config or {}), max_records, fail_before_commit)
    result = PipelineResult()
    while max_rounds is None or result.rounds < max_rounds:
        ends = _end_offsets_when_reachable(task)
        pending = sorted((p, end) for p, end in ends.items() if result.committed_offsets.get(p, -1) < end)
        if not pending:
            break
        outcomes = (spark.sparkContext.parallelize(pending, len(pending))
                    .map(lambda item: task.run(*item)).collect())
        result.rounds += 1
        for partition, committed, consumed, produced in outcomes:
            result.consumed += consumed
            result.produced += produced
            result.committed_offsets[partition] = committed
    return result


def _end_offsets_when_reachable(task: PipelineTask, patience_s: float = 60.0) -> dict[int, int]:
    """``_end_offsets``, retried while no broker answers (a restarting broker), for ``patience_s``:
    the round's tasks retry through Spark, the driver's planning must not give up at once."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return _end_offsets(task)
        except KafkaConnectionError:
            if time.monotonic() > deadline:
                raise
            log.warning("no broker reachable to plan the next round; retrying", exc_info=True)
            time.sleep(0.5)


def _end_offsets(task: PipelineTask) -> dict[int, int]:
    """The last stable offset of every input partition that has records.

    Committed offsets are deliberately not read here: a dead task's open transaction holds them
    (OffsetFetch answers UNSTABLE_OFFSET_COMMIT until it ends); the task reads them after its
    producer has fenced that transaction."""
    with task.consumer() as consumer:
        partitions = None
        deadline = time.monotonic() + 10
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(task.input_topic)
            if partitions is None:
                consumer.topics()
        tps = [TopicPartition(task.input_topic, p) for p in sorted(partitions or ())]
        if not tps:
            return {}
        ends = consumer.end_offsets(tps)
        beginnings = consumer.beginning_offsets(tps)
    return {tp.partition: ends[tp] for tp in tps if ends[tp] > beginnings[tp]}
