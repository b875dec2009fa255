"""Transaction protocol v2 (KIP-890 part 2) against the reference broker, which finalizes
``transaction.version`` 2 by default: no AddPartitionsToTxn or AddOffsetsToTxn goes out, every
EndTxn gives the next epoch (sequences from 0), an abort after a refused record recovers through
that bump without InitProducerId, and confluent-kafka's read_committed consumer (the oracle) sees
exactly the committed records. Version 1 is still what librdkafka's mock cluster and a broker
configured with ``transaction.version=1`` get."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerProcess
from sdk.errors import InvalidRecordError, TransactionAbortableError
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from tests.sdk.producer.txn_helpers import (
    TXN_BROKER,
    create_topic,
    read_committed,
    record_produce_versions,
    record_transactional_requests,
    txn_producer,
    unique,
)

pytestmark = pytest.mark.asyncio

INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
ADD_PARTITIONS = AddPartitionsToTxnRequest.API_KEY
ADD_OFFSETS = AddOffsetsToTxnRequest.API_KEY
END_TXN = EndTxnRequest.API_KEY
TXN_OFFSET_COMMIT = TxnOffsetCommitRequest.API_KEY


@pytest.fixture(scope="module", params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def tv2_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The reference broker, then Apache Kafka (the session's node, which finalizes
    ``transaction.version`` 2 as 4.x does by default)."""
    if request.param == "apache":
        yield request.getfixturevalue("apache_kafka")
        return
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], 10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


async def test_commit_abort_and_offsets_use_protocol_v2(tv2_broker):
    bootstrap = tv2_broker.bootstrap
    topic = await create_topic(bootstrap, unique("tv2"))
    group = unique("group")
    async with txn_producer(bootstrap, unique("tid")) as producer:
        assert producer.transaction_version == 2
        await producer.partitions_for(topic)
        conn = await producer.client.get_connection(producer.client.cluster.leader_for(topic, 0))
        assert conn.finalized_features["transaction.version"] == 2  # from ApiVersions v3+
        produce_versions = record_produce_versions(producer, topic)
        sent = record_transactional_requests(producer)
        async with producer.transaction():
            for i in range(10):
                await producer.send(topic, b"committed-%d" % i, partition=i % 2)
            await producer.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): 3}, group)
        await producer.begin_transaction()
        for i in range(6):
            await producer.send(topic, b"aborted-%d" % i, partition=i % 2)
        await producer.flush()  # in the log, then aborted
        await producer.send_offsets_to_transaction({(topic, 0): 9}, group)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"last", partition=1)
    # A group coordinator that is still loading (a fresh Kafka node) answers the first
    # TxnOffsetCommit with a retriable error; its retry is the same step.
    retried = {i for i in range(1, len(sent)) if sent[i] == sent[i - 1] == TXN_OFFSET_COMMIT}
    steps = [k for i, k in enumerate(sent) if i not in retried]
    assert steps == [TXN_OFFSET_COMMIT, END_TXN, TXN_OFFSET_COMMIT, END_TXN, END_TXN]
    assert produce_versions and min(produce_versions) >= 12  # Produce adds the partitions
    got = await asyncio.to_thread(read_committed, bootstrap, topic, 11)
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(10)] + [b"last"])
    assert await asyncio.to_thread(_committed, bootstrap, group, topic) == [5, 3]


async def test_every_transaction_ends_with_a_new_epoch_and_sequences_from_zero(tv2_broker):
    bootstrap = tv2_broker.bootstrap
    topic = await create_topic(bootstrap, unique("epochs"))
    async with txn_producer(bootstrap, unique("tid")) as producer:
        txn = producer.transaction_manager
        assert txn is not None
        seen = [(txn.producer_id, txn.producer_epoch)]
        for n in range(1, 6):
            await producer.begin_transaction()
            for i in range(n):
                await producer.send(topic, b"t%d-%d" % (n, i), partition=0)
            await producer.flush()
            assert txn.sequence_state(topic, 0) == (n, n - 1, 0)  # numbered from 0 in this epoch
            if n == 3:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
            seen.append((txn.producer_id, txn.producer_epoch))
        # An empty transaction needs no EndTxn, so it keeps the epoch.
        async with producer.transaction():
            pass
        assert (txn.producer_id, txn.producer_epoch) == seen[-1]
    assert all(pid == seen[0][0] for pid, _ in seen)
    assert [epoch - seen[0][1] for _, epoch in seen] == [0, 1, 2, 3, 4, 5]
    expected = [b"t%d-%d" % (n, i) for n in (1, 2, 4, 5) for i in range(n)]
    got = await asyncio.to_thread(read_committed, bootstrap, topic, len(expected))
    assert got == expected  # one partition: in order


