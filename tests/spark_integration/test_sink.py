"""The exactly-once sink: per-task transactions, fencing of failed attempts, re-run batches
skipped by their marker; checked by a read_committed consumer."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from spark_integration import FORMAT
from tests.spark_integration.helpers import produce, read_topic


def test_batch_write_commits_each_task_once_even_when_an_attempt_fails(spark: Any, broker: Any) -> None:
    topic = f"sink-{uuid.uuid4().hex[:8]}"
    frame = spark.range(0, 200, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(id * 10 AS STRING) AS value",
        "array(named_struct('key', 'source', 'value', CAST('range' AS BINARY))) AS headers")
    (frame.write.format(FORMAT)
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("testing.failBeforeCommit", "1")
        .mode("append").save())
    committed = read_topic(broker.bootstrap, topic)
    assert sorted(int(r.value) for r in committed) == [i * 10 for i in range(200)]
    expected = {(str(i).encode(), str(i * 10).encode()) for i in range(200)}
    assert {(r.key, r.value) for r in committed} == expected
    assert list(committed[0].headers) == [("source", b"range")]
    # The failed attempt's records did reach the log, in a transaction its retry aborted.
    everything = read_topic(broker.bootstrap, topic, "read_uncommitted")
    assert len(everything) == 300


def _copy_query(
    spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, hook: str | None
) -> dict[int, int]:
    """Run the copy to the offsets available now; input rows by micro-batch id."""
    stream = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .option("maxRecordsPerPartition", "500")
        .load()
    )
    writer = (
        stream.selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value")
        .writeStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if hook:
        writer = writer.option("testing.failBeforeCommit", hook)
    query = writer.start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    return {p["batchId"]: p["numInputRows"] for p in query.recentProgress if p["numInputRows"]}


def test_stream_copy_is_exactly_once_with_a_failed_task_and_a_rerun_batch(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    source, sink = f"eos-in-{uuid.uuid4().hex[:8]}", f"eos-out-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, source, 3000)
    checkpoint = tmp_path / "checkpoint"
    # Batch 1's second task fails after producing, before committing; its retry fences it.
    assert _copy_query(spark, broker.bootstrap, source, sink, checkpoint, hook="1:1") == {
        0: 1000, 1: 1000, 2: 1000}
    # As if the driver died after the sink committed batch 2 but before Spark logged it: Spark
    # re-runs batch 2 with the same offsets, and every task finds its marker and skips.
    for name in ("2", ".2.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    assert _copy_query(spark, broker.bootstrap, source, sink, checkpoint, hook=None) == {2: 1000}

    output = read_topic(broker.bootstrap, sink)
    counts = Counter(r.value for r in output)
    expected = {f"V{i}".encode() for i in range(3000)}
    assert [v for v, n in counts.items() if n > 1] == []
    assert expected - set(counts) == set()
    assert set(counts) == expected
    # The failed attempt's 500 records are in the log, aborted.
    assert len(read_topic(broker.bootstrap, sink, "read_uncommitted")) == 3500
    assert {r.key: r.value for r in output} == {f"k{i}".encode(): f"V{i}".encode() for i in range(3000)}
