"""The SDK's transactional producer against the reference broker's transaction coordinator.

What the mock cluster cannot show: read_committed readers (ours and confluent-kafka's) see a
committed transaction and never an aborted one, nor an open one; offsets sent to a transaction
are visible to the group only once it commits, and the group coordinator checks the consumer's
generation (KIP-447); a second producer with the same transactional id fences the first; a
record the broker refuses makes the transaction abortable, and after the abort (with its epoch
bump) the next transaction works.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from reference_broker.testing import BrokerProcess
from sdk import Producer, TopicPartition
from sdk.client import KafkaClient
from sdk.consumer import Consumer
from sdk.consumer.records import ConsumerGroupMetadata, OffsetAndMetadata
from sdk.errors import (
    CommitFailedError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidRecordError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from sdk.protocol import messages
from tests.sdk.producer.txn_helpers import TXN_BROKER, create_topic, txn_producer, unique

pytestmark = pytest.mark.asyncio

@pytest.fixture(scope="module", params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def txn_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The reference broker, then Apache Kafka (the session's node, which finalizes
    ``transaction.version`` 2 as 4.x does by default)."""
    if request.param == "apache":
        yield request.getfixturevalue("apache_kafka")
        return
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


@pytest.fixture(scope="module")
def txn_broker_timeouts() -> Iterator[BrokerProcess]:
    """A broker that looks for timed-out transactions every 100 ms (Kafka's default: 10 s)."""
    config = {**TXN_BROKER, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100}
    with BrokerProcess(config=config) as proc:
        yield proc


def _producer(bootstrap: str, transactional_id: str, **kwargs: object) -> Producer:
    return txn_producer(bootstrap, transactional_id, **{"max_block_ms": 30000, **kwargs})


def _confluent_read(
    bootstrap: str, topic: str, expected: int, committed: bool, timeout: float = 30
) -> list[bytes]:
    """Values of both partitions from the beginning until ``expected`` arrived and both ends are
    reached (read_committed: the ends are the last stable offsets)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    consumer.assign(
        [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in (0, 1)]
    )
    got: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (len(got) < expected or len(at_end) < 2):
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


async def _aiokafka_read(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    """Values read by aiokafka's consumer under read_committed."""
    import aiokafka

    got: list[bytes] = []
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        consumer.assign([aiokafka.TopicPartition(topic, 0), aiokafka.TopicPartition(topic, 1)])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            got.extend(r.value for rs in batches.values() for r in rs)
        batches = await consumer.getmany(timeout_ms=300)  # nothing more may come
        got.extend(r.value for rs in batches.values() for r in rs)
    finally:
        await consumer.stop()
    return got


async def _sdk_read(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[bytes]:
    """Values read by our consumer under read_committed, until ``expected`` arrived and nothing
    more came for a moment."""
    got: list[bytes] = []
    async with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            records = [r for rs in batches.values() for r in rs]
            got.extend(r.value for r in records)
            if records:
                quiet_since = None
            elif len(got) >= expected:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 0.5:
                    break
    return got


async def test_commit_visible_abort_and_open_invisible_to_read_committed(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("txn"))
    async with _producer(bootstrap, unique("tid")) as producer:
        async with producer.transaction():
            for i in range(10):
                await producer.send(topic, b"committed-%d" % i, partition=i % 2)
        await producer.begin_transaction()
        for i in range(10):
            await producer.send(topic, b"aborted-%d" % i, partition=i % 2)
        await producer.flush()  # written to the log, then aborted
        await producer.abort_transaction()
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"open", partition=0)
        # The open transaction holds read_committed readers back: they see the first one only.
        expected_before = sorted(b"committed-%d" % i for i in range(10))
        assert sorted(await asyncio.to_thread(_confluent_read, bootstrap, topic, 10, True)) == expected_before
        assert sorted(await _sdk_read(bootstrap, topic, 10)) == expected_before
        await producer.send(topic, b"end", partition=1)
        await producer.commit_transaction()
    expected = sorted([b"committed-%d" % i for i in range(10)] + [b"open", b"end"])
    assert sorted(await asyncio.to_thread(_confluent_read, bootstrap, topic, 12, True)) == expected
    assert sorted(await _sdk_read(bootstrap, topic, 12)) == expected
    assert sorted(await _aiokafka_read(bootstrap, topic, 12)) == expected
    everything = await asyncio.to_thread(_confluent_read, bootstrap, topic, 22, False)
    assert sum(v.startswith(b"aborted") for v in everything) == 10


