"""An aborted transaction larger than a segment: read_committed consumers must see none of it.

The transaction's first records lie in a segment before the one holding its ABORT marker, so a
fetch of those records must still list the transaction as aborted. One transactional producer
(confluent-kafka's or ``sdk.sync.Producer``) writes 1500 records of 1000 bytes into a topic with
``segment.bytes=1048576`` and aborts; a second commits one record. confluent-kafka's and the SDK's
read_committed consumers, reading from the beginning, must return exactly that record, as they
do against Apache Kafka (the control, marked ``apache_kafka``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.consumer import TopicPartition
from sdk.sync import Consumer, Producer
from tests.reference_broker.read_committed_helpers import (
    TXN_BROKER,
    Read,
    confluent_transactional,
    create_topic,
    delete_records,
    read_committed_confluent,
    read_committed_sdk,
    unique,
)

SEGMENT_BYTES = 1048576
ABORTED_RECORDS = 1500
VALUE_BYTES = 1000
COMMITTED = b"committed"

Reader = Callable[..., list[Read]]
READERS = {"confluent": read_committed_confluent, "sdk": read_committed_sdk}


@pytest.fixture(scope="module")
def reference_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


@pytest.fixture(params=["reference", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def target(request: pytest.FixtureRequest) -> str:
    """The bootstrap string of the broker under test: ours, or Apache Kafka as the control."""
    node = request.getfixturevalue("reference_broker" if request.param == "reference" else "apache_kafka")
    return str(node.bootstrap)


def aborted_value(i: int) -> bytes:
    return (b"aborted-%d-" % i).ljust(VALUE_BYTES, b"x")


def abort_large_transaction_confluent(bootstrap: str, topic: str, records: int = ABORTED_RECORDS) -> None:
    producer = confluent_transactional(bootstrap)
    producer.begin_transaction()
    for i in range(records):
        producer.produce(topic, aborted_value(i), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0  # in the log before the abort (else librdkafka purges them)
    producer.abort_transaction(30)


def abort_large_transaction_sdk(bootstrap: str, topic: str, records: int = ABORTED_RECORDS) -> None:
    with Producer(bootstrap_servers=bootstrap, transactional_id=unique("tid"),
                  max_block_ms=30000) as producer:
        producer.begin_transaction()
        futures = [producer.send(topic, aborted_value(i), partition=0) for i in range(records)]
        producer.flush()
        assert all(f.exception() is None for f in futures)  # written before the abort
        producer.abort_transaction()


def commit_one(bootstrap: str, topic: str) -> None:
    producer = confluent_transactional(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, COMMITTED, partition=0)
    producer.commit_transaction(30)


WRITERS = {"confluent": abort_large_transaction_confluent, "sdk": abort_large_transaction_sdk}


def write_spanning_abort(bootstrap: str, writer: str, records: int = ABORTED_RECORDS,
                         **topic_configs: object) -> str:
    topic = create_topic(bootstrap, unique("abort-spans-segments"), segment_bytes=SEGMENT_BYTES,
                         **topic_configs)
    WRITERS[writer](bootstrap, topic, records)
    commit_one(bootstrap, topic)
    return topic


def summary(got: list[Read]) -> tuple[int, list[bytes]]:
    """How many records were read, and the start of each of the first three."""
    return len(got), [value[:12] for _, _, value in got[:3]]


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_aborted_transaction_spanning_a_segment_roll_stays_invisible(target: str, writer: str) -> None:
    topic = write_spanning_abort(target, writer)
    seen = {name: summary(reader(target, topic, 1, 1, timeout=60)) for name, reader in READERS.items()}
    assert seen == {name: (1, [COMMITTED]) for name in READERS}


def read_by_both(bootstrap: str, topic: str) -> dict[str, tuple[int, list[bytes]]]:
    return {name: summary(reader(bootstrap, topic, 1, 1, timeout=60)) for name, reader in READERS.items()}


ONLY_THE_COMMITTED = {name: (1, [COMMITTED]) for name in READERS}


def test_spanning_abort_stays_invisible_after_kill_minus_nine(broker_factory: BrokerFactory) -> None:
    """The ABORT marker lies in the active segment, which recovery after SIGKILL validates and
    whose transaction index it rebuilds from producer state: the rebuilt entry must still start
    at the transaction's first offset, in an earlier segment."""
    broker = broker_factory(TXN_BROKER)
    topic = write_spanning_abort(broker.bootstrap, "confluent")
    assert read_by_both(broker.bootstrap, topic) == ONLY_THE_COMMITTED
    broker.restart(kill=True)
    assert read_by_both(broker.bootstrap, topic) == ONLY_THE_COMMITTED


