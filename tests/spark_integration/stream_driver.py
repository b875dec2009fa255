"""A Spark driver process for the crash tests: runs the copy query until killed, or, with
``--available-now``, until it has caught up.

    python stream_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT [--available-now]
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession

import spark_integration
from spark_integration import FORMAT


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--kill-at-commit", help="the micro-batch whose sink commit kills this driver")
    args = parser.parse_args()
    spark = (
        SparkSession.builder.master("local[2,3]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_integration.register(spark)
    writer = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
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
