"""Reading a topic back the way a downstream application would (read_committed, to the end), producing
input, and the copy query the prefix ownership tests start (on our broker and on Apache Kafka)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from sdk.client.cluster import TopicPartition
from sdk.consumer.records import ConsumerRecord
from sdk.sync import Consumer, Producer
from spark_integration import FORMAT


def read_topic(bootstrap: str, topic: str, isolation_level: str = "read_committed") -> list[ConsumerRecord]:
    """Every record of ``topic`` (all partitions) visible at ``isolation_level``, in offset order."""
    with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level,
                  auto_offset_reset="earliest") as consumer:
        partitions = None
        deadline = time.monotonic() + 10
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(partitions or ())]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        consumer.seek_to_beginning(*tps)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.getmany(timeout_ms=300).values():
                records.extend(batch)
            assert time.monotonic() < deadline, f"could not read {topic} to its end {ends}"
    return records


def produce(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records ``k<i>``/``v<i>``, i = 0..count-1."""
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        producer.flush()


def start_copy(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, prefix: str,
               keep_running: bool = False) -> Any:
    """The copy query ``source`` -> ``sink`` under the ``transactional.id.prefix`` ``prefix``,
    started: to the end of the input (``availableNow``), or ``keep_running``."""
    writer = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value")
        .writeStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("transactional.id.prefix", prefix)
        .option("checkpointLocation", str(checkpoint))
    )
    trigger = {"processingTime": "200 milliseconds"} if keep_running else {"availableNow": True}
    return writer.trigger(**trigger).start()


def finished(query: Any) -> None:
    """Wait for ``query`` to end, without an error."""
    assert query.awaitTermination(120)
    assert query.exception() is None


def names(kind: str) -> tuple[str, str, str, str]:
    """Unique names: source topic, two sink topics, a transactional id prefix."""
    tag = uuid.uuid4().hex[:8]
    return f"{kind}-in-{tag}", f"{kind}-a-{tag}", f"{kind}-b-{tag}", f"{kind}-prefix-{tag}"
