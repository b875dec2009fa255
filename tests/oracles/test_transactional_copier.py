"""Kafka's ``TransactionalMessageCopier`` (its transactions system test) against our broker.

One copier per input partition reads read_committed, writes each poll's records to the output
topic in one transaction and commits its input position in the same transaction
(``sendOffsetsToTransaction`` with the consumer's group metadata). Whatever happens to a copier or
to the broker, a restarted copier resumes from the committed position under the same transactional
id, so a read_committed read of the output holds each input record exactly once: no duplicates
(an aborted or fenced transaction's records are never read), none missing.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from tests.oracles.kafka_tools import (
    JavaProgram,
    create_topic,
    read_topic,
    stop_all,
    text,
    wait_until,
)

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.usefixtures("kafka_jars_available")]

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
PARTITIONS = 2
PER_PARTITION = 15_000
RUN_TIMEOUT_S = 150.0
# A killed copier can leave a transaction open with offsets of its group pending; the restarted
# copier's first position lookup waits (UNSTABLE_OFFSET_COMMIT) until that transaction times out,
# so short timeouts, checked often, keep each restart short. A timeout too short for a busy machine
# aborts a live copier's transaction: it is fenced, exits and is restarted (still exactly once).
TRANSACTION_TIMEOUT_MS = 8000
BROKER_CONFIG = {
    "num.partitions": PARTITIONS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}


@pytest.fixture(scope="module")
def shared_broker() -> Iterator[BrokerProcess]:
    """One broker for the tests that do not kill it (each uses topics of its own)."""
    with BrokerProcess(config=BROKER_CONFIG) as broker:
        yield broker


def _input_values() -> Counter[str]:
    return Counter(f"{p}-{i}" for p in range(PARTITIONS) for i in range(PER_PARTITION))


def _prepare_topics(bootstrap: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"copier-in-{suffix}", f"copier-out-{suffix}"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(source, f"{p}-{i}".encode(), key=str(i).encode(), partition=p)
            if i % 5000 == 0:
                producer.poll(0)
    assert producer.flush(30) == 0
    return source, sink


def _copiers(tmp_path: Path, bootstrap: str, source: str, sink: str, *extra: str) -> list[JavaProgram]:
    group = f"{source}-copiers"
    return [
        JavaProgram(
            tmp_path, f"copier-{p}", COPIER,
            "--broker-list", bootstrap, "--input-topic", source, "--input-partition", str(p),
            "--output-topic", sink, "--consumer-group", group, "--transactional-id", f"{group}-{p}",
            "--use-group-metadata", "--transaction-timeout", str(TRANSACTION_TIMEOUT_MS), *extra,
        )
        for p in range(PARTITIONS)
    ]


def _processed(copier: JavaProgram) -> int:
    """Records this copier's current run has committed (its latest status line)."""
    statuses = [event for event in copier.events(this_run=True) if "totalProcessed" in event]
    return int(statuses[-1]["totalProcessed"]) if statuses else 0


def _copied_at_least(copier: JavaProgram, count: int) -> Callable[[], bool]:
    """Whether this run of the copier has copied ``count`` records (restarting it if it exited)."""

    def copied() -> bool:
        if not copier.running and not _finished(copier):
            copier.start()
        return _processed(copier) >= count

    return copied


def _finished(copier: JavaProgram) -> bool:
    return copier.returncode == 0 and any(
        event.get("stage") == "ShutdownComplete" and event.get("remaining") == 0
        for event in copier.events(this_run=True)
    )


def _run_to_completion(
    copiers: list[JavaProgram], disrupt: Callable[[list[JavaProgram]], None] | None = None
) -> int:
    """Start the copiers, let ``disrupt`` act on them (it returns once done), restart every copier
    that exits before it has finished until all have; the number of restarts."""
    restarts = 0
    for copier in copiers:
        copier.start()
    if disrupt is not None:
        disrupt(copiers)

    def settled() -> bool:
        nonlocal restarts
        for copier in copiers:
            if not copier.running and not _finished(copier):
                restarts += 1
                copier.start()
        return all(_finished(copier) for copier in copiers)

    wait_until(settled, RUN_TIMEOUT_S, "every copier to finish", poll=0.2)
    return restarts


def _check_output(bootstrap: str, sink: str) -> None:
    copied = Counter(text(record) for record in read_topic(bootstrap, sink, PARTITIONS, read_committed=True))
    expected = _input_values()
    duplicates = {value: n for value, n in copied.items() if n > 1}
    missing = expected - copied
    unexpected = copied - expected - Counter({value: n - 1 for value, n in duplicates.items()})
    assert (len(duplicates), len(missing), len(unexpected)) == (0, 0, 0), (
        f"duplicates {len(duplicates)} (e.g. {list(duplicates)[:5]}), missing {len(missing)} "
        f"(e.g. {list(missing)[:5]}), unexpected {len(unexpected)} (e.g. {list(unexpected)[:5]})"
    )


def test_copiers_with_random_aborts_copy_each_record_once(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    source, sink = _prepare_topics(shared_broker.bootstrap)
    copiers = _copiers(tmp_path, shared_broker.bootstrap, source, sink, "--enable-random-aborts")
    try:
        restarts = _run_to_completion(copiers)
    finally:
        stop_all(copiers)
    assert restarts == 0, [copier.stderr() for copier in copiers]
    _check_output(shared_broker.bootstrap, sink)


def test_copiers_killed_and_restarted_copy_each_record_once(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    source, sink = _prepare_topics(shared_broker.bootstrap)
    copiers = _copiers(tmp_path, shared_broker.bootstrap, source, sink)
    kills = [(copiers[0], 3000), (copiers[1], 5000), (copiers[0], 4000)]

    def kill_mid_run(running: list[JavaProgram]) -> None:
        for copier, after in kills:
            wait_until(_copied_at_least(copier, after), 90, f"{copier.name} to copy {after}")
            copier.kill()
            copier.start()

    try:
        _run_to_completion(copiers, kill_mid_run)
    finally:
        stop_all(copiers)
    _check_output(shared_broker.bootstrap, sink)


def test_copiers_across_a_broker_kill_copy_each_record_once(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(BROKER_CONFIG)
    source, sink = _prepare_topics(broker.bootstrap)
    copiers = _copiers(tmp_path, broker.bootstrap, source, sink)

    def kill_broker(running: list[JavaProgram]) -> None:
        wait_until(
            lambda: all(_processed(c) >= PER_PARTITION // 3 for c in running), 90, "a third copied"
        )
        broker.restart(kill=True)

    try:
        _run_to_completion(copiers, kill_broker)
    finally:
        stop_all(copiers)
    _check_output(broker.bootstrap, sink)
