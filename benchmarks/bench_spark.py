"""Spark pipeline throughput: the exactly-once sink, the same pipeline at-least-once, and Spark's
own JVM Kafka connector, on the same broker.

One broker per ``--brokers`` entry, 4 partitions per topic: ``reference`` (our reference broker,
``reference_broker.testing.BrokerProcess``) and ``kafka`` (Apache Kafka 4.1, ``tests.apache_kafka``'s
``KafkaCluster`` of one node, fetched with Maven the first time). One SparkSession (local[2]),
with Spark's Kafka connector (``spark-sql-kafka-0-10_2.13`` and its dependencies from the local
Maven repository, ``mvn dependency:get`` when missing; the PySpark version's release when it is
served, else the newest 4.x found: 4.2.0 runs under PySpark 4.3) on ``spark.jars``. An input topic
is filled with ``--messages`` 100-byte records; then, in turns, the same pipeline (read the whole
topic, upper-case every value, write to a fresh output topic) runs as:

- ``exactly-once``: the ``topicwright`` source and sink, one transaction per task with its batch
  marker (the sink's default);
- ``at-least-once``: the same with ``delivery.guarantee=at-least-once``, an idempotent producer,
  no transaction;
- ``two-phase``: exactly-once with ``commit.mode=two-phase`` (tasks prepare, the driver records
  the intent and completes every transaction: the whole batch visible at once); reference broker
  only (Kafka 4.1 has no KIP-939 two-phase commit);
- ``jvm``: Spark's own connector, ``format("kafka")`` in and out (at-least-once: it has no
  transactional sink).

``--mode batch`` runs it as one batch job (``spark.read`` ... ``df.write``); ``--mode stream`` as a
streaming query with Trigger.AvailableNow in micro-batches of ``--batch`` offsets, so every
micro-batch pays its transactions. The clock runs from the job's start until it returns; every
output is then counted with a read_committed batch read (not timed). The median of ``--runs``
runs is reported, with the ratios to the at-least-once pipeline and to the JVM connector.

The JVM runs with its default JIT (C1 and C2), unlike the test suite's quick-start session: the
JVM connector's work is all compiled Java.

    python benchmarks/bench_spark.py                          # 200k messages, 3 runs, batch
    python benchmarks/bench_spark.py --messages 100000 --runs 3 --mode batch,stream --brokers reference,kafka
    python benchmarks/bench_spark.py --variants exactly-once --profile /tmp/prof  # executors under cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VALUE = b"v" * 100
PARTITIONS = 4
VARIANTS = ["exactly-once", "at-least-once", "two-phase", "jvm"]
#: The sink options of each topicwright pipeline variant.
SINK_OPTIONS = {
    "exactly-once": {"delivery.guarantee": "exactly-once"},
    "at-least-once": {"delivery.guarantee": "at-least-once"},
    "two-phase": {"delivery.guarantee": "exactly-once", "commit.mode": "two-phase"},
}
MODES = ["batch", "stream"]
BROKERS = ["reference", "kafka"]
#: Variants a broker cannot run: Kafka 4.1 has no two-phase commit (KIP-939).
UNSUPPORTED = {("kafka", "two-phase")}
#: Spark's Kafka connector and the dependencies it needs beside PySpark's own jars.
CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")
CONNECTOR_DEPENDENCIES = ("kafka-clients", "commons-pool2", "spark-token-provider-kafka-0-10_2.13")
MAVEN_REPOSITORY = Path.home() / ".m2" / "repository"
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _artifact_dir(group: str, artifact: str) -> Path:
    return MAVEN_REPOSITORY.joinpath(*group.split("."), artifact)


def _fetch(group: str, artifact: str, version: str) -> bool:
    """``mvn dependency:get`` of one artifact (jar and POM) into the local repository; whether its
    jar is there now. Not transitive: the connector's POM also names test jars Maven Central does
    not serve, which fail a transitive fetch that got every jar needed; the dependencies used are
    fetched one by one (``connector_jars``)."""
    for packaging in ("pom", "jar"):
        subprocess.run(
            ["mvn", "-q", "-B", "dependency:get",
             f"-Dartifact={group}:{artifact}:{version}:{packaging}", "-Dtransitive=false"],
            capture_output=True, text=True, timeout=600)
    home = _artifact_dir(group, artifact) / version
    return all((home / f"{artifact}-{version}.{ext}").exists() for ext in ("pom", "jar"))


def connector_jars() -> tuple[str, list[str]]:
    """(version, jars) of Spark's Kafka connector: the installed PySpark's release if Maven has it
    (or can fetch it), else the newest 4.x release in the local repository; with the
    ``kafka-clients``, ``commons-pool2`` and token provider versions its POM names."""
    import pyspark

    group, artifact = CONNECTOR
    wanted = pyspark.__version__
    home = _artifact_dir(group, artifact)
    if not (home / wanted / f"{artifact}-{wanted}.jar").exists():
        _fetch(group, artifact, wanted)
    found = sorted((p.parent.name for p in home.glob(f"4.*/{artifact}-4.*.jar")),
                   key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))
    if wanted in found:
        version = wanted
    elif found:
        version = found[-1]
    elif _fetch(group, artifact, "4.2.0"):
        version = "4.2.0"
    else:
        raise RuntimeError(f"Spark's Kafka connector {group}:{artifact} is neither in {MAVEN_REPOSITORY} "
                           "nor fetchable with mvn")
    pom = (home / version / f"{artifact}-{version}.pom").read_text()
    jars = [str(home / version / f"{artifact}-{version}.jar")]
    for dependency in re.findall(r"<dependency>(.*?)</dependency>", pom, re.S):
        name = re.search(r"<artifactId>(.*?)</artifactId>", dependency)
        if name is None or name.group(1) not in CONNECTOR_DEPENDENCIES:
            continue
        dep_group = re.search(r"<groupId>(.*?)</groupId>", dependency)
        dep_version = re.search(r"<version>(.*?)</version>", dependency)
        if dep_group is None or dep_version is None or "$" in dep_version.group(1):
            raise RuntimeError(f"cannot read the version of {name.group(1)} in {artifact}-{version}.pom")
        dep_home = _artifact_dir(dep_group.group(1), name.group(1)) / dep_version.group(1)
        jar = dep_home / f"{name.group(1)}-{dep_version.group(1)}.jar"
        if not jar.exists():
            _fetch(dep_group.group(1), name.group(1), dep_version.group(1))
        if not jar.exists():
            raise RuntimeError(f"{jar} is missing and mvn could not fetch it")
        jars.append(str(jar))
    return version, list(dict.fromkeys(jars))  # the POM may name a dependency twice (jar, test-jar)


def start_spark(workdir: Path, jars: list[str], profile: bool) -> Any:
    """A local[2] session with the test suite's quiet logging, the default JIT, and ``jars``;
    with ``profile``, PySpark's profiler over the data source's Python workers."""
    from pyspark.sql import SparkSession

    import spark_integration

    log_config = workdir / "log4j2.properties"
    log_config.write_text(QUIET_LOG4J2)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
        .config("spark.jars", ",".join(jars))
    )
    if profile:
        builder = builder.config("spark.sql.pyspark.dataSource.profiler", "perf")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    spark_integration.register(session)
    return session


@contextlib.contextmanager
def running_broker(kind: str, workdir: Path) -> Iterator[str]:
    """A broker of ``kind`` with 4 partitions per new topic: its bootstrap address."""
    if kind == "reference":
        from reference_broker.testing import BrokerProcess

        with BrokerProcess(config={"num.partitions": PARTITIONS}, log_level="WARNING") as broker:
            yield broker.bootstrap
    else:
        from tests.apache_kafka import KafkaCluster

        properties: dict[str, Any] = {"num.partitions": PARTITIONS}
        with KafkaCluster(workdir / "apache-kafka", 1, **properties) as cluster:
            yield cluster.bootstrap


async def fill(bootstrap: str, topic: str, n: int) -> None:
    """``n`` 100-byte records without keys, spread over the topic's partitions."""
    from sdk import Producer

    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        chunk = [(None, VALUE)] * 10000
        futures = [await producer.send_many(topic, chunk[: n - offset]) for offset in range(0, n, len(chunk))]
        await asyncio.gather(*futures)


