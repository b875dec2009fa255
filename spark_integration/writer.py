"""The exactly-once Kafka sink: one transaction per task, fenced by a stable transactional id.

Each task (one sink partition of one batch) writes its rows in one Kafka transaction whose
transactional id is ``<prefix>-<partition id>``: never the attempt number, so a retried or
speculative attempt's ``init_transactions`` fences the older attempt (whose commit then fails and
whose open transaction the broker aborts). In the same transaction the task commits a marker,
the last batch it committed, as the offset of partition 0 of a marker topic in a consumer group
of its own (``<transactional id>.sink-marker``), with its owner (the streaming query's id, or the
batch write's) in the offset's metadata: one record per commit, read back with one OffsetFetch
whatever the query's age. A task first reads its marker (after the fencing has resolved its
previous transaction, so it is final), and skips a batch already committed: Spark re-runs a batch
with the same offsets after a crash between the sink's commits and its own commit log, and the
transform is assumed deterministic and the sink's partitioning fixed, so the skipped rows are the
ones already written. A marker of another owner, and a prefix another query claimed, stop the
task with an error instead (``ownership.py``).

The markers are consumer group offsets, so they last as long as the broker keeps committed
offsets (``offsets.retention.minutes``, 7 days by default, counted from the commit): a query
stopped for longer loses its markers, and a batch re-run after its restart is written again.

The sink creates its topics itself (``admin.py``): the marker topic with one partition and no
retention limit (it holds the prefix claims), the intent topic compacted (recovery only reads a
prefix's newest intent).

The option ``delivery.guarantee=at-least-once`` (default ``exactly-once``) writes the same rows
with the SDK's idempotent producer and no transaction or marker: a retried task or a re-run
batch writes its rows again. It is the baseline the exactly-once sink is benchmarked against.

Batch writes (``df.write``) use a random write id instead of a batch id, so a task re-run within
the same write (after its commit was lost with its executor) is skipped too; their default prefix
is ``topicwright-spark-write-<write id>``, a streaming query's ``topicwright-spark-<query id>``.

The driver-side ``commit`` only records progress: every task already committed its transaction,
and Spark calls ``commit``/``abort`` in fresh processes, repeatedly, and with ``None`` messages
for failed tasks, so no correctness may depend on them.

The option ``commit.mode=two-phase`` (default ``per-task``) makes a whole micro-batch visible at
once instead: tasks only prepare their transactions and the driver's ``commit`` completes them
(KIP-939; see ``two_phase.py`` for the protocol and its recovery).
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from sdk.client.cluster import TopicPartition
from sdk.consumer.consumer import Consumer as AsyncConsumer
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import InvalidTransactionTimeoutError, ProducerFencedError
from sdk.producer.producer import Producer as AsyncProducer
from sdk.sync import Producer
from spark_integration.admin import TopicSpec, ensure_topic, fetch_committed
from spark_integration.client_pool import ClientPool, new_pool, settings_key
from spark_integration.options import SINK_OPTIONS, OptionError, check_names, client_settings
from spark_integration.ownership import (
    BATCH_WRITES,
    Marker,
    PrefixInUseError,
    already_committed,
    claim_prefix,
    was_aborted,
)
from spark_integration.two_phase import (
    DEFAULT_INTENT_TOPIC,
    PER_TASK,
    TWO_PHASE,
    commit_batch,
    init_two_phase,
    resolve_kept_transaction,
)

log = logging.getLogger(__name__)

#: Where the sink keeps its per-(query, partition) markers unless ``marker.topic`` says otherwise.
DEFAULT_MARKER_TOPIC = "topicwright-spark-sink-markers"
#: Values of the option ``delivery.guarantee``.
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
#: Values of the option ``expired.markers``: refuse to run (default), or write the batch again.
FAIL, REWRITE = "fail", "rewrite"
#: Spark's local properties holding the micro-batch id and the (checkpointed) query id.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

#: Producers of attempts that the test hook made "crash": kept open, never closed or aborted,
#: as a crashed process would leave them; the next attempt fences them.
_crashed_producers: list[Producer] = []


class TransactionTimeoutError(RuntimeError):
    """A per-task transaction has been open longer than its ``transaction.timeout.ms``: the broker
    aborts it, so the task stops instead of committing into a fenced transaction (and its retries,
    as long, would fail the same way)."""


class MarkersExpiredError(RuntimeError):
    """A streaming query past its first batch finds no batch marker at all: they expired with the
    broker's ``offsets.retention.minutes`` while the query was stopped, so a re-run batch could
    not be recognised as written."""


class WriteAbortedError(RuntimeError):
    """A task of a batch write that Spark's driver already aborted: it writes nothing."""


