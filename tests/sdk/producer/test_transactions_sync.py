"""The blocking facade's transactions (``sdk.sync.Producer``) against the reference broker: the
same operations as the asyncio producer, with records handed over from the caller's thread
flushed into the transaction before it ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerProcess
from sdk.errors import IllegalStateError, TransactionAbortedError
from sdk.sync import Producer
from tests.sdk.producer.txn_helpers import create_topic


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def txn_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The reference broker, then Apache Kafka (the session's node, which finalizes
    ``transaction.version`` 2 as 4.x does by default)."""
    if request.param == "apache":
        yield request.getfixturevalue("apache_kafka")
        return
    with BrokerProcess(config={"num.partitions": 2, "transaction.state.log.num.partitions": 3}) as proc:
        yield proc


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    consumer.assign(
        [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in (0, 1)]
    )
    got: list[bytes] = []
    at_end: set[int] = set()
    try:
        for _ in range(150):
            if len(got) >= expected and len(at_end) == 2:
                break
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_sync_commit_abort_and_context(txn_broker):
    topic = asyncio.run(create_topic(txn_broker.bootstrap, unique("sync-txn")))  # 2 partitions
    with Producer(
        bootstrap_servers=txn_broker.bootstrap,
        transactional_id=unique("tid"),
        linger_ms=50,
        max_block_ms=15000,
    ) as producer:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            producer.send(topic, b"outside")
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="already in progress"):
            producer.begin_transaction()
        futures = [producer.send(topic, b"c%d" % i, partition=i % 2) for i in range(50)]
        producer.commit_transaction()  # the hand-over is drained into the transaction first
        assert all(f.done() and f.exception() is None for f in futures)
        producer.begin_transaction()
        dropped = producer.send(topic, b"aborted", partition=0)
        producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            dropped.get(5)
        with pytest.raises(ValueError, match="boom"), producer.transaction():
            producer.send(topic, b"aborted too", partition=1)
            raise ValueError("boom")
        with producer.transaction():
            producer.send(topic, b"last", partition=1)
            producer.send_offsets_to_transaction({(topic, 0): 25}, unique("group"))
    got = _read_committed(txn_broker.bootstrap, topic, 51)
    assert sorted(got) == sorted([b"c%d" % i for i in range(50)] + [b"last"])
