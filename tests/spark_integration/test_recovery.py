"""Nothing an ordinary failure leaves behind blocks read_committed readers or loses a batch: a
failed two-phase batch write aborts its prepared transactions (Spark's ``abort``), a later write
with the same prefix resolves what a dead driver left, a stream whose sink has fewer partitions
than before resolves the ids beyond them (Flink's KafkaSink probes and aborts those too), a task
whose transaction would outlive ``transaction.timeout.ms`` stops with a clear error, and a
stream whose batch markers expired refuses to run instead of writing a batch twice.

The sink's task and driver functions are called directly, as Spark's workers would call them,
except for the batch write that fails in Spark itself."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient as OracleAdmin
from confluent_kafka.admin import NewTopic
from pyspark.sql.types import BinaryType, StructField, StructType

from sdk.sync import AdminClient, Producer
from spark_integration import FORMAT
from spark_integration.ownership import Marker
from spark_integration.writer import (
    KafkaBatchWriter,
    KafkaStreamWriter,
    MarkersExpiredError,
    SinkOptions,
    TransactionTimeoutError,
    WriteAbortedError,
    marker_group,
    write_partition,
)
from tests.spark_integration.helpers import read_topic

SCHEMA = StructType([StructField("value", BinaryType())])


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = OracleAdmin({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def _raw_options(bootstrap: str, topic: str, mode: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "topic": topic, "commit.mode": mode,
            "marker.topic": f"markers-{topic}", "intent.topic": f"intents-{topic}",
            "two.phase.intent.wait.ms": "200", **extra}


def _rows(tag: str, n: int = 5) -> list[tuple[bytes]]:
    return [(f"{tag}-{i}".encode(),) for i in range(n)]


def _lingering(bootstrap: str, prefix: str) -> list[str]:
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        return sorted(t.transactional_id for t in admin.list_transactions_with_prefix(prefix))


def _committed_later_is_readable(bootstrap: str, topic: str, count: int = 10) -> list[bytes]:
    """Commit ``count`` records in a transaction of their own and read the topic back
    read_committed until they show (a prepared transaction before them holds them back)."""
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"later-{uuid.uuid4().hex[:8]}") as producer:
        producer.begin_transaction()
        for i in range(count):
            producer.send(topic, f"later-{i}".encode(), partition=0)
        producer.commit_transaction()
    deadline = time.monotonic() + 20
    while True:
        values = [r.value for r in read_topic(bootstrap, topic) if r.value]
        if sum(v.startswith(b"later-") for v in values) == count or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


@pytest.mark.slow
def test_a_failed_two_phase_batch_write_aborts_its_prepared_transactions(spark: Any, broker: Any) -> None:
    from pyspark.sql.functions import udf

    topic = f"failed-write-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)

    @udf("binary")
    def fail_in_the_second_partition(value: int) -> bytes:
        if value >= 2:
            raise ValueError("the transform fails in the second partition")
        return str(value).encode()

    frame = spark.range(0, 4, numPartitions=2).select(fail_in_the_second_partition("id").alias("value"))
    writer = frame.write.format(FORMAT).mode("append")
    for name, value in _raw_options(broker.bootstrap, topic, "two-phase").items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match="fails in the second partition"):
        writer.save()
    values = _committed_later_is_readable(broker.bootstrap, topic)
    assert sorted(values) == sorted(f"later-{i}".encode() for i in range(10))


def test_a_batch_write_resolves_what_an_earlier_write_of_its_prefix_left_prepared(broker: Any) -> None:
    topic = f"left-write-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    raw = _raw_options(broker.bootstrap, topic, "two-phase", **{"transactional.id.prefix": f"w-{topic}"})
    options = SinkOptions.parse(raw, SCHEMA)
    # A write whose driver died after its tasks prepared: nobody called commit or abort.
    for partition in (0, 1):
        write_partition(options, iter(_rows(f"dead-{partition}")), f"w-{topic}",
                        Marker.of_write("dead-write"), partition=partition)
    assert _lingering(broker.bootstrap, f"w-{topic}") == [f"w-{topic}-0", f"w-{topic}-1"]

    KafkaBatchWriter(raw, SCHEMA)  # the next write of the prefix, planned on the driver
    assert _lingering(broker.bootstrap, f"w-{topic}") == []
    assert sorted(_committed_later_is_readable(broker.bootstrap, topic)) == sorted(
        f"later-{i}".encode() for i in range(10))


@pytest.mark.parametrize("mode", ["per-task", "two-phase"])
def test_tasks_still_running_when_the_driver_aborts_the_write_leave_no_transaction(
        broker: Any, mode: str) -> None:
    """Spark calls the driver's ``abort`` as soon as a task failed for good, while other tasks
    of the write may still run (seen in CI: a task's transaction begun after the abort listed the
    lingering ones stayed open, and a two-phase one never times out). A task writing when the
    driver aborts is fenced and its transaction aborted; a task starting after it writes
    nothing."""
    topic = f"zombie-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    writer = KafkaBatchWriter(_raw_options(broker.bootstrap, topic, mode), SCHEMA)
    marker = Marker.of_write(writer.write_id)

    def rows_while_the_driver_aborts() -> Any:
        yield (b"zombie-0",)
        writer.abort([None, None])
        yield (b"zombie-1",)

    with pytest.raises(Exception) as fenced:
        write_partition(writer.options, rows_while_the_driver_aborts(), writer.prefix, marker, partition=0)
    assert not isinstance(fenced.value, WriteAbortedError), fenced.value
    with pytest.raises(WriteAbortedError):
        write_partition(writer.options, iter(_rows("late")), writer.prefix, marker, partition=1)
    assert _lingering(broker.bootstrap, writer.prefix) == []
    values = _committed_later_is_readable(broker.bootstrap, topic)
    assert sorted(values) == sorted(f"later-{i}".encode() for i in range(10))


@pytest.mark.parametrize("mode", ["per-task", "two-phase"])
def test_a_stream_with_fewer_sink_partitions_resolves_the_ids_beyond_them(broker: Any, mode: str) -> None:
    topic = f"shrunk-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    prefix = f"s-{topic}"
    raw = _raw_options(broker.bootstrap, topic, mode, **{"transactional.id.prefix": prefix,
                                                          "testing.failbeforecommit": "2:0"})
    options = SinkOptions.parse(raw, SCHEMA)
    query = uuid.uuid4().hex
    # Batch 0 ran with three sink partitions; the task of partition 2 died before its commit
    # (per-task: an open transaction; two-phase: a prepared one), and so did the query.
    for partition in (0, 1):
        write_partition(options, iter(_rows(f"b0-{partition}")), prefix, Marker.of_query(query, 0),
                        partition=partition)
    with pytest.raises(RuntimeError, match="injected failure"):
        write_partition(options, iter(_rows("b0-2")), prefix, Marker.of_query(query, 0), partition=2)
    # Restarted with one sink partition: batch 0 re-runs as one task, and the driver commits it.
    stream = KafkaStreamWriter({k: v for k, v in raw.items() if not k.startswith("testing.")}, SCHEMA)
    rerun = write_partition(stream.options, iter(_rows("b0-rerun")), prefix, Marker.of_query(query, 0),
                            partition=0)
    stream.commit([rerun], 0)
    assert _lingering(broker.bootstrap, prefix) == []
    values = _committed_later_is_readable(broker.bootstrap, topic)
    assert not any(v.startswith(b"b0-2") for v in values)


def test_a_task_whose_transaction_outlives_the_timeout_fails_early_and_says_why(broker: Any) -> None:
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    raw = _raw_options(broker.bootstrap, topic, "per-task", **{"kafka.transaction.timeout.ms": "1000",
                                                               "testing.slowtask": "0::1.5"})
    options = SinkOptions.parse(raw, SCHEMA)
    with pytest.raises(TransactionTimeoutError, match=r"kafka\.transaction\.timeout\.ms"):
        write_partition(options, iter(_rows("slow", 3)), f"t-{topic}", Marker.of_query("q", 0), partition=0)
    assert [r.value for r in read_topic(broker.bootstrap, topic)] == []


def test_a_stream_whose_markers_expired_refuses_to_rerun_a_batch(broker: Any) -> None:
    topic = f"expired-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    options = SinkOptions.parse(_raw_options(broker.bootstrap, topic, "per-task"), SCHEMA)
    prefix, query = f"e-{topic}", uuid.uuid4().hex
    for batch in (0, 1):
        for partition in (0, 1):
            write_partition(options, iter(_rows(f"b{batch}-{partition}")), prefix,
                            Marker.of_query(query, batch), partition=partition)
    # The query stays down longer than offsets.retention.minutes: its marker offsets expire
    # (deleting the groups is what expiry does to them).
    with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        errors = admin.delete_consumer_groups([marker_group(f"{prefix}-{p}") for p in (0, 1)])
        assert all(error is None for error in errors.values())
    with pytest.raises(MarkersExpiredError, match=r"offsets\.retention\.minutes"):
        write_partition(options, iter(_rows("b1-0")), prefix, Marker.of_query(query, 1), partition=0)
    assert len(read_topic(broker.bootstrap, topic)) == 20


def test_a_transaction_timeout_above_the_brokers_maximum_is_refused_naming_both(broker: Any) -> None:
    topic = f"too-long-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic)
    raw = _raw_options(broker.bootstrap, topic, "per-task", **{"kafka.transaction.timeout.ms": "999999999"})
    with pytest.raises(TransactionTimeoutError, match=r"transaction\.max\.timeout\.ms"):
        write_partition(SinkOptions.parse(raw, SCHEMA), iter(_rows("x", 1)), f"m-{topic}",
                        Marker.of_query("q", 0), partition=0)
