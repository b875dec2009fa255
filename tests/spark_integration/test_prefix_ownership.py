"""A ``transactional.id.prefix`` belongs to one streaming query (or to batch writes): a query with
a new checkpoint, a second running query, or a batch write that comes to a prefix someone else
owns is refused with an error naming what to change, and writes nothing. Run on the shared
session and broker, each query to the end of its input (``availableNow``) unless it must keep
running."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from spark_integration import FORMAT
from tests.spark_integration.helpers import finished, names, produce, read_topic, start_copy

RECORDS = 60


def _wait_for_records(bootstrap: str, topic: str, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(read_topic(bootstrap, topic)) < count:
        assert time.monotonic() < deadline, f"{topic} did not reach {count} records"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_new_checkpoint_with_a_used_prefix_is_refused_and_a_new_prefix_writes_everything(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    source, first_sink, second_sink, prefix = names("reuse")
    produce(broker.bootstrap, source, RECORDS)
    finished(start_copy(spark, broker.bootstrap, source, first_sink, tmp_path / "first", prefix))
    assert len(read_topic(broker.bootstrap, first_sink)) == RECORDS

    second = start_copy(spark, broker.bootstrap, source, second_sink, tmp_path / "second", prefix)
    with pytest.raises(StreamingQueryException, match=r"new 'transactional\.id\.prefix'") as refused:
        second.awaitTermination(120)
    assert "checkpoint" in str(refused.value)
    assert read_topic(broker.bootstrap, second_sink, "read_uncommitted") == []

    finished(start_copy(spark, broker.bootstrap, source, second_sink, tmp_path / "third", f"{prefix}-new"))
    assert sorted(r.value or b"" for r in read_topic(broker.bootstrap, second_sink)) == sorted(
        f"v{i}".encode() for i in range(RECORDS))


def test_a_second_running_query_with_the_same_prefix_fails_and_the_first_goes_on(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    source, first_sink, second_sink, prefix = names("twin")
    produce(broker.bootstrap, source, RECORDS)
    first = start_copy(spark, broker.bootstrap, source, first_sink, tmp_path / "first", prefix,
                       keep_running=True)
    try:
        _wait_for_records(broker.bootstrap, first_sink, RECORDS)
        second = start_copy(spark, broker.bootstrap, source, second_sink, tmp_path / "second", prefix,
                            keep_running=True)
        try:
            with pytest.raises(StreamingQueryException, match=r"transactional\.id\.prefix"):
                second.awaitTermination(60)
        finally:
            second.stop()
        assert read_topic(broker.bootstrap, second_sink, "read_uncommitted") == []
        # The first query was never fenced: it goes on copying, every record once.
        produce(broker.bootstrap, source, RECORDS)
        _wait_for_records(broker.bootstrap, first_sink, 2 * RECORDS)
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
    values = [r.value or b"" for r in read_topic(broker.bootstrap, first_sink)]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(RECORDS) for _ in range(2))


@pytest.mark.slow
def test_batch_writes_and_a_stream_never_share_a_prefix(spark: Any, broker: Any, tmp_path: Path) -> None:
    source, stream_sink, batch_sink, prefix = names("mixed")
    produce(broker.bootstrap, source, RECORDS)
    frame = spark.range(0, 20, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")

    def batch_write(prefix: str) -> None:
        (frame.write.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", batch_sink).option("transactional.id.prefix", prefix).mode("append").save())

    # Batch writes may share a prefix with each other: each writes all its rows.
    batch_write(prefix)
    batch_write(prefix)
    assert len(read_topic(broker.bootstrap, batch_sink)) == 40
    # A stream on the batch writes' prefix is refused (their markers are no batch ids of its own).
    refused = start_copy(spark, broker.bootstrap, source, stream_sink, tmp_path / "refused", prefix)
    with pytest.raises(StreamingQueryException, match=r"batch writes"):
        refused.awaitTermination(120)
    assert read_topic(broker.bootstrap, stream_sink, "read_uncommitted") == []

    # A batch write on a stream's prefix is refused (it would overwrite the stream's markers).
    stream_prefix = f"{prefix}-stream"
    finished(start_copy(spark, broker.bootstrap, source, stream_sink, tmp_path / "stream", stream_prefix))
    with pytest.raises(Exception, match=r"streaming query"):
        batch_write(stream_prefix)
    assert len(read_topic(broker.bootstrap, batch_sink, "read_uncommitted")) == 40
    assert len(read_topic(broker.bootstrap, stream_sink)) == RECORDS


def test_a_marker_that_names_no_owner_is_never_taken_as_ours(broker: Any) -> None:
    """A marker committed without an owner (as before markers named theirs) stops a stream's task
    and a batch write's alike, before either writes a row."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from sdk.client.cluster import TopicPartition
    from sdk.consumer.records import OffsetAndMetadata
    from sdk.sync import Producer
    from spark_integration.ownership import Marker, PrefixInUseError
    from spark_integration.writer import SinkOptions, marker_group, write_partition

    tag = uuid.uuid4().hex[:8]
    topic, prefix = f"ownerless-{tag}", f"ownerless-prefix-{tag}"
    options = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                                 "marker.topic": f"markers-{tag}"},
                                StructType([StructField("value", BinaryType())]))
    options.ensure_topics()
    with Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"{prefix}-0") as producer:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {TopicPartition(options.marker_topic, 0): OffsetAndMetadata(50, "")}, marker_group(f"{prefix}-0"))
        producer.commit_transaction()
    for marker in (Marker.of_query("a-query", 3), Marker.of_write("a-write")):
        with pytest.raises(PrefixInUseError, match="recorded no owner"):
            write_partition(options, iter([(b"row",)]), prefix, marker, partition=0)
    assert read_topic(broker.bootstrap, topic, "read_uncommitted") == []
