"""Spark's read options on a running session and broker: empty reads, timestamps, minPartitions,
deleted partitions under failOnDataLoss, the at-least-once sink with acks=1, and a streaming
query's progress showing the source's latest offsets."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient as OracleAdmin
from confluent_kafka.admin import NewTopic
from pyspark.sql.types import BinaryType, StructField, StructType

from sdk.sync import Producer
from spark_integration import FORMAT
from spark_integration.kafka_ranges import DataLossError
from spark_integration.ownership import Marker
from spark_integration.reader import KafkaStreamReader
from spark_integration.writer import SinkOptions, write_partition
from tests.spark_integration.helpers import read_topic


def _topic(name: str, bootstrap: str, partitions: int = 1) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    admin = OracleAdmin({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _produce_at(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i, timestamp in enumerate(timestamps):
            producer.send(topic, f"v{i}".encode(), partition=0, timestamp_ms=timestamp)
        producer.flush()


def test_an_empty_topic_or_range_reads_as_an_empty_frame(spark: Any, broker: Any) -> None:
    empty = _topic("empty", broker.bootstrap)
    assert _read(spark, broker.bootstrap, subscribe=empty).count() == 0
    _produce_at(broker.bootstrap, empty, [1000, 2000])
    same = json.dumps({empty: {"0": 1}})
    empty_range = _read(spark, broker.bootstrap, subscribe=empty, startingOffsets=same, endingOffsets=same)
    assert empty_range.count() == 0


def test_timestamps_and_min_partitions_choose_the_rows_and_the_split(spark: Any, broker: Any) -> None:
    topic = _topic("times", broker.bootstrap)
    _produce_at(broker.bootstrap, topic, [1000 * (i + 1) for i in range(10)])  # offset i at (i + 1) s
    rows = _read(spark, broker.bootstrap, subscribe=topic, startingTimestamp="3500",
                 endingTimestamp="8000").collect()
    assert sorted(r.offset for r in rows) == [3, 4, 5, 6]
    by_partition = _read(spark, broker.bootstrap, subscribe=topic,
                         startingOffsetsByTimestamp=json.dumps({topic: {"0": 9000}})).collect()
    assert sorted(r.offset for r in by_partition) == [8, 9]
    with pytest.raises(Exception, match="no record at or after timestamp"):
        _read(spark, broker.bootstrap, subscribe=topic, startingTimestamp="99000").collect()
    late = _read(spark, broker.bootstrap, subscribe=topic, startingTimestamp="99000",
                 startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0
    split = _read(spark, broker.bootstrap, subscribe=topic, minPartitions="4")
    assert split.rdd.getNumPartitions() >= 4 and split.count() == 10


@pytest.mark.slow
def test_a_deleted_topic_is_data_loss_unless_fail_on_data_loss_is_false(broker: Any) -> None:
    topic = _topic("deleted", broker.bootstrap)
    _produce_at(broker.bootstrap, topic, [1000, 2000])
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
               "startingOffsets": "earliest"}
    strict, lenient = KafkaStreamReader(options), KafkaStreamReader({**options, "failOnDataLoss": "false"})
    try:
        start = strict.initialOffset()
        assert lenient.initialOffset() == start == {topic: {"0": 0}}
        admin = OracleAdmin({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(30)
        with pytest.raises(DataLossError, match=f"{topic}-0 is gone"):
            strict.latestOffset(start, strict.getDefaultReadLimit())
        assert lenient.latestOffset(start, lenient.getDefaultReadLimit()) == {}
    finally:
        strict.stop()
        lenient.stop()


def test_the_at_least_once_sink_takes_acks_1(broker: Any) -> None:
    topic = _topic("acks", broker.bootstrap)
    options = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                                 "kafka.acks": "1", "delivery.guarantee": "at-least-once"},
                                StructType([StructField("value", BinaryType())]))
    written = write_partition(options, iter([(b"a",), (b"b",)]), "unused", Marker.of_write("w"), partition=0)
    assert written.records == 2
    assert sorted(r.value for r in read_topic(broker.bootstrap, topic)) == [b"a", b"b"]


@pytest.mark.slow
def test_streaming_progress_shows_the_sources_latest_offset(spark: Any, broker: Any, tmp_path: Any) -> None:
    topic = _topic("progress", broker.bootstrap)
    _produce_at(broker.bootstrap, topic, [1000 * (i + 1) for i in range(6)])
    query = (spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "4")
             .load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120) is not False
        progress = [p for p in query.recentProgress if p["sources"]]
        assert progress, "no progress reported"
        latest = [p["sources"][0].get("latestOffset") for p in progress]
        assert any(offset and json.loads(offset) == {topic: {"0": 6}} for offset in latest), latest
    finally:
        query.stop()
        deadline = time.monotonic() + 30
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.1)


def test_save_modes_are_sparks_kafka_sinks(spark: Any, broker: Any) -> None:
    topic = _topic("modes", broker.bootstrap)
    frame = spark.createDataFrame([(b"x",)], "value binary")

    def writer() -> Any:  # a new one each time: mode() changes the writer it is called on
        return (frame.write.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
                .option("topic", topic))

    with pytest.raises(Exception, match="Save mode Overwrite not allowed for Kafka"):
        writer().mode("overwrite").save()
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):  # PySpark's, documented
        writer().save()
    writer().mode("append").save()
    assert [r.value for r in read_topic(broker.bootstrap, topic)] == [b"x"]
