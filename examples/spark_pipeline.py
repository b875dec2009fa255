"""A streaming Spark pipeline copying a topic exactly once, on the embedded reference broker.

1. Starts the reference broker (``python -m reference_broker``, two partitions per topic) and a
   local Spark session, and writes ``--records`` records to ``orders``.
2. Runs a streaming query (``spark_integration`` source and exactly-once sink) that upper-cases
   every value into ``orders-upper``, in micro-batches of at most 1000 offsets; one task fails
   after producing its records and before committing them, and Spark retries it.
3. Restarts the broker, writes as many records again, and runs the query again from its
   checkpoint.
4. Audits the output with a read_committed consumer: every input record's output exactly once,
   in order per key.

    python examples/spark_pipeline.py --records 5000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import spark_integration
from reference_broker.testing import BrokerProcess
from sdk.sync import Producer
from spark_integration import FORMAT, AuditReport, audit

SOURCE, SINK = "orders", "orders-upper"


def upper(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    """The pipeline's transform, as the audit applies it to the input."""
    return [(key, (value or b"").upper())]


def produce(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(first, first + count):
            producer.send(SOURCE, f"order-{i}".encode(), key=f"customer-{i % 97}".encode())
        producer.flush()


def run_query(spark: Any, bootstrap: str, checkpoint: Path, fail_task: str | None = None) -> int:
    """Run the pipeline until it has caught up (Trigger.AvailableNow); the micro-batches run."""
    writer = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SOURCE)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value")
        .writeStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", SINK)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if fail_task:
        writer = writer.option("testing.failBeforeCommit", fail_task)
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(1 for progress in query.recentProgress if progress["numInputRows"])


def demo(spark: Any, records: int, workdir: Path) -> AuditReport:
    """The whole demo on an existing session; the audit of the output."""
    spark_integration.register(spark)
    with BrokerProcess(config={"num.partitions": 2}) as broker:
        print(f"reference broker listening on {broker.bootstrap}")
        produce(broker.bootstrap, 0, records)
        batches = run_query(spark, broker.bootstrap, workdir / "checkpoint", fail_task="1:0")
        print(f"copied {records} records in {batches} micro-batches (batch 0's task 1 failed once)")
        broker.restart()
        print("broker restarted")
        produce(broker.bootstrap, records, records)
        batches = run_query(spark, broker.bootstrap, workdir / "checkpoint")
        print(f"copied {records} more records in {batches} micro-batches, from the checkpoint")
        report = audit(broker.bootstrap, SOURCE, SINK, upper)
    print(report)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description="exactly-once Spark pipeline on the reference broker")
    parser.add_argument("--records", type=int, default=5000)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2,3]").appName("spark_pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory() as workdir:
            report = demo(spark, args.records, Path(workdir))
    finally:
        spark.stop()
    print("exactly once OK" if report.ok else "exactly once FAILED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
