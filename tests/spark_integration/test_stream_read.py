"""Streaming reads: micro-batches of new offsets, maxOffsetsPerTrigger, Trigger.AvailableNow,
and a restart from the checkpoint that neither repeats nor skips records."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sdk.sync import Producer
from spark_integration import FORMAT


def _produce(bootstrap: str, topic: str, values: range) -> None:
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in values:
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        producer.flush()


def _run_available_now(spark: Any, bootstrap: str, topic: str, checkpoint: Path, table: str) -> list[int]:
    """Run the query to the offsets available now; the rows' input counts per micro-batch."""
    stream = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "7")
        .load()
    )
    query = (
        stream.selectExpr("CAST(value AS STRING) AS value", "offset")
        .writeStream.format("parquet")
        .option("path", str(checkpoint.parent / table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90)
    assert query.exception() is None
    return [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]


def test_stream_read_in_capped_micro_batches_and_resumes_from_checkpoint(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    topic = f"stream-{uuid.uuid4().hex[:8]}"
    _produce(broker.bootstrap, topic, range(20))
    checkpoint = tmp_path / "checkpoint"
    assert _run_available_now(spark, broker.bootstrap, topic, checkpoint, "out") == [7, 7, 6]

    _produce(broker.bootstrap, topic, range(20, 25))
    assert _run_available_now(spark, broker.bootstrap, topic, checkpoint, "out") == [5]

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.offset for r in rows) == list(range(25))
    assert {r.value for r in rows} == {f"v{i}" for i in range(25)}
