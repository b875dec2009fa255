"""A Spark driver process for the crash tests: runs the copy query until killed, or, with
``--available-now``, until it has caught up.

    python stream_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT [--available-now] [--kill-at-commit B]
        [--cluster WORKDIR] [--max-offsets N] [--fail-before-commit P:B] [--slow-task P:B:S]
        [--two-phase] [--kill-after-intent B]

``--cluster`` runs on a local-cluster with speculative execution on (``cluster.py``), its event
log under ``WORKDIR/events``; the other options are the sink's test hooks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

import spark_integration
from spark_integration import FORMAT

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.spark_integration.class_archive import driver_java_options


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--kill-at-commit", help="the micro-batch whose sink commit kills this driver")
    parser.add_argument("--cluster", type=Path, help="local-cluster with speculation; work dir")
    parser.add_argument("--max-offsets", default="400", help="maxOffsetsPerTrigger")
    parser.add_argument("--fail-before-commit", help="testing.failBeforeCommit: partition:batch")
    parser.add_argument("--slow-task", help="testing.slowTask: partition:batch:seconds")
    parser.add_argument("--two-phase", action="store_true", help="commit.mode=two-phase")
    parser.add_argument("--kill-after-intent", help="two-phase: batch whose intent kills the driver")
    args = parser.parse_args()
    if args.cluster is not None:
        from tests.spark_integration.cluster import speculative_session

        spark = speculative_session("stream_driver", args.cluster, args.cluster / "events")
    else:
        spark = (
            SparkSession.builder.master("local[2,3]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.extraJavaOptions", driver_java_options())
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    spark_integration.register(spark)
    writer = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
        .selectExpr("key", "CAST(concat(CAST(value AS STRING), '!') AS BINARY) AS value")
        .writeStream.format(FORMAT)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.transaction.timeout.ms", "10000")
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.kill_at_commit is not None:
        # Started as a session leader: this process's id is its process group's.
        writer = writer.option("testing.killDriverAtCommit", f"{args.kill_at_commit}:{os.getpgid(0)}")
    if args.two_phase:
        writer = writer.option("commit.mode", "two-phase").option("two.phase.intent.wait.ms", "500")
    if args.kill_after_intent is not None:
        writer = writer.option("testing.killDriverAfterIntent", f"{args.kill_after_intent}:{os.getpgid(0)}")
    if args.fail_before_commit:
        writer = writer.option("testing.failBeforeCommit", args.fail_before_commit)
    if args.slow_task:
        writer = writer.option("testing.slowTask", args.slow_task)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0 if query.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