class InjectedFailure(RuntimeError):
    """The test hook's failure after producing and before committing (``testing.failBeforeCommit``)."""


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What a task reports to the driver: its partition, records written, whether it skipped."""

    partition: int
    records: int
    skipped: bool
    #: Two-phase mode: the prepared transaction (its id and ``str(PreparedTxnState)``) and the
    #: transactional id prefix, for the driver to record and complete.
    transactional_id: str | None = None
    state: str | None = None
    prefix: str | None = None
    #: The marker's owner (``Marker.owner``), for the driver's check of the batch's markers.
    owner: str | None = None


@dataclass(frozen=True)
class SinkOptions:
    producer_settings: dict[str, Any]
    consumer_settings: dict[str, Any]
    topic: str | None
    prefix: str | None
    marker_topic: str
    columns: tuple[str, ...]
    fail_before_commit: tuple[int, int | None] | None
    #: Test hook ``testing.killDriverAtCommit`` = ``batch:process group``.
    kill_driver_at_commit: tuple[int, int] | None = None
    #: ``delivery.guarantee``: EXACTLY_ONCE (transactions and markers) or AT_LEAST_ONCE.
    guarantee: str = EXACTLY_ONCE
    #: Test hook ``testing.slowTask`` = ``partition:batch:seconds``: that task's first attempt
    #: stalls after its first row, so Spark launches a speculative copy (which fences it).
    slow_task: tuple[int, int | None, float] | None = None
    #: ``commit.mode``: PER_TASK (each task commits) or TWO_PHASE (the driver commits the batch).
    commit_mode: str = PER_TASK
    intent_topic: str = DEFAULT_INTENT_TOPIC
    #: ``two.phase.intent.wait.ms``: how long a task waits for an intent naming a transaction it
    #: found open before it aborts it as stale.
    intent_wait_s: float = 3.0
    #: Test hook ``testing.killDriverAfterIntent`` = ``batch:process group`` (two-phase mode).
    kill_driver_after_intent: tuple[int, int] | None = None
    #: ``sink.topics.replication.factor`` and ``sink.topics.min.insync.replicas`` of the marker
    #: and intent topics the sink creates (-1 and None: the broker's defaults).
    topics_replication_factor: int = -1
    topics_min_insync_replicas: int | None = None
    #: ``expired.markers``: FAIL (refuse a batch past the first when no marker is left) or REWRITE.
    expired_markers: str = FAIL

    @property
    def transaction_timeout_ms(self) -> float:
        """The per-task transactions' timeout (``kafka.transaction.timeout.ms``, or the SDK's)."""
        default = inspect.signature(AsyncProducer.__init__).parameters["transaction_timeout_ms"].default
        return float(self.producer_settings.get("transaction_timeout_ms", default))

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        options = {name.lower(): value for name, value in options.items()}
        check_names(options, SINK_OPTIONS, "sink")
        columns = tuple(schema.fieldNames())
        if "value" not in columns:
            raise OptionError("the sink needs a 'value' column")
        topic = options.get("topic")
        if topic is None and "topic" not in columns:
            raise OptionError("the sink needs the option 'topic' or a 'topic' column")
        check_column_types(schema)
        # The marker reads share the connection settings (security, timeouts) the consumer knows.
        consumer_parameters = inspect.signature(AsyncConsumer.__init__).parameters
        connection = {
            name: value for name, value in options.items()
            if name.startswith(("kafka.ssl.", "kafka.sasl.jaas."))
            or (name.startswith("kafka.") and name[len("kafka."):].replace(".", "_") in consumer_parameters)
        }
        guarantee = (options.get("delivery.guarantee") or EXACTLY_ONCE).strip().lower()
        if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise OptionError(f"option 'delivery.guarantee' must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, "
                              f"not {options.get('delivery.guarantee')!r}")
        commit_mode = (options.get("commit.mode") or PER_TASK).strip().lower()
        if commit_mode not in (PER_TASK, TWO_PHASE):
            raise OptionError(f"option 'commit.mode' must be {PER_TASK} or {TWO_PHASE}, "
                              f"not {options.get('commit.mode')!r}")
        acks = (options.get("kafka.acks") or "all").strip().lower()
        if guarantee == EXACTLY_ONCE and acks not in ("all", "-1"):
            raise OptionError(f"option 'kafka.acks={options.get('kafka.acks')}': the exactly-once sink's "
                              "transactions need acks=all (delivery.guarantee=at-least-once takes any)")
        if commit_mode == TWO_PHASE and guarantee != EXACTLY_ONCE:
            raise OptionError(f"option 'commit.mode={TWO_PHASE}' needs delivery.guarantee={EXACTLY_ONCE}")
        prefix = options.get("transactional.id.prefix")
        if prefix is not None and not prefix.strip():
            raise OptionError("option 'transactional.id.prefix' is empty (leave it out for the default)")
        expired_markers = (options.get("expired.markers") or FAIL).strip().lower()
        if expired_markers not in (FAIL, REWRITE):
            raise OptionError(f"option 'expired.markers' must be {FAIL} or {REWRITE}, "
                              f"not {options.get('expired.markers')!r}")
        hook = options.get("testing.failbeforecommit")
        fail_before_commit = None
        if hook:
            partition, _, batch = hook.partition(":")
            fail_before_commit = (int(partition), int(batch) if batch else None)
        return cls(
            producer_settings=client_settings(options, AsyncProducer),
            consumer_settings=client_settings(connection, AsyncConsumer),
            topic=topic,
            prefix=prefix,
            marker_topic=options.get("marker.topic") or DEFAULT_MARKER_TOPIC,
            columns=columns,
            fail_before_commit=fail_before_commit,
            kill_driver_at_commit=_batch_and_group(options.get("testing.killdriveratcommit")),
            guarantee=guarantee,
            slow_task=_slow_task(options.get("testing.slowtask")),
            commit_mode=commit_mode,
            intent_topic=options.get("intent.topic") or DEFAULT_INTENT_TOPIC,
            intent_wait_s=float(options.get("two.phase.intent.wait.ms") or 3000) / 1000,
            kill_driver_after_intent=_batch_and_group(options.get("testing.killdriverafterintent")),
            topics_replication_factor=_replication_factor(options.get("sink.topics.replication.factor")),
            topics_min_insync_replicas=_min_insync(options.get("sink.topics.min.insync.replicas")),
            expired_markers=expired_markers,
        )

    def topic_specs(self) -> list[TopicSpec]:
        """The sink's own topics, as it creates them when they are missing: the marker topic
        (one partition: the markers' partition and the prefix claims, kept forever) and, in
        two-phase mode, the intent topic (compacted: recovery reads a prefix's newest intent)."""
        common = ({"min.insync.replicas": str(self.topics_min_insync_replicas)}
                  if self.topics_min_insync_replicas is not None else {})
        specs = [TopicSpec(self.marker_topic, 1, self.topics_replication_factor,
                           {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                            **common})]
        if self.commit_mode == TWO_PHASE:
            specs.append(TopicSpec(self.intent_topic, -1, self.topics_replication_factor,
                                   {"cleanup.policy": "compact", **common}))
        return specs

    def ensure_topics(self) -> None:
        for spec in self.topic_specs():
            ensure_topic(self.consumer_settings, spec)


def check_column_types(schema: StructType) -> None:
    """The column types Spark's Kafka sink takes, refused with its messages: ``key`` and ``value``
    string or binary, ``topic`` string, ``partition`` int, ``headers``
    array<struct<key:string,value:binary>>."""
    types = {f.name: f.dataType for f in schema.fields}
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary, not "
                              f"{types[name].simpleString()}")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"Topic type must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"partition attribute type must be an int, not {types['partition'].simpleString()}")
    headers = types.get("headers")
    if headers is not None:
        element = headers.elementType if isinstance(headers, ArrayType) else None
        fields = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        if (set(fields) != {"key", "value"} or not isinstance(fields["key"], StringType)
                or not isinstance(fields["value"], BinaryType)):
            raise OptionError(f"headers attribute type must be array<struct<key:string,value:binary>>, not "
                              f"{headers.simpleString()}")


def _replication_factor(raw: str | None) -> int:
    if raw is None:
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1 and value != -1:
        raise OptionError(
            f"option 'sink.topics.replication.factor' must be a positive integer or -1, not {raw!r}")
    return value


def _min_insync(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(f"option 'sink.topics.min.insync.replicas' must be a positive integer, not {raw!r}")
    return value


def _batch_and_group(raw: str | None) -> tuple[int, int] | None:
    if not raw:
        return None
    batch, _, group = raw.partition(":")
    if not group:
        raise OptionError("options 'testing.killDriver...' are 'batch id:process group id'")
    return int(batch), int(group)


def _slow_task(raw: str | None) -> tuple[int, int | None, float] | None:
    if not raw:
        return None
    parts = raw.split(":")
    if len(parts) != 3:
        raise OptionError("option 'testing.slowTask' is 'partition:batch id (or empty):seconds'")
    return int(parts[0]), int(parts[1]) if parts[1] else None, float(parts[2])


def _hooked(hook: tuple[Any, ...] | None, partition: int, marker: Marker) -> bool:
    """Whether a test hook ``(partition, batch or None, ...)`` names this task."""
    return hook is not None and hook[0] == partition and hook[1] in (None, marker.batch)


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()


def marker_group(transactional_id: str) -> str:
    """The consumer group whose committed offset is a task's marker."""
    return f"{transactional_id}.sink-marker"


def read_marker(options: SinkOptions, transactional_id: str) -> OffsetAndMetadata | None:
    """The marker (offset and owner) last committed by ``transactional_id``'s transactions
    (None: never).

    Read after the task's producer fenced older attempts, so no transaction of this id is open
    and the committed offset is final (OffsetFetch with require_stable)."""
    return fetch_committed(options.consumer_settings, marker_group(transactional_id),
                           TopicPartition(options.marker_topic, 0))


def write_partition(options: SinkOptions, rows: Iterator[Any], prefix: str,
                    marker: Marker, partition: int | None = None) -> SinkCommit:
    """Write this task's rows in one transaction with its marker, unless already committed.
    ``partition``: the sink partition when not run in a Spark task (the task's otherwise).
    ``PrefixInUseError`` before anything is written if ``prefix`` is another owner's."""
    context = TaskContext.get()
    if partition is None:
        partition = context.partitionId() if context is not None else 0
    if options.guarantee == AT_LEAST_ONCE:
        return _write_at_least_once(options, rows, partition)
    attempt = context.attemptNumber() if context is not None else 0
    transactional_id = f"{prefix}-{partition}"
    two_phase = options.commit_mode == TWO_PHASE
    options.ensure_topics()
    if options.prefix is not None:  # a chosen prefix: claimed before any producer fences anything
        claim_prefix(options.consumer_settings, options.producer_settings, options.marker_topic, prefix,
                     marker.owner if marker.batch is not None else BATCH_WRITES)
    # Per task: the constructor runs init_transactions, so older attempts of this partition are
    # fenced and their open transaction is aborted before the marker is read. Two-phase: older
    # attempts are fenced, their transaction kept, then rolled forward or aborted.
    try:
        producer = Producer(**options.producer_settings, transactional_id=transactional_id,
                            enable_two_phase_commit=two_phase)
    except InvalidTransactionTimeoutError as exc:
        raise TransactionTimeoutError(
            f"{transactional_id}: the broker refused kafka.transaction.timeout.ms="
            f"{options.transaction_timeout_ms:.0f}: it is above the broker's transaction.max.timeout.ms "
            "(15 minutes by default); lower it, or raise the broker's maximum") from exc
    crashed = False
    try:
        if two_phase:
            init_two_phase(producer, transactional_id)
            resolve_kept_transaction(producer, options.consumer_settings, options.intent_topic, prefix,
                                     transactional_id, options.intent_wait_s)
        found = read_marker(options, transactional_id)
        if was_aborted(found, marker):
            for _ in rows:
                pass
            raise WriteAbortedError(f"{transactional_id}: Spark's driver aborted the write {marker.owner}; "
                                    "this task, still running, writes nothing")
        if found is None:
            _check_markers_kept(options, prefix, marker, partition)
        if already_committed(found, marker, prefix):
            for _ in rows:
                pass
            log.info("%s: batch %s already committed, skipped", transactional_id, marker)
            return SinkCommit(partition, 0, True, prefix=prefix)
        producer.begin_transaction()
        # A per-task transaction times out on the broker; a two-phase one (KIP-939) never does.
        timeout_s = None if two_phase else options.transaction_timeout_ms / 1000
        began = time.monotonic()
        count = 0
        stall = attempt == 0 and _hooked(options.slow_task, partition, marker)
        sender = RecordSender(producer, options)
        for chunk in rows:
            if timeout_s is not None and time.monotonic() - began > timeout_s:
                raise _timed_out(transactional_id, time.monotonic() - began, options)
            count += sender.send(chunk)
            if stall:
                stall = False
                producer.flush()
                seconds = options.slow_task[2] if options.slow_task else 0.0
                log.warning("%s: test hook stalls attempt 0 for %.1f s", transactional_id, seconds)
                time.sleep(seconds)
        sender.check()
        producer.send_offsets_to_transaction(
            {TopicPartition(options.marker_topic, 0): marker.committed_offset()},
            marker_group(transactional_id))
        state = producer.prepare_transaction() if two_phase else None
        if attempt == 0 and _hooked(options.fail_before_commit, partition, marker):
            producer.flush()
            crashed = True
            _crashed_producers.append(producer)
            raise InjectedFailure(f"{transactional_id}: injected failure before commit of {marker}")
        if state is not None:  # closing leaves a prepared transaction open for the driver
            return SinkCommit(partition, count, False, transactional_id, str(state), prefix, marker.owner)
        if timeout_s is not None and time.monotonic() - began > timeout_s:
            raise _timed_out(transactional_id, time.monotonic() - began, options)
        producer.commit_transaction()
        return SinkCommit(partition, count, False, prefix=prefix)
    except BaseException:
        # A prepared (kept) transaction is never aborted here: an intent may name it (a failure
        # while resolving it leaves it to the next attempt's recovery).
        if not crashed and producer.prepared_transaction_state is None:
            try:
                producer.abort_transaction()
            except Exception:  # fenced or never begun: the broker ends it
                log.debug("%s: abort failed", transactional_id, exc_info=True)
        raise
    finally:
        if not crashed:
            producer.close()


def _timed_out(transactional_id: str, elapsed_s: float, options: SinkOptions) -> TransactionTimeoutError:
    return TransactionTimeoutError(
        f"{transactional_id}: the task's transaction has been open {elapsed_s:.1f} s, longer than its "
        f"timeout of {options.transaction_timeout_ms:.0f} ms (kafka.transaction.timeout.ms), so the broker "
        "aborts it and a retry as long would fail the same way. Set kafka.transaction.timeout.ms above "
        "the longest task (the broker caps it at its transaction.max.timeout.ms, 15 minutes by default), "
        "make batches smaller (maxOffsetsPerTrigger, more partitions), or use commit.mode=two-phase, "
        "whose prepared transactions do not time out")


def _check_markers_kept(options: SinkOptions, prefix: str, marker: Marker, partition: int) -> None:
    """A stream past its first batch has committed a marker under ``<prefix>-0`` (every batch has
    a sink partition 0, and each of its tasks commits one, even with no rows): none there, and none
    under this task's id, means they expired (``MarkersExpiredError``) unless the user accepts that
    a re-run batch is written again (``expired.markers=rewrite``). A missing marker under another
    id alone is a sink partition the query did not have before."""
    if marker.batch is None or marker.batch == 0 or options.expired_markers == REWRITE:
        return
    if partition != 0 and read_marker(options, f"{prefix}-0") is not None:
        return
    raise MarkersExpiredError(
        f"the query is at batch {marker.batch} but no batch marker under transactional.id.prefix {prefix!r} "
        "is left: they are consumer group offsets and expire with the broker's offsets.retention.minutes "
        "while a query is stopped (unless the query's prefix changed, or its earlier batches went to "
        "another sink), so a batch Spark re-runs cannot be recognised as already written. Raise "
        "offsets.retention.minutes on the broker to keep them; to go on and accept that the first batch "
        "after the restart may be written twice, set the sink option expired.markers=rewrite")


class RecordSender:
    """Sends a task's input to ``producer``: Arrow record batches (what PySpark's Arrow writers
    get) column by column, ``Row``s one by one. A batch with one topic (the option, or no topic
    column), no partition and no headers column goes to the producer as one ``send_many`` of its
    (key, value) pairs; otherwise record by record. ``check`` raises the first failed send once
    everything sent is acknowledged."""

    def __init__(self, producer: Producer, options: SinkOptions) -> None:
        self.producer = producer
        self.options = options
        self.futures: list[Any] = []

    def send(self, chunk: Any) -> int:
        """Send one batch or row; the number of records sent."""
        import pyarrow as pa

        if isinstance(chunk, pa.RecordBatch):
            return self._send_batch(chunk)
        self.futures.append(_send_row(self.producer, self.options, chunk))
        return 1

    def check(self) -> None:
        self.producer.flush()
        for future in self.futures:
            error = future.exception()
            if error is not None:
                raise error
        self.futures.clear()

    def _send_batch(self, batch: Any) -> int:
        names = batch.schema.names
        values = _binary_values(batch.column(names.index("value")))
        keys = _binary_values(batch.column(names.index("key"))) if "key" in names else [None] * len(values)
        topic = self.options.topic
        if topic is None and "topic" in names:
            topics = batch.column(names.index("topic")).to_pylist()
            topic = topics[0] if topics and topics.count(topics[0]) == len(topics) else None
        else:
            topics = None
        if topic is not None and "partition" not in names and "headers" not in names:
            if values:
                self.futures.append(self.producer.send_many(topic, zip(keys, values, strict=True)))
            return len(values)
        columns = {name: batch.column(index).to_pylist() for index, name in enumerate(names)
                   if name in ("partition", "headers")}
        partitions = columns.get("partition") or [None] * len(values)
        headers = columns.get("headers") or [None] * len(values)
        send = self.producer.send
        for index, value in enumerate(values):
            row_topic = topic if topic is not None else (topics[index] if topics else None)
            if row_topic is None:
                raise OptionError("a row has a null topic and the sink has no 'topic' option")
            row_headers = headers[index]
            self.futures.append(send(
                row_topic, value, key=keys[index], partition=partitions[index],
                headers=[(h["key"], _as_bytes(h["value"])) for h in row_headers] if row_headers else None))
        return len(values)


def _binary_values(column: Any) -> list[bytes | None]:
    """A string or binary Arrow column as bytes (strings UTF-8 encoded), nulls as None."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _send_row(producer: Producer, options: SinkOptions, row: Any) -> Any:
    fields = row.asDict() if hasattr(row, "asDict") else dict(zip(options.columns, row, strict=True))
    headers = fields.get("headers")
    return producer.send(
        options.topic or fields["topic"],
        _as_bytes(fields["value"]),
        key=_as_bytes(fields.get("key")),
        partition=fields.get("partition"),
        headers=[(h["key"], _as_bytes(h["value"])) for h in headers] if headers else None,
    )


#: This worker's idle at-least-once producers, by settings (``client_pool``'s rules). The
#: transactional producers are not pooled: each task's own ``init_transactions`` is what fences
#: an older attempt of its sink partition before the task reads its marker.
_producers: ClientPool[Producer] = new_pool("at-least-once producers", lambda producer: producer.close())


def _write_at_least_once(options: SinkOptions, rows: Iterator[Any], partition: int) -> SinkCommit:
    """``delivery.guarantee=at-least-once``: the rows through an idempotent producer (the SDK's
    default with acks=all) of this worker's pool, every record acknowledged before the task
    reports; no transaction, no marker."""
    key = settings_key(options.producer_settings)
    producer = _producers.borrow(key) or Producer(**options.producer_settings)
    count = 0
    try:
        sender = RecordSender(producer, options)
        for chunk in rows:
            count += sender.send(chunk)
        sender.check()
    except BaseException:
        _producers.discard(producer)
        raise
    _producers.give_back(key, producer)
    return SinkCommit(partition, count, False)


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format(FORMAT)``: each task's rows in one transaction."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options, schema)
        self.write_id = uuid.uuid4().hex
        self.prefix = self.options.prefix or f"topicwright-spark-write-{self.write_id}"
        if self.options.prefix is not None and self.options.guarantee == EXACTLY_ONCE:
            # An earlier write of this prefix whose driver died: end what it left unfinished (a
            # task of this write ends its own id's, but this write may have fewer partitions).
            _resolve_lingering(self.options, self.prefix)

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_partition(self.options, iterator, self.prefix, Marker.of_write(self.write_id))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.commit_mode == TWO_PHASE:
            commit_two_phase(self.options, messages, None)
        _record_progress("write", self.write_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The write failed: end every transaction it left (prepared ones of tasks that succeeded,
        open ones of tasks killed on the way), committing only those a recorded intent names (the
        driver's ``commit`` had decided before it failed). Tasks that committed in per-task mode
        stay committed: a batch write is not atomic in that mode."""
        log.warning("write %s aborted by Spark", self.write_id)
        if self.options.guarantee == EXACTLY_ONCE:
            try:
                outcomes = _resolve_lingering(self.options, self.prefix)
                rolled_forward = {tid for tid, outcome in outcomes.items() if outcome == "rolled forward"}
                _close_write(self.options, self.prefix, Marker.of_write(self.write_id), len(messages),
                             rolled_forward)
            except Exception:  # Spark reports the write's own failure; this one is logged
                log.error("write %s: its unfinished transactions under %s could not be ended; a later "
                          "write with the prefix, or AdminClient.abort_transactions_with_prefix, ends them",
                          self.write_id, self.prefix, exc_info=True)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format(FORMAT)``: each micro-batch task in one transaction, a re-run
    batch skipped by its marker. The default transactional id prefix is the query's id, which
    Spark keeps in the checkpoint, so it survives restarts."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options, schema)

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
        if batch is None or query is None:
            raise RuntimeError(f"Spark did not pass the micro-batch id ({BATCH_ID_PROPERTY}) or the query id "
                               f"({QUERY_ID_PROPERTY}) to the task")
        prefix = self.options.prefix or f"topicwright-spark-{query}"
        return write_partition(self.options, iterator, prefix, Marker.of_query(query, int(batch)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        hook = self.options.kill_driver_at_commit
        if hook is not None and hook[0] == batchId:
            # Test hook: the driver dies after every task of this batch committed and before
            # Spark wrote the batch to its commit log.
            _kill_driver(hook[1])
        prefixes = {m.prefix for m in messages if isinstance(m, SinkCommit) and m.prefix}
        if self.options.guarantee == EXACTLY_ONCE and len(prefixes) == 1:
            # Ids beyond this batch's sink partitions (the query had more before a restart): ended
            # before this batch's intent becomes the newest, which an older one could name.
            _resolve_lingering(self.options, prefixes.pop(), first_partition=len(messages))
        if self.options.commit_mode == TWO_PHASE:
            commit_two_phase(self.options, messages, batchId)
        _record_progress("batch", batchId, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %s aborted by Spark; its committed tasks stay committed, a re-run skips them",
                    batchId)


def commit_two_phase(options: SinkOptions, messages: Sequence[WriterCommitMessage | None],
                     batch: int | None) -> None:
    """The driver's part of ``commit.mode=two-phase`` for micro-batch ``batch`` (None: a batch
    write): check the batch's prepared transactions, record its intent, complete them (see
    ``two_phase.py``). Tasks that skipped report nothing; the others report the marker's owner
    (the driver of a stream does not know its query's id)."""
    prepared = [m for m in messages if isinstance(m, SinkCommit) and m.transactional_id and m.state]
    if not prepared:
        return
    owners = {m.owner for m in prepared}
    prefixes = {m.prefix for m in prepared}
    if len(owners) != 1 or len(prefixes) != 1 or None in owners or None in prefixes:
        raise PrefixInUseError(
            f"the tasks of one batch reported different owners {owners} or prefixes {prefixes}")
    marker, prefix = Marker(str(prepared[0].owner), batch), str(prepared[0].prefix)
    transactions = {m.transactional_id: m.state for m in prepared if m.transactional_id and m.state}
    hook = options.kill_driver_after_intent

    def after_intent() -> None:
        if hook is not None and hook[0] == batch:
            _kill_driver(hook[1])  # test hook: intent recorded, nothing completed

    options.ensure_topics()
    outcomes = commit_batch(
        options.producer_settings, options.intent_topic, prefix, marker.record(), transactions,
        lambda tid: already_committed(read_marker(options, tid), marker, prefix), after_intent)
    log.info("two-phase commit of %s: %s", marker, outcomes)


def _resolve_lingering(options: SinkOptions, prefix: str, first_partition: int = 0) -> dict[str, str]:
    # Imported here: it needs the admin client, which the workers that only write a partition
    # never use.
    from spark_integration.recovery import resolve_lingering

    return resolve_lingering(options.producer_settings, options.consumer_settings, options.intent_topic,
                             prefix, options.commit_mode == TWO_PHASE, first_partition)


#: How often the driver takes an id of an aborted write back from a task that fenced it meanwhile
_CLOSE_ATTEMPTS = 5


def _close_write(options: SinkOptions, prefix: str, marker: Marker, partitions: int, skip: set[str]) -> None:
    """After a failed batch write, end it under each of its ids but ``skip`` (rolled forward):
    Spark calls ``abort`` while tasks of the write may still run, and a task's transaction begun
    after the lingering ones were listed would stay open (a two-phase one forever). Under each id
    one transaction fences every task that initialized before it (their transaction is aborted,
    their later requests refused) and commits the write's ``aborted_offset`` marker, which a task
    initializing after it reads before it begins (``was_aborted``). A task initializing between
    the two fences this transaction instead: it is tried again, fencing that task in turn."""
    for partition in range(partitions):
        transactional_id = f"{prefix}-{partition}"
        if transactional_id in skip:
            continue
        for attempt in range(1, _CLOSE_ATTEMPTS + 1):
            try:
                with Producer(**options.producer_settings, transactional_id=transactional_id) as closer:
                    closer.begin_transaction()
                    closer.send_offsets_to_transaction(
                        {TopicPartition(options.marker_topic, 0): marker.aborted_offset()},
                        marker_group(transactional_id))
                    closer.commit_transaction()
                break
            except ProducerFencedError:
                log.info("%s: a task of the aborted write fenced the driver (attempt %d): again",
                         transactional_id, attempt)
        else:
            raise WriteAbortedError(f"{transactional_id}: could not end the aborted write {marker.owner}")


def _kill_driver(process_group: int) -> None:
    """Test hooks: SIGKILL the driver, whose process group the option names, then this process,
    which PySpark's daemon runs in a process group of its own (it would go on otherwise)."""
    os.killpg(process_group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _record_progress(kind: str, ident: Any, messages: list[WriterCommitMessage | None]) -> None:
    done = [m for m in messages if isinstance(m, SinkCommit)]
    log.info("%s %s: %d tasks, %d records written, %d tasks skipped", kind, ident, len(done),
             sum(m.records for m in done), sum(m.skipped for m in done))
