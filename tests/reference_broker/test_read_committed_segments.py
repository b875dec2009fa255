"""An aborted transaction larger than a segment: read_committed consumers must see none of it.

The transaction's first records lie in a segment before the one holding its ABORT marker, so a
fetch of those records must still list the transaction as aborted. One transactional producer
(confluent-kafka's or ``sdk.sync.Producer``) writes 1500 records of 1000 bytes into a topic with
``segment.bytes=1048576`` and aborts; a second commits one record. confluent-kafka's and the SDK's
read_committed consumers, reading from the beginning, must return exactly that record, as they
do against Apache Kafka (the control, marked ``apache_kafka``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from reference_broker.testing import BrokerProcess
from sdk.sync import Producer
from tests.reference_broker.read_committed_helpers import (
    TXN_BROKER,
    Read,
    confluent_transactional,
    create_topic,
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


def abort_large_transaction_confluent(bootstrap: str, topic: str) -> None:
    producer = confluent_transactional(bootstrap)
    producer.begin_transaction()
    for i in range(ABORTED_RECORDS):
        producer.produce(topic, aborted_value(i), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0  # in the log before the abort (else librdkafka purges them)
    producer.abort_transaction(30)


def abort_large_transaction_sdk(bootstrap: str, topic: str) -> None:
    with Producer(bootstrap_servers=bootstrap, transactional_id=unique("tid"),
                  max_block_ms=30000) as producer:
        producer.begin_transaction()
        futures = [producer.send(topic, aborted_value(i), partition=0) for i in range(ABORTED_RECORDS)]
        producer.flush()
        assert all(f.exception() is None for f in futures)  # written before the abort
        producer.abort_transaction()


def commit_one(bootstrap: str, topic: str) -> None:
    producer = confluent_transactional(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, COMMITTED, partition=0)
    producer.commit_transaction(30)


WRITERS = {"confluent": abort_large_transaction_confluent, "sdk": abort_large_transaction_sdk}


def write_spanning_abort(bootstrap: str, writer: str) -> str:
    topic = create_topic(bootstrap, unique("abort-spans-segments"), segment_bytes=SEGMENT_BYTES)
    WRITERS[writer](bootstrap, topic)
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
