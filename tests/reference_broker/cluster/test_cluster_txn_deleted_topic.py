"""A transaction that wrote to a topic deleted before it ended, on ours and Apache Kafka's cluster.

Kafka's marker channel skips a partition its metadata no longer has ("these partitions are likely
deleted already and hence can be skipped") and completes the transaction with the markers of the
rest. Ours retried the deleted partition's marker for ever: the transaction stayed in
PREPARE_COMMIT, its records on the surviving topic stayed above the last stable offset, and the
producer's next transaction was refused with CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import uuid

import pytest

from tests.reference_broker.cluster.three_nodes import ThreeNodes, create_topic, read_committed, until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def test_a_transaction_ends_without_the_markers_of_a_topic_deleted_meanwhile(nodes: ThreeNodes) -> None:
    suffix = uuid.uuid4().hex[:8]
    gone, kept = f"txn-gone-{suffix}", f"txn-kept-{suffix}"
    create_topic(nodes.bootstrap, gone, partitions=1)
    create_topic(nodes.bootstrap, kept, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": nodes.bootstrap,
                                         "transactional.id": f"deleted-{suffix}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(gone, f"g{i}".encode(), partition=0)
        producer.produce(kept, f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    admin.delete_topics([gone], operation_timeout=30)[gone].result(60)
    until(lambda: gone not in admin.list_topics(timeout=10).topics, f"{gone} is deleted", 60)
    producer.commit_transaction(60)

    # The transaction completed: the next one is taken, and both are read committed.
    producer.begin_transaction()
    for i in range(10, 15):
        producer.produce(kept, f"k{i}".encode(), partition=0)
    producer.commit_transaction(60)
    values = read_committed(nodes.bootstrap, kept, at_least=15, timeout=60)
    assert values == [f"k{i}".encode() for i in range(15)]
