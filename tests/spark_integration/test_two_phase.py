"""``commit.mode=two-phase``: the sink's task and driver functions called directly (two sink
partitions of one batch), and a batch write on the shared session, checked by read_committed and
read_uncommitted readers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from sdk.producer.prepared_state import PreparedTxnState
from spark_integration import FORMAT
from spark_integration.options import OptionError
from spark_integration.ownership import Marker
from spark_integration.two_phase import (
    CommitLostError,
    TwoPhaseCommitUnavailableError,
    complete_recorded,
    newest_intent,
    record_intent,
)
from spark_integration.writer import SinkCommit, SinkOptions, commit_two_phase, write_partition
from tests.spark_integration.helpers import read_topic

SCHEMA = StructType([StructField("value", BinaryType())])


def _options(bootstrap: str, topic: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "commit.mode": "two-phase", "marker.topic": f"markers-{topic}",
                              "intent.topic": f"intents-{topic}", "two.phase.intent.wait.ms": "300",
                              **extra}, SCHEMA)


def _rows(batch: int, partition: int, n: int = 20) -> list[tuple[bytes]]:
    return [(f"b{batch}-p{partition}-{i}".encode(),) for i in range(n)]


def _values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return sorted(r.value for r in read_topic(bootstrap, topic, isolation))


def _batch(batch: int) -> Marker:
    return Marker.of_query("two-phase-test-query", batch)


def _write_batch(options: SinkOptions, prefix: str, batch: int) -> list[SinkCommit]:
    return [write_partition(options, iter(_rows(batch, p)), prefix, _batch(batch), partition=p)
            for p in (0, 1)]


def test_a_prepared_batch_is_invisible_until_the_driver_commits_it(broker: Any) -> None:
    topic = f"tp-{uuid.uuid4().hex[:8]}"
    options, prefix = _options(broker.bootstrap, topic), f"q-{topic}"
    messages = _write_batch(options, prefix, 0)
    assert all(m.state and PreparedTxnState.parse(m.state).has_transaction for m in messages)
    assert [m.transactional_id for m in messages] == [f"{prefix}-0", f"{prefix}-1"]
    assert _values(broker.bootstrap, topic) == []
    assert len(_values(broker.bootstrap, topic, "read_uncommitted")) == 40

    commit_two_phase(options, [*messages, None], 0)
    assert _values(broker.bootstrap, topic) == sorted(v for p in (0, 1) for (v,) in _rows(0, p))
    # Spark calls commit again for a re-run batch: the transactions are found committed.
    commit_two_phase(options, messages, 0)
    assert len(_values(broker.bootstrap, topic)) == 40


def test_recovery_rolls_a_recorded_intent_forward_and_aborts_a_stale_prepare(broker: Any) -> None:
    topic = f"tr-{uuid.uuid4().hex[:8]}"
    options, prefix = _options(broker.bootstrap, topic), f"q-{topic}"
    commit_two_phase(options, _write_batch(options, prefix, 0), 0)

    # Batch 1: both tasks prepared, the driver recorded the intent and died before completing.
    recorded = _write_batch(options, prefix, 1)
    record_intent(options.producer_settings, options.intent_topic, prefix, _batch(1).record(),
                  {m.transactional_id: m.state for m in recorded if m.transactional_id and m.state})
    assert len(_values(broker.bootstrap, topic)) == 40
    # Spark re-runs batch 1: each task rolls its recorded transaction forward, then skips.
    rerun = _write_batch(options, prefix, 1)
    assert all(m.skipped and m.state is None for m in rerun)
    commit_two_phase(options, rerun, 1)
    assert len(_values(broker.bootstrap, topic)) == 80
    # The driver of the dead run comes back to its intent: already committed by the tasks.
    for m in recorded:
        assert m.transactional_id and m.state
        outcome = complete_recorded(options.producer_settings, m.transactional_id, m.state, lambda: True)
        assert outcome == "already committed"

    # Batch 2: prepared, then the driver died before recording any intent: stale.
    stale = _write_batch(options, prefix, 2)
    rerun = _write_batch(options, prefix, 2)
    assert [m.records for m in rerun] == [20, 20] and rerun[0].state != stale[0].state
    commit_two_phase(options, rerun, 2)
    expected = sorted(v for b in (0, 1, 2) for p in (0, 1) for (v,) in _rows(b, p))
    assert _values(broker.bootstrap, topic) == expected
    assert len(_values(broker.bootstrap, topic, "read_uncommitted")) == len(expected) + 40  # stale: aborted

    # Batch 3: partition 0's reported transaction was aborted by a later attempt (which prepared
    # its own, never reported): the driver commits nothing of the batch, leaves nothing open.
    reported = _write_batch(options, prefix, 3)
    write_partition(options, iter(_rows(3, 0)), prefix, _batch(3), partition=0)
    with pytest.raises(CommitLostError):
        commit_two_phase(options, reported, 3)
    assert _values(broker.bootstrap, topic) == expected
    rerun = _write_batch(options, prefix, 3)
    assert [m.records for m in rerun] == [20, 20]
    commit_two_phase(options, rerun, 3)
    assert len(_values(broker.bootstrap, topic)) == len(expected) + 40


def test_recovery_finds_a_query_intent_behind_many_of_other_queries(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery reads the prefix's partition backwards until it meets one of the prefix's intents,
    however many intents of other queries came after it (it read a fixed last 2000 before)."""
    topic = f"ti-{uuid.uuid4().hex[:8]}"
    options = _options(broker.bootstrap, topic)
    monkeypatch.setattr("spark_integration.two_phase.INTENT_LOOKBACK", 3)
    settings, intents = options.producer_settings, options.intent_topic
    record_intent(settings, intents, "q-old", {"batch": 0}, {"q-old-0": "7:0"})
    record_intent(settings, intents, "q-old", {"batch": 1}, {"q-old-0": "7:1"})
    for i in range(10):  # more than three windows of other queries' intents
        record_intent(settings, intents, "q-busy", {"batch": i}, {"q-busy-0": f"8:{i}"})
    consumer_settings = options.consumer_settings
    found = newest_intent(consumer_settings, intents, "q-old")
    assert found is not None and (found["batch"], found["transactions"]) == (1, {"q-old-0": "7:1"})
    assert newest_intent(consumer_settings, intents, "q-busy")["batch"] == 9  # type: ignore[index]
    assert newest_intent(consumer_settings, intents, "q-never") is None


