"""Two attempts of the same sink task at once (a speculative copy): the later one fences the
earlier, whose commit fails; the rows are committed once. Runs the task code directly (no Spark
task context: partition 0), with the earlier attempt held mid-write while the later one runs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql.types import BinaryType, StructField, StructType

from sdk.errors import KafkaError
from spark_integration.ownership import Marker
from spark_integration.writer import SinkOptions, write_partition
from tests.spark_integration.helpers import read_topic

SCHEMA = StructType([StructField("value", BinaryType())])
BATCH_0 = Marker.of_query("fencing-test-query", 0)


def test_a_speculative_attempt_fences_the_first_and_rows_commit_once(broker: Any) -> None:
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    options = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                                 "marker.topic": f"markers-{topic}"}, SCHEMA)
    rows = [(f"r{i}".encode(),) for i in range(50)]
    halfway, resume = threading.Event(), threading.Event()

    def slow_rows() -> Iterator[tuple[bytes]]:
        for i, row in enumerate(rows):
            if i == 25:
                halfway.set()
                resume.wait(30)
            yield row

    outcome: dict[str, Any] = {}

    def first_attempt() -> None:
        try:
            outcome["first"] = write_partition(options, slow_rows(), f"q-{topic}", BATCH_0)
        except BaseException as exc:
            outcome["first"] = exc

    thread = threading.Thread(target=first_attempt)
    thread.start()
    assert halfway.wait(30)
    second = write_partition(options, iter(rows), f"q-{topic}", BATCH_0)
    resume.set()
    thread.join(60)
    assert second.records == 50 and not second.skipped
    # Fenced: its produce got INVALID_PRODUCER_EPOCH (abortable, as in Java since KIP-588), or
    # its EndTxn got PRODUCER_FENCED.
    assert isinstance(outcome["first"], KafkaError), outcome["first"]
    assert sorted(r.value for r in read_topic(broker.bootstrap, topic)) == sorted(r[0] for r in rows)

    # A third attempt of the same batch finds the marker and writes nothing.
    third = write_partition(options, iter(rows), f"q-{topic}", BATCH_0)
    assert third.skipped and third.records == 0
    assert len(read_topic(broker.bootstrap, topic)) == 50
