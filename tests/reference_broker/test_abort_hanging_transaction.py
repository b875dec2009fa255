"""KIP-664's abort of a hanging transaction on our broker with an authorizer: the admin client's
WriteTxnMarkers is written when the authorizer grants the caller CLUSTER_ACTION, and read_committed
readers then move past the transaction; a stale producer epoch is refused per partition. A caller
without that grant is refused (``test_inter_broker_apis.py``); without an authorizer anyone may
send it, as in Kafka (``tests/sdk/admin/test_transactions.py`` aborts on both brokers).
"""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import pytest

from reference_broker.testing import BrokerFactory
from sdk.admin import AbortTransactionSpec, AdminClient, NewTopic
from sdk.client.cluster import TopicPartition
from sdk.errors import InvalidProducerEpochError

pytestmark = pytest.mark.interop

# Plaintext clients are User:ANONYMOUS; making it a super user grants CLUSTER_ACTION.
ADMIN_MAY_WRITE_MARKERS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


def read_committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected:
            assert time.monotonic() < deadline, f"read_committed saw only {values}"
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
        return values
    finally:
        consumer.close()


async def test_an_authorized_admin_aborts_a_hanging_transaction_and_readers_move_on(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(ADMIN_MAY_WRITE_MARKERS)
    topic = f"hanging-{uuid.uuid4().hex[:8]}"
    async with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert (await admin.create_topics([NewTopic(topic, 1, 1)]))[topic] is None
        settings = {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"stuck-{topic}",
            "transaction.timeout.ms": 600_000,
            "log_level": 0,
        }
        # A first session of the transactional id, so the stuck one runs at epoch 1.
        confluent_kafka.Producer(settings).init_transactions(30)
        stuck = confluent_kafka.Producer(settings)
        stuck.init_transactions(30)
        stuck.begin_transaction()
        stuck.produce(topic, value=b"never-committed", partition=0)
        assert stuck.flush(30) == 0
        plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        plain.produce(topic, value=b"after", partition=0)
        assert plain.flush(30) == 0

        tp = TopicPartition(topic, 0)
        [state] = (await admin.describe_producers([tp]))[tp].active_producers
        assert state.current_transaction_start_offset == 0
        assert state.producer_epoch == 1
        stale = AbortTransactionSpec(tp, state.producer_id, 0, state.coordinator_epoch or 0)
        with pytest.raises(InvalidProducerEpochError):
            await admin.abort_transaction(stale)
        await admin.abort_transaction(
            AbortTransactionSpec(tp, state.producer_id, state.producer_epoch, state.coordinator_epoch or 0)
        )
        assert read_committed_values(broker.bootstrap, topic, 1) == [b"after"]
        assert (await admin.describe_producers([tp]))[tp].active_producers[
            0
        ].current_transaction_start_offset is None