def test_a_broker_without_two_phase_commit_gets_a_clear_error(broker_factory: Any) -> None:
    broker = broker_factory({"transaction.two.phase.commit.enable": False})
    options = _options(broker.bootstrap, f"t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(TwoPhaseCommitUnavailableError, match=r"transaction\.two\.phase\.commit\.enable=true"):
        write_partition(options, iter(_rows(0, 0)), "q", _batch(0), partition=0)


def test_two_phase_options_are_checked(broker: Any) -> None:
    with pytest.raises(OptionError, match=r"commit\.mode"):
        _options(broker.bootstrap, "t", **{"commit.mode": "eventually"})
    with pytest.raises(OptionError, match=r"delivery\.guarantee"):
        _options(broker.bootstrap, "t", **{"delivery.guarantee": "at-least-once"})


def test_two_phase_batch_write_with_a_failed_attempt_commits_every_row_once(spark: Any, broker: Any) -> None:
    topic = f"tw-{uuid.uuid4().hex[:8]}"
    frame = spark.range(0, 200, numPartitions=2).selectExpr("CAST(id AS STRING) AS key",
                                                            "CAST(id * 3 AS STRING) AS value")
    (frame.write.format(FORMAT)
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("commit.mode", "two-phase")
        .option("two.phase.intent.wait.ms", "300")
        .option("testing.failBeforeCommit", "1")  # after preparing: the retry aborts it as stale
        .mode("append").save())
    committed = read_topic(broker.bootstrap, topic)
    assert sorted((int(r.key), int(r.value)) for r in committed) == [(i, i * 3) for i in range(200)]
    assert len(read_topic(broker.bootstrap, topic, "read_uncommitted")) == 300