async def test_an_abortable_error_recovers_through_the_end_txn_bump(tv2_broker):
    """A refused record leaves the partition's sequence in doubt: version 1 bumps the epoch with
    InitProducerId after the abort (KIP-360), version 2 gets the bump from the abort itself."""
    bootstrap = tv2_broker.bootstrap
    topic = await create_topic(bootstrap, unique("compact"), cleanup_policy="compact")
    async with txn_producer(bootstrap, unique("tid")) as producer:
        txn = producer.transaction_manager
        assert txn is not None and producer.transaction_version == 2
        sent = record_transactional_requests(producer)
        await producer.begin_transaction()
        # Delivered before the refused one is sent: a fresh topic's first produce may be retried
        # (NOT_LEADER_OR_FOLLOWER on Kafka), and a retry still queued when the refusal makes the
        # transaction abortable is failed with it, as in Java.
        await (await producer.send(topic, b"keyed", key=b"k", partition=0))
        refused = await producer.send(topic, b"keyless", partition=1)  # a compacted topic needs keys
        with pytest.raises(InvalidRecordError):
            await refused
        assert txn.bump_required
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        epoch = txn.producer_epoch
        await producer.abort_transaction()
        assert txn.producer_epoch == epoch + 1 and not txn.bump_required
        async with producer.transaction():
            await producer.send(topic, b"after-0", key=b"k", partition=0)
            await producer.send(topic, b"after-1", key=b"k", partition=1)
    assert INIT_PRODUCER_ID not in sent
    assert sent == [END_TXN, END_TXN]
    got = await asyncio.to_thread(read_committed, bootstrap, topic, 2)
    assert sorted(got) == [b"after-0", b"after-1"]


async def test_a_long_run_of_small_transactions(tv2_broker):
    bootstrap = tv2_broker.bootstrap
    topic = await create_topic(bootstrap, unique("many"))
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    async with txn_producer(bootstrap, unique("tid"), linger_ms=0) as producer:
        txn = producer.transaction_manager
        assert txn is not None
        first_epoch = txn.producer_epoch
        sent = record_transactional_requests(producer)
        for n in range(300):
            await producer.begin_transaction()
            values = [(i % 2, b"%d-%d" % (n, i)) for i in range(1 + n % 3)]
            for partition, value in values:
                await producer.send(topic, value, partition=partition)
            if n % 7 == 6:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
                for partition, value in values:
                    committed[partition].append(value)
        # One EndTxn, and so one epoch bump, per transaction that reached the broker: an abort
        # right after the sends may drop every record before it went out, and then needs none.
        assert 258 <= sent.count(END_TXN) <= 300 and set(sent) == {END_TXN}
        assert txn.producer_epoch == first_epoch + sent.count(END_TXN)
    total = len(committed[0]) + len(committed[1])
    got = await asyncio.to_thread(read_committed, bootstrap, topic, total, 2, 60)
    assert sorted(got) == sorted(committed[0] + committed[1])
    on_zero = set(committed[0])
    assert [v for v in got if v in on_zero] == committed[0]  # each partition in order
    assert [v for v in got if v not in on_zero] == committed[1]


async def test_version_1_against_librdkafka_mock_cluster(mock_cluster, topic_name, consume):
    async with txn_producer(mock_cluster.bootstrap, unique("tid")) as producer:
        assert producer.transaction_version == 1
        await producer.partitions_for(topic_name)
        conn = await producer.client.get_connection(producer.client.cluster.leader_for(topic_name, 0))
        assert conn.finalized_features.get("transaction.version", 0) < 2
        sent = record_transactional_requests(producer)
        txn = producer.transaction_manager
        assert txn is not None
        epoch = txn.producer_epoch
        for round_ in range(2):
            async with producer.transaction():
                for i in range(4):
                    await producer.send(topic_name, b"r%d-%d" % (round_, i), partition=i % 2)
        assert txn.producer_epoch == epoch  # version 1 keeps its epoch
        assert sent.count(ADD_PARTITIONS) >= 2 and sent.count(END_TXN) == 2
    records = await consume(mock_cluster.bootstrap, topic_name, expected=8)
    assert sorted(r.value for r in records) == sorted(b"r%d-%d" % (r, i) for r in range(2) for i in range(4))


@pytest.mark.parametrize("kind", ["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
async def test_version_1_when_the_broker_finalizes_it(kind: str, request: pytest.FixtureRequest):
    if kind == "apache":  # a finalized feature is set when the storage is formatted
        factory = request.getfixturevalue("apache_kafka_factory")
        broker = factory(features={"transaction.version": 1})
    else:
        broker = request.getfixturevalue("broker_factory")({**TXN_BROKER, "transaction.version": 1})
    topic = await create_topic(broker.bootstrap, unique("tv1"))
    group = unique("group")
    async with txn_producer(broker.bootstrap, unique("tid")) as producer:
        assert producer.transaction_version == 1
        await producer.partitions_for(topic)
        conn = await producer.client.get_connection(producer.client.cluster.leader_for(topic, 0))
        assert conn.finalized_features["transaction.version"] == 1
        produce_versions = record_produce_versions(producer, topic)
        sent = record_transactional_requests(producer)
        async with producer.transaction():
            await producer.send(topic, b"one", partition=0)
            await producer.send_offsets_to_transaction({(topic, 0): 1}, group)
    assert produce_versions == [11]  # the newest Produce before transactions v2
    # AddPartitionsToTxn goes out from the sender's pass, beside the offsets' requests. A group
    # coordinator still loading its partition answers NOT_COORDINATOR (a fresh Kafka node does):
    # TxnOffsetCommit is then sent again.
    once = [ADD_PARTITIONS, ADD_OFFSETS, END_TXN]
    assert [sent.count(key) for key in once] == [1, 1, 1] and sent.count(TXN_OFFSET_COMMIT) >= 1
    assert set(sent) == {*once, TXN_OFFSET_COMMIT}
    assert sent[-1] == END_TXN and sent.index(ADD_OFFSETS) < sent.index(TXN_OFFSET_COMMIT)
    assert await asyncio.to_thread(read_committed, broker.bootstrap, topic, 1) == [b"one"]