async def _committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, tuple[int, str | None]]:
    """What OffsetFetch (not requiring stable offsets) says the group committed: partition ->
    (offset, metadata)."""
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        Topic = messages.OffsetFetchRequest.OffsetFetchRequestTopic
        request = messages.OffsetFetchRequest(
            group_id=group, topics=[Topic(name=topic, partition_indexes=[0, 1])], require_stable=False
        )
        find = messages.FindCoordinatorRequest(key=group, key_type=0)
        coordinator = (await client.send_to_any(find, 1)).node_id
        conn = await client.get_connection(coordinator)
        response = await conn.request(request, 6)
        assert response.error_code == 0, response
        return {
            p.partition_index: (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions
        }
    finally:
        await client.close()


async def test_offsets_sent_to_a_transaction_are_visible_only_after_commit(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("offsets"))
    group = unique("group")
    async with _producer(bootstrap, unique("tid")) as producer:
        await producer.begin_transaction()
        await producer.send(topic, b"x", partition=0)
        await producer.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(5, "meta"), (topic, 1): 7}, group
        )
        pending = await _committed_offsets(bootstrap, group, topic)
        assert {p: offset for p, (offset, _) in pending.items()} == {0: -1, 1: -1}
        await producer.commit_transaction()
        assert await _committed_offsets(bootstrap, group, topic) == {0: (5, "meta"), 1: (7, "")}
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({(topic, 0): 9}, group)
        await producer.abort_transaction()
        assert await _committed_offsets(bootstrap, group, topic) == {0: (5, "meta"), 1: (7, "")}
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        found = await asyncio.to_thread(
            consumer.committed, [confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], 10
        )
        assert [tp.offset for tp in found] == [5, 7]
    finally:
        consumer.close()


async def test_group_metadata_of_a_member_is_checked(txn_broker):
    """KIP-447: offsets carry the consumer's generation and member id; a stale generation is
    refused (the transaction becomes abortable), the current one accepted."""
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("kip447"))
    group = unique("group")
    async with Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
    ) as consumer:
        deadline = time.monotonic() + 15
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=100)
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 0 and metadata.member_id
        async with _producer(bootstrap, unique("tid")) as producer:
            await producer.begin_transaction()
            stale = ConsumerGroupMetadata(group, metadata.generation_id + 7, metadata.member_id, None)
            with pytest.raises(TransactionAbortableError) as info:
                await producer.send_offsets_to_transaction({(topic, 0): 3}, stale)
            # As Java's producer: CommitFailedError, with the coordinator's answer as its cause.
            assert isinstance(info.value.__cause__, CommitFailedError)
            assert isinstance(info.value.__cause__.__cause__, IllegalGenerationError)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_offsets_to_transaction({(topic, 0): 3, (topic, 1): 4}, metadata)
        assert await consumer.committed(TopicPartition(topic, 0)) == 3
        assert await consumer.committed(TopicPartition(topic, 1)) == 4


async def test_a_second_producer_fences_the_first(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("fence"))
    transactional_id = unique("tid")
    async with _producer(bootstrap, transactional_id) as first:
        await first.begin_transaction()
        await first.send_and_wait(topic, b"zombie", partition=0)
        async with _producer(bootstrap, transactional_id) as second:
            assert second.transaction_manager.producer_epoch > first.transaction_manager.producer_epoch  # type: ignore[union-attr]
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"more")
            async with second.transaction():
                await second.send(topic, b"new owner", partition=1)
        # confluent-kafka's producer with the same id fences ours too.
        other = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
        )
        await asyncio.to_thread(other.init_transactions, 15)
    got = await asyncio.to_thread(_confluent_read, bootstrap, topic, 1, True)
    assert got == [b"new owner"]


