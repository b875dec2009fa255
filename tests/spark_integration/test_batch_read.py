"""Batch reads: exactly the records of the offset range, with Spark's Kafka source columns,
committed transactions' records in and aborted ones out (read_committed, the default)."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest

from sdk.sync import Producer
from spark_integration import FORMAT

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def _topic(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _write_transactions(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Three transactions: committed, aborted, committed. Returns (committed, aborted) values."""
    committed: list[bytes] = []
    aborted: list[bytes] = []
    producer = Producer(bootstrap_servers=bootstrap, transactional_id=f"txn-{topic}")
    try:
        for round_, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            values = [f"{round_}-{i}".encode() for i in range(5)]
            for i, value in enumerate(values):
                producer.send(topic, value, key=f"k{i}".encode(), headers=[("round", str(round_).encode())])
            if commit:
                producer.commit_transaction()
                committed.extend(values)
            else:
                producer.flush()
                producer.abort_transaction()
                aborted.extend(values)
    finally:
        producer.close()
    return committed, aborted


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_returns_committed_records_with_kafka_columns(spark: Any, broker: Any) -> None:
    topic = _topic("batch")
    committed, aborted = _write_transactions(broker.bootstrap, topic)
    frame = _read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert frame.columns == COLUMNS
    assert _read(spark, broker.bootstrap, subscribe=topic).columns == COLUMNS[:-1]  # as Spark: no headers
    rows = frame.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(committed)
    assert not {bytes(r.value) for r in rows} & set(aborted)
    first = min(rows, key=lambda r: r.offset)
    assert first.topic == topic and first.partition == 0 and first.offset == 0
    assert bytes(first.key) == b"k0" and first.timestampType == 0
    assert [(h.key, bytes(h.value)) for h in first.headers] == [("round", b"0")]
    now = datetime.datetime.now()
    assert abs((now - first.timestamp).total_seconds()) < 120
    offsets = [r.offset for r in sorted(rows, key=lambda r: r.offset)]
    assert offsets == sorted(set(offsets))


def test_batch_read_honours_offset_range_and_read_uncommitted(spark: Any, broker: Any) -> None:
    topic = _topic("range")
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(20):
            producer.send(topic, f"v{i}".encode())
        producer.flush()
    rows = _read(spark, broker.bootstrap, assign=json.dumps({topic: [0]}),
                 startingOffsets=json.dumps({topic: {"0": 5}}),
                 endingOffsets=json.dumps({topic: {"0": 12}}),
                 maxRecordsPerPartition="3").collect()
    assert sorted(r.offset for r in rows) == list(range(5, 12))
    assert {bytes(r.value) for r in rows} == {f"v{i}".encode() for i in range(5, 12)}

    aborted_topic = _topic("uncommitted")
    _committed, aborted = _write_transactions(broker.bootstrap, aborted_topic)
    everything = _read(spark, broker.bootstrap, subscribePattern=aborted_topic.replace("-", "."),
                       **{"isolation.level": "read_uncommitted"}).collect()
    assert set(aborted) <= {bytes(r.value) for r in everything}


def test_bad_options_fail_with_a_clear_error(spark: Any, broker: Any) -> None:
    with pytest.raises(Exception, match="subscribe"):
        _read(spark, broker.bootstrap).collect()
    with pytest.raises(Exception, match="no setting"):
        _read(spark, broker.bootstrap, subscribe="x", **{"kafka.no.such.thing": "1"}).collect()