def source(spark: Any, bootstrap: str, topic: str, streaming: bool, batch: int, variant: str) -> Any:
    reader = spark.readStream if streaming else spark.read
    reader = (reader.format("kafka" if variant == "jvm" else "topicwright")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(batch))
    return reader.load().selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value")


def run_pipeline(spark: Any, bootstrap: str, topic: str, variant: str, mode: str, batch: int,
                 workdir: Path) -> tuple[str, float]:
    """One pipeline run into a fresh output topic: (output topic, seconds)."""
    output = f"bench-out-{uuid.uuid4().hex[:8]}"
    sink_format = "kafka" if variant == "jvm" else "topicwright"
    sink_options = SINK_OPTIONS.get(variant, {})
    start = time.perf_counter()
    if mode == "batch":
        (source(spark, bootstrap, topic, False, batch, variant).write.format(sink_format)
            .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
            .options(**sink_options).mode("append").save())
    else:
        query = (source(spark, bootstrap, topic, True, batch, variant).writeStream.format(sink_format)
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", output)
                 .options(**sink_options)
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


def measure_broker(spark: Any, broker: str, bootstrap: str, args: argparse.Namespace, modes: list[str],
                   variants: list[str], workdir: Path) -> dict[tuple[str, str], list[float]]:
    """Every (mode, variant) ``args.runs`` times on one broker, in turns: records/s of each run."""
    variants = [v for v in variants if (broker, v) not in UNSUPPORTED]
    rates: dict[tuple[str, str], list[float]] = {(m, v): [] for m in modes for v in variants}
    topic = f"bench-in-{uuid.uuid4().hex[:8]}"
    asyncio.run(fill(bootstrap, topic, args.messages))
    if args.warm_up:
        # Untimed: JVM code paths, Python workers and their imports, the broker's coordinators.
        warm_up = f"bench-warm-up-{uuid.uuid4().hex[:8]}"
        asyncio.run(fill(bootstrap, warm_up, args.warm_up))
        for mode in modes:
            for variant in variants:
                run_pipeline(spark, bootstrap, warm_up, variant, mode, args.batch, workdir)
    if args.profile:
        spark.profile.clear()
    for run in range(args.runs):
        for mode in modes:
            # Alternate which variant goes first, so none always runs on a warmer JVM.
            order = variants if run % 2 == 0 else variants[::-1]
            for variant in order:
                output, seconds = run_pipeline(spark, bootstrap, topic, variant, mode, args.batch, workdir)
                written = count_output(spark, bootstrap, output)
                exact = variant in ("exactly-once", "two-phase")
                if written < args.messages or (exact and written != args.messages):
                    raise RuntimeError(f"{broker} {mode} {variant}: {written} of {args.messages} out")
                rates[(mode, variant)].append(args.messages / seconds)
                print(f"  {broker:<9} run {run + 1} {mode:<6} {variant:<14} "
                      f"{args.messages / seconds:>10,.0f} records/s ({seconds:.1f} s)", file=sys.stderr)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mode", default="batch", help="batch, stream or batch,stream")
    parser.add_argument("--brokers", default="reference", help="reference, kafka or reference,kafka")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {','.join(VARIANTS)}")
    parser.add_argument("--batch", type=int, default=50_000, help="offsets per micro-batch (stream mode)")
    parser.add_argument("--warm-up", type=int, default=2000,
                        help="records of the untimed warm-up run of each pipeline (0: none)")
    parser.add_argument("--profile", metavar="DIR",
                        help="profile the Python workers of the timed runs (PySpark's perf profiler); "
                             "the top functions to stdout, pstats dumps into DIR")
    args = parser.parse_args()
    modes, brokers, variants = args.mode.split(","), args.brokers.split(","), args.variants.split(",")
    for given, known, option in ((modes, MODES, "--mode"), (brokers, BROKERS, "--brokers"),
                                 (variants, VARIANTS, "--variants")):
        if not given or any(value not in known for value in given):
            parser.error(f"{option} takes some of {', '.join(known)}")

    version, jars = connector_jars() if "jvm" in variants else ("", [])
    rates: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        spark = start_spark(workdir, jars, bool(args.profile))
        try:
            for broker in brokers:
                with running_broker(broker, workdir) as bootstrap:
                    found = measure_broker(spark, broker, bootstrap, args, modes, variants, workdir)
                rates.update({(broker, mode, variant): r for (mode, variant), r in found.items()})
            if args.profile:
                spark.profile.show(type="perf")
                spark.profile.dump(args.profile)
        finally:
            spark.stop()

    connector = f"; jvm: spark-sql-kafka-0-10_2.13 {version}" if version else ""
    print(f"\n{args.messages:,} records of 100 bytes in {PARTITIONS} partitions x {args.runs} runs, "
          "local[2], read -> upper(value) -> write; stream mode: AvailableNow, "
          f"{args.batch:,} offsets per micro-batch{connector}. Median records/s; "
          "/ALO: ratio to at-least-once, /JVM: ratio to the JVM connector.\n")
    print(f"| {'broker':<9} | {'mode':<6} | {'pipeline':<14} | {'rec/s':>9} | {'/ALO':>5} | {'/JVM':>5} |")
    print(f"|{'-' * 11}|{'-' * 8}|{'-' * 16}|{'-' * 11}|{'-' * 7}|{'-' * 7}|")
    for broker in brokers:
        for mode in modes:
            medians = {v: statistics.median(rates[(broker, mode, v)])
                       for v in variants if (broker, mode, v) in rates}
            for variant, median in medians.items():
                alo = f"{median / medians['at-least-once']:.2f}" if "at-least-once" in medians else "-"
                jvm = f"{median / medians['jvm']:.2f}" if "jvm" in medians else "-"
                print(f"| {broker:<9} | {mode:<6} | {variant:<14} | {median:>9,.0f} | {alo:>5} | {jvm:>5} |")


if __name__ == "__main__":
    main()