async def test_a_refused_record_makes_the_transaction_abortable_then_the_next_one_works(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("compact"), cleanup_policy="compact")
    async with _producer(bootstrap, unique("tid")) as producer:
        txn = producer.transaction_manager
        assert txn is not None
        await producer.begin_transaction()
        kept = await producer.send(topic, b"keyed", key=b"k", partition=0)
        refused = await producer.send(topic, b"keyless", partition=1)  # a compacted topic needs keys
        with pytest.raises(InvalidRecordError):
            await refused
        try:
            await kept  # acknowledged when its batch left before the refusal came back
        except TransactionAbortedError as aborted:
            # Still unsent then (a leader that has not acknowledged this producer id yet gets one
            # batch at a time): the abortable error aborts it unsent, as Java's
            # abortUndrainedBatches does.
            assert isinstance(aborted.__cause__, InvalidRecordError)
        with pytest.raises(TransactionAbortableError) as info:
            await producer.commit_transaction()
        assert isinstance(info.value.__cause__, InvalidRecordError)
        epoch = txn.producer_epoch
        await producer.abort_transaction()
        assert txn.producer_epoch == epoch + 1  # KIP-360 bump with the same producer id
        async with producer.transaction():
            await producer.send(topic, b"after", key=b"k", partition=1)
    got = await asyncio.to_thread(_confluent_read, bootstrap, topic, 1, True)
    assert got == [b"after"]


async def test_closing_mid_transaction_aborts_it_so_readers_are_not_held_back(txn_broker):
    """Left open, the transaction would hold read_committed readers for transaction_timeout_ms
    (60 s here); stop() aborts it, so the next commit is readable at once."""
    bootstrap = txn_broker.bootstrap
    topic = await create_topic(bootstrap, unique("close"))
    async with _producer(bootstrap, unique("tid"), transaction_timeout_ms=60000) as producer:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"left open", partition=0)
    async with _producer(bootstrap, unique("tid")) as other, other.transaction():
        await other.send(topic, b"after", partition=0)
    got = await asyncio.to_thread(_confluent_read, bootstrap, topic, 1, True, 20)
    assert got == [b"after"]


async def test_a_hung_transaction_is_aborted_by_the_coordinator_and_readers_move_past(txn_broker_timeouts):
    """transaction_timeout_ms: the coordinator aborts the transaction of a producer that stalls and
    bumps its epoch; read_committed readers move past it, and the stalled producer learns of it at
    its next send (INVALID_PRODUCER_EPOCH makes the transaction abortable, KIP-588)."""
    bootstrap = txn_broker_timeouts.bootstrap
    topic = await create_topic(bootstrap, unique("timeout"))
    async with _producer(bootstrap, unique("tid"), transaction_timeout_ms=500) as hung:
        await hung.begin_transaction()
        await hung.send_and_wait(topic, b"hung", partition=0)
        async with _producer(bootstrap, unique("tid")) as other, other.transaction():
            await other.send(topic, b"after", partition=0)
        # Readable once the coordinator has aborted the hung transaction (it held the LSO back).
        got = await asyncio.to_thread(_confluent_read, bootstrap, topic, 1, True, 20)
        assert got == [b"after"]
        late = await hung.send(topic, b"late", partition=0)
        with pytest.raises(InvalidProducerEpochError):
            await late
        with pytest.raises(TransactionAbortableError) as info:
            await hung.commit_transaction()
        assert isinstance(info.value.__cause__, InvalidProducerEpochError)
        with contextlib.suppress(ProducerFencedError):  # the coordinator's answer to the old epoch
            await hung.abort_transaction()
    assert await asyncio.to_thread(_confluent_read, bootstrap, topic, 1, True, 20) == [b"after"]
