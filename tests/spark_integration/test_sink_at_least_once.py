"""The sink's at-least-once mode (``delivery.guarantee=at-least-once``), the benchmark's baseline:
every row written through an idempotent producer, no transaction."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spark_integration import FORMAT
from tests.spark_integration.helpers import read_topic


def test_at_least_once_writes_every_row_without_a_transaction(spark: Any, broker: Any) -> None:
    topic = f"alo-{uuid.uuid4().hex[:8]}"
    frame = spark.range(0, 300, numPartitions=3).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(id * 7 AS STRING) AS value")
    (frame.write.format(FORMAT)
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("delivery.guarantee", "at-least-once")
        .mode("append").save())
    committed = read_topic(broker.bootstrap, topic)
    assert sorted((int(r.key), int(r.value)) for r in committed) == [(i, i * 7) for i in range(300)]
    # No transaction: no control records, so read_uncommitted sees the same offsets.
    assert len(read_topic(broker.bootstrap, topic, "read_uncommitted")) == 300
    assert max(r.offset for r in committed) < 300

    with pytest.raises(Exception, match=r"delivery\.guarantee"):
        (frame.write.format(FORMAT)
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .option("delivery.guarantee", "at-most-once")
            .mode("append").save())