def earliest_offset(bootstrap: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe"),
                                         "log_level": 0})
    try:
        low, _ = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def wait_for_log_start_beyond(bootstrap: str, topic: str, offset: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (start := earliest_offset(bootstrap, topic)) <= offset:
        assert time.monotonic() < deadline, f"the log of {topic} still starts at {start}"
        time.sleep(0.2)
    return start


# Three segments of the aborted transaction: deleting the first leaves the log start in the second
# and the ABORT marker in the third.
THREE_SEGMENTS_OF_RECORDS = 2500


def test_spanning_abort_stays_invisible_after_delete_records(target: str) -> None:
    topic = write_spanning_abort(target, "confluent", THREE_SEGMENTS_OF_RECORDS)
    assert delete_records(target, topic, 0, 1200) == 1200  # beyond the first segment
    assert read_by_both(target, topic) == ONLY_THE_COMMITTED


@pytest.fixture(params=["reference", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def quick_retention_target(request: pytest.FixtureRequest) -> str:
    """A fresh broker (ours or Apache Kafka) that applies retention every 200 ms."""
    settings: dict[str, Any] = {"log.retention.check.interval.ms": 200}
    if request.param == "reference":
        factory = request.getfixturevalue("broker_factory")
        return str(factory({**TXN_BROKER, **settings}).bootstrap)
    return str(request.getfixturevalue("apache_kafka_factory")(**settings).bootstrap)


@pytest.mark.slow
def test_spanning_abort_stays_invisible_after_retention_deletes_its_first_segment(
    quick_retention_target: str,
) -> None:
    """retention.bytes below the log size by more than one segment deletes exactly the first one
    (about 1 MiB of the transaction's ~2.5 MiB), leaving the log start inside the transaction."""
    bootstrap = quick_retention_target
    topic = write_spanning_abort(bootstrap, "confluent", THREE_SEGMENTS_OF_RECORDS,
                                 retention_bytes=1_300_000)
    wait_for_log_start_beyond(bootstrap, topic, 0)
    assert read_by_both(bootstrap, topic) == ONLY_THE_COMMITTED


def committed_end_offset(bootstrap: str, topic: str) -> int:
    """ListOffsets LATEST under read_committed: the last stable offset."""
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as consumer:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])


@pytest.mark.slow
def test_open_transaction_losing_its_first_segment_to_delete_records(
    target: str, request: pytest.FixtureRequest
) -> None:
    """While open, the transaction holds the last stable offset at the new log start (its first
    offset is gone); aborted afterwards, none of what remains of it is read.

    Apache Kafka reports the base offset of the batch holding the new log start instead (its
    offset metadata is batch-aligned), so it is only checked not to exceed the log start."""
    topic = create_topic(target, unique("open-txn-deleted-head"), segment_bytes=SEGMENT_BYTES)
    producer = confluent_transactional(target)
    producer.begin_transaction()
    for i in range(THREE_SEGMENTS_OF_RECORDS):
        producer.produce(topic, aborted_value(i), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert delete_records(target, topic, 0, 1200) == 1200
    if request.node.callspec.params["target"] == "reference":
        assert committed_end_offset(target, topic) == 1200
    else:
        assert committed_end_offset(target, topic) <= 1200
    assert {name: summary(reader(target, topic, 1, 0, timeout=30)) for name, reader in READERS.items()} == {
        name: (0, []) for name in READERS}
    producer.abort_transaction(30)
    commit_one(target, topic)
    assert read_by_both(target, topic) == ONLY_THE_COMMITTED


def test_only_aborted_records_in_small_segments_reach_end_without_error(
    reference_broker: BrokerProcess,
) -> None:
    """librdkafka's scenario 0129 (fetch_aborted_msgs): 1000 records of 1000 bytes aborted in a
    topic of 20000-byte segments and 10000-byte messages; read_committed consumers fetching 10000
    bytes at a time reach the end of the partition with no record and no error."""
    bootstrap = reference_broker.bootstrap
    topic = create_topic(bootstrap, unique("fetch-aborted-msgs"), segment_bytes=20000,
                         max_message_bytes=10000)
    producer = confluent_transactional(bootstrap, **{"message.max.bytes": 10000, "linger.ms": 100})
    producer.begin_transaction()
    for i in range(1000):
        producer.produce(topic, aborted_value(i), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.abort_transaction(30)
    seen = {name: summary(reader(bootstrap, topic, 1, 0, fetch_bytes=10000, timeout=30))
            for name, reader in READERS.items()}
    assert seen == {name: (0, []) for name in READERS}
