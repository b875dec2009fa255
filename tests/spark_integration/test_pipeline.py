"""run_exactly_once (offsets and outputs in one transaction per input partition) and audit."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sdk.sync import Producer
from spark_integration import audit, run_exactly_once


def upper(key: bytes | None, value: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, (value or b"").upper())]


def _produce(bootstrap: str, topic: str, values: range) -> None:
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in values:
            producer.send(topic, f"v{i}".encode(), key=f"k{i % 40}".encode())
        producer.flush()


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def pipeline_broker(request: pytest.FixtureRequest) -> Any:
    """The session's reference broker, then Apache Kafka (the same pipeline, proven on both)."""
    return request.getfixturevalue("broker" if request.param == "reference_broker" else "apache_kafka")


def test_run_exactly_once_survives_a_failed_job_and_task_retries(spark: Any, pipeline_broker: Any) -> None:
    broker = pipeline_broker
    source, sink, group = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("p-in", "p-out", "p-group"))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(source, 2, 1)])[source].result(30)
    _produce(broker.bootstrap, source, range(2000))
    common = dict(bootstrap_servers=broker.bootstrap, input_topic=source, output_topic=sink, group_id=group,
                  transform=upper)

    # Partition 1's task fails after producing, in every attempt: the job fails, partition 0's
    # transaction (outputs + offsets) stays committed, partition 1's records are aborted.
    with pytest.raises(Exception, match="injected failure"):
        run_exactly_once(spark, **common, fail_before_commit=(1, True))
    partial = audit(broker.bootstrap, source, sink, upper)
    assert partial.duplicates == 0 and partial.unexpected == 0
    assert 0 < partial.missing < 2000

    # A new run (a restarted driver, nothing but the group's offsets to go on) finishes the job.
    result = run_exactly_once(spark, **common)
    assert result.consumed == 2000 - partial.output_records
    report = audit(broker.bootstrap, source, sink, upper)
    assert report.ok, report
    assert report.output_records == report.input_records == 2000

    # More input, in rounds of at most 150 records per partition, with a first-attempt failure.
    _produce(broker.bootstrap, source, range(2000, 2500))
    result = run_exactly_once(spark, **common, max_records=150, fail_before_commit=(0, False))
    assert result.consumed == 500 and result.rounds >= 2
    report = audit(broker.bootstrap, source, sink, upper)
    assert report.ok, report
    assert report.output_records == 2500


def test_audit_counts_missing_duplicate_unexpected_and_reordered(broker: Any) -> None:
    source, sink = f"a-in-{uuid.uuid4().hex[:8]}", f"a-out-{uuid.uuid4().hex[:8]}"
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for key, value in [(b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"c", b"1")]:
            producer.send(source, value, key=key)
        # a out of order, b duplicated, c missing, d unexpected
        for key, value in [(b"a", b"2"), (b"a", b"1"), (b"b", b"1"), (b"b", b"1"), (b"d", b"9")]:
            producer.send(sink, value, key=key)
        producer.flush()
    report = audit(broker.bootstrap, source, sink)
    assert (report.input_records, report.output_records, report.expected_records) == (4, 5, 4)
    assert (report.missing, report.duplicates, report.unexpected, report.out_of_order_keys) == (1, 1, 1, 1)
    assert not report.ok
