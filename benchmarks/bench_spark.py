"""Spark pipeline throughput: the exactly-once sink against the same pipeline at-least-once.

One reference broker (``reference_broker.testing.BrokerProcess``, 4 partitions per topic) and one
SparkSession (local[2], the test suite's quiet settings). An input topic is filled with
``--messages`` 100-byte records; then, in turns, the same pipeline (read the whole topic with the
``spark_integration`` source, upper-case every value, write to a fresh output topic) runs with
the sink's two delivery guarantees:

- ``exactly-once``: one transaction per task, with its batch marker (the sink's default);
- ``at-least-once``: ``delivery.guarantee=at-least-once``, an idempotent producer, no transaction;
- ``two-phase``: exactly-once with ``commit.mode=two-phase`` (tasks prepare, the driver records
  the intent and completes every transaction: the whole batch visible at once); reported in a
  second table, two-phase / at-least-once.

``--mode batch`` runs it as one batch job (``spark.read`` ... ``df.write``); ``--mode stream`` as a
streaming query with Trigger.AvailableNow in micro-batches of ``--batch`` offsets, so every
micro-batch pays its transactions. The clock runs from the job's start until it returns; every
output is then counted with a read_committed batch read (not timed). The median of ``--runs``
runs is reported, with the ratio exactly-once / at-least-once (the target is 0.8 or better).

    python benchmarks/bench_spark.py                          # 200k messages, 3 runs, batch
    python benchmarks/bench_spark.py --messages 20000 --runs 1 --mode batch,stream
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VALUE = b"v" * 100
PARTITIONS = 4
GUARANTEES = ["exactly-once", "at-least-once", "two-phase"]
#: The sink options of each pipeline variant.
SINK_OPTIONS = {
    "exactly-once": {"delivery.guarantee": "exactly-once"},
    "at-least-once": {"delivery.guarantee": "at-least-once"},
    "two-phase": {"delivery.guarantee": "exactly-once", "commit.mode": "two-phase"},
}
MODES = ["batch", "stream"]
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def start_spark(workdir: Path) -> Any:
    """A local[2] session started as the Spark tests start theirs (tests/spark_integration/conftest.py)."""
    from pyspark.sql import SparkSession

    import spark_integration

    log_config = workdir / "log4j2.properties"
    log_config.write_text(QUIET_LOG4J2)
    java_options = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.configurationFile=file:{log_config}"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", java_options)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_integration.register(session)
    return session


async def fill(bootstrap: str, topic: str, n: int) -> None:
    """``n`` 100-byte records without keys, spread over the topic's partitions."""
    from sdk import Producer

    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        chunk = [(None, VALUE)] * 10000
        futures = [await producer.send_many(topic, chunk[: n - offset]) for offset in range(0, n, len(chunk))]
        await asyncio.gather(*futures)


def source(spark: Any, bootstrap: str, topic: str, streaming: bool, batch: int) -> Any:
    reader = spark.readStream if streaming else spark.read
    reader = (reader.format("topicwright").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(batch))
    return reader.load().selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value")


def run_pipeline(spark: Any, bootstrap: str, topic: str, guarantee: str, mode: str, batch: int,
                 workdir: Path) -> tuple[str, float]:
    """One pipeline run into a fresh output topic: (output topic, seconds)."""
    output = f"bench-out-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    if mode == "batch":
        (source(spark, bootstrap, topic, False, batch).write.format("topicwright")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
            .options(**SINK_OPTIONS[guarantee]).mode("append").save())
    else:
        query = (source(spark, bootstrap, topic, True, batch).writeStream.format("topicwright")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
                 .options(**SINK_OPTIONS[guarantee])
                 .option("checkpointLocation", str(workdir / output))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    return output, time.perf_counter() - start


def count_output(spark: Any, bootstrap: str, topic: str) -> int:
    """Records of ``topic`` visible to a read_committed reader."""
    return (spark.read.format("topicwright").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load().count())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mode", default="batch", help="batch, stream or batch,stream")
    parser.add_argument("--batch", type=int, default=50_000, help="offsets per micro-batch (stream mode)")
    parser.add_argument("--warm-up", type=int, default=2000,
                        help="records of the untimed warm-up run of each pipeline (0: none)")
    args = parser.parse_args()
    modes = args.mode.split(",")
    if any(mode not in MODES for mode in modes):
        parser.error(f"--mode takes {', '.join(MODES)}")

    from reference_broker.testing import BrokerProcess

    rates: dict[tuple[str, str], list[float]] = {(m, g): [] for m in modes for g in GUARANTEES}
    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(config={"num.partitions": PARTITIONS}, log_level="WARNING") as broker:
        workdir = Path(tmp)
        topic = f"bench-in-{uuid.uuid4().hex[:8]}"
        asyncio.run(fill(broker.bootstrap, topic, args.messages))
        spark = start_spark(workdir)
        try:
            if args.warm_up:
                # Untimed: JVM code paths, Python workers and their imports, the broker's coordinators.
                warm_up = f"bench-warm-up-{uuid.uuid4().hex[:8]}"
                asyncio.run(fill(broker.bootstrap, warm_up, args.warm_up))
                for mode in modes:
                    for guarantee in GUARANTEES:
                        run_pipeline(spark, broker.bootstrap, warm_up, guarantee, mode, args.batch, workdir)
            for run in range(args.runs):
                for mode in modes:
                    # Alternate which guarantee goes first, so neither always runs on a warmer JVM.
                    order = GUARANTEES if run % 2 == 0 else GUARANTEES[::-1]
                    for guarantee in order:
                        output, seconds = run_pipeline(spark, broker.bootstrap, topic, guarantee, mode,
                                                       args.batch, workdir)
                        written = count_output(spark, broker.bootstrap, output)
                        exact = guarantee != "at-least-once"
                        if written < args.messages or (exact and written != args.messages):
                            raise RuntimeError(f"{mode} {guarantee}: {written} of {args.messages} out")
                        rates[(mode, guarantee)].append(args.messages / seconds)
                        print(f"  run {run + 1} {mode:<6} {guarantee:<14} {args.messages / seconds:>10,.0f} "
                              f"records/s ({seconds:.1f} s)", file=sys.stderr)
        finally:
            spark.stop()

    print(f"\n{args.messages:,} records of 100 bytes in {PARTITIONS} partitions x {args.runs} runs, "
          "local[2], read -> upper(value) -> write; stream mode: AvailableNow, "
          f"{args.batch:,} offsets per micro-batch. Median records/s; "
          "ratio: exactly-once / at-least-once (target >= 0.80).\n")
    print(f"| {'mode':<6} | {'exactly-once rec/s':>18} | {'at-least-once rec/s':>19} | {'EOS/ALO':>7} |")
    print(f"|{'-' * 8}|{'-' * 20}|{'-' * 21}|{'-' * 9}|")
    for mode in modes:
        eos = statistics.median(rates[(mode, "exactly-once")])
        alo = statistics.median(rates[(mode, "at-least-once")])
        print(f"| {mode:<6} | {eos:>18,.0f} | {alo:>19,.0f} | {eos / alo:>7.2f} |")
    print(f"\n| {'mode':<6} | {'two-phase rec/s':>18} | {'2PC/ALO':>7} |")
    print(f"|{'-' * 8}|{'-' * 20}|{'-' * 9}|")
    for mode in modes:
        two_phase = statistics.median(rates[(mode, "two-phase")])
        alo = statistics.median(rates[(mode, "at-least-once")])
        print(f"| {mode:<6} | {two_phase:>18,.0f} | {two_phase / alo:>7.2f} |")


if __name__ == "__main__":
    main()
