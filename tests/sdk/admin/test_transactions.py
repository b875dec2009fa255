"""AdminClient's transaction calls on the reference broker and Apache Kafka: a confluent-kafka
transactional producer leaves a transaction open, the admin client lists and describes it, finds
it on the partition (DescribeProducers) and aborts it there (KIP-664's WriteTxnMarkers to the
leader, which both brokers take from anyone when no authorizer is configured, as Kafka does); a
read_committed confluent-kafka consumer then reads past it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from sdk.admin import AbortTransactionSpec, AdminClient, IsolationLevel, NewTopic, OffsetSpec
from sdk.client.cluster import TopicPartition
from sdk.errors import TransactionalIdNotFoundError

from .conftest import Cluster, oracle_topic, wait_for


@pytest.fixture
def producers() -> Iterator[list[confluent_kafka.Producer]]:
    made: list[confluent_kafka.Producer] = []
    try:
        yield made
    finally:
        for producer in made:
            producer.flush(1)


def open_transaction(cluster: Cluster, transactional_id: str, topic: str) -> confluent_kafka.Producer:
    """A producer with a transaction holding two records of partition 0, neither committed nor aborted."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 120000,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open-1", partition=0)
    producer.produce(topic, value=b"open-2", partition=0)
    assert producer.flush(30) == 0
    return producer


def read_committed(cluster: Cluster, topic: str, expected: int) -> list[tuple[int, bytes]]:
    """(offset, value) of partition 0 as a read_committed librdkafka consumer sees it, once it has
    ``expected`` records."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "oracle",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        records: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(records) < expected:
            assert time.monotonic() < deadline, f"read_committed saw only {records}"
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                records.append((msg.offset(), msg.value()))
        return records
    finally:
        consumer.close()


async def test_list_describe_and_abort_an_open_transaction(
    admin: AdminClient, cluster: Cluster, name: Any, producers: list[Any]
) -> None:
    topic, txn_id = name("t"), name("txn")
    assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    producers.append(open_transaction(cluster, txn_id, topic))
    tp = TopicPartition(topic, 0)

    listed = {t.transactional_id: t for t in await admin.list_transactions(states=["Ongoing"])}
    assert listed[txn_id].state == "Ongoing"

    missing = name("missing")
    described = await admin.describe_transactions([txn_id, missing])
    assert isinstance(described[missing].error, TransactionalIdNotFoundError)
    txn = described[txn_id]
    assert txn.error is None and txn.state == "Ongoing"
    assert txn.partitions == {tp} and txn.timeout_ms == 120000 and txn.start_time_ms is not None
    assert txn.producer_id == listed[txn_id].producer_id

    [state] = (await admin.describe_producers([tp]))[tp].active_producers
    assert (state.producer_id, state.producer_epoch) == (txn.producer_id, txn.producer_epoch)
    assert state.current_transaction_start_offset == 0

    uncommitted = await admin.list_offsets({tp: OffsetSpec.latest()})
    stable = await admin.list_offsets({tp: OffsetSpec.latest()}, IsolationLevel.READ_COMMITTED)
    assert (uncommitted[tp].offset, stable[tp].offset) == (2, 0)

    spec = AbortTransactionSpec(tp, state.producer_id, state.producer_epoch, state.coordinator_epoch or 0)
    await admin.abort_transaction(spec)
    after = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    after.produce(topic, value=b"after", partition=0)
    assert after.flush(30) == 0
    # Offsets 0-1 aborted, 2 the ABORT marker: the committed reader reads past the transaction.
    assert read_committed(cluster, topic, 1) == [(3, b"after")]
    assert (await admin.list_offsets({tp: OffsetSpec.latest()}, IsolationLevel.READ_COMMITTED))[
        tp
    ].offset == 4
    assert (await admin.describe_producers([tp]))[tp].active_producers[
        0
    ].current_transaction_start_offset is None


async def test_list_transactions_filters(
    admin: AdminClient, cluster: Cluster, name: Any, producers: list[Any]
) -> None:
    topic, txn_id = name("t"), name("filtered")
    assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    producers.append(open_transaction(cluster, txn_id, topic))
    pattern = txn_id.replace("-", ".")
    [only] = await admin.list_transactions(transactional_id_pattern=f"^{pattern}$")
    assert only.transactional_id == txn_id
    assert [t.transactional_id for t in await admin.list_transactions(producer_ids=[only.producer_id])] == [
        txn_id
    ]
    assert txn_id not in {
        t.transactional_id for t in await admin.list_transactions(states=["CompleteCommit"])
    }
    with pytest.raises(ValueError, match="producer_ids"):
        await admin.list_transactions(producer_ids=[-5])
    with pytest.raises(ValueError, match="producer_epoch"):
        AbortTransactionSpec(TopicPartition(topic, 0), 1, -1, 0)


async def test_abort_transactions_with_prefix_ends_only_that_prefixes_open_transactions(
    admin: AdminClient, cluster: Cluster, name: Any, producers: list[Any]
) -> None:
    topic, prefix = name("t"), name("sink")
    assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
    wait_for(lambda: oracle_topic(cluster, topic), topic)
    for tid in (f"{prefix}-0", f"{prefix}-7", f"other-{prefix}-0"):
        producers.append(open_transaction(cluster, tid, topic))

    listed = await admin.list_transactions_with_prefix(prefix)
    assert sorted(t.transactional_id for t in listed) == [f"{prefix}-0", f"{prefix}-7"]
    assert {t.state for t in listed} == {"Ongoing"}

    assert await admin.abort_transactions_with_prefix(prefix) == [f"{prefix}-0", f"{prefix}-7"]
    wait_for(lambda: not asyncio_run_listing(cluster, prefix), f"{prefix} transactions ended")
    # Offsets 0-3 were the prefix's two transactions, 4-5 the other one's, still open: the
    # partition's stable offset moves up to it and no further.
    tp = TopicPartition(topic, 0)
    stable = await admin.list_offsets({tp: OffsetSpec.latest()}, IsolationLevel.READ_COMMITTED)
    assert stable[tp].offset == 4
    assert [t.transactional_id for t in await admin.list_transactions_with_prefix(f"other-{prefix}")] == [
        f"other-{prefix}-0"
    ]
    with pytest.raises(ValueError, match="prefix"):
        await admin.list_transactions_with_prefix("")


def asyncio_run_listing(cluster: Cluster, prefix: str) -> list[Any]:
    """The prefix's unfinished transactions, asked with the blocking admin client."""
    from sdk.sync import AdminClient as SyncAdminClient

    with SyncAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        return admin.list_transactions_with_prefix(prefix)
