"""OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID from a broker, end to end (KIP-360).

The proxy answers the first Produce request to partition 0 with the error (the broker never sees
it), and every later batch of the partition with the same error until the refused batch comes
back renumbered, as a broker that lost the refused batch's predecessors would.

* An idempotent producer gets a new epoch (or producer id), renumbers the partition's
  unacknowledged batches from 0 and sends them again in order: nothing is lost, duplicated or
  reordered.
* A transactional producer fails the batch and the transaction becomes abortable; the abort
  gives the producer a new epoch, and the next transaction is written.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk import Producer
from sdk.errors import OutOfOrderSequenceNumberError, TransactionAbortableError, UnknownProducerIdError
from tests.sdk.producer.txn_helpers import TXN_BROKER, create_topic, read_committed, txn_producer, unique

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
UNKNOWN_PRODUCER_ID = 59


@pytest.mark.parametrize("error_code", [OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID])
async def test_idempotent_producer_renumbers_and_keeps_the_partition_in_order(
    kafka, consume, proxy_factory, topic_name, error_code
):
    topic = await kafka.create_topic(topic_name)
    proxy = await proxy_factory(kafka.bootstrap)
    async with Producer(
        bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=1, retry_backoff_ms=20
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        txn = producer.transaction_manager
        assert txn is not None
        before = (txn.producer_id, txn.producer_epoch)
        proxy.error_windows(error_code, 1, first_hold_s=0.05)
        futures = []
        for i in range(40):  # a batch every 10 ms: several in flight when the error comes
            futures.append(await producer.send(topic, b"%03d" % i, partition=0))
            await asyncio.sleep(0.01)
        await asyncio.gather(*futures)
        assert txn.epoch_bumps == 1
        assert (txn.producer_id, txn.producer_epoch) != before
    assert proxy.not_leader_answers >= 2, "no batch was refused behind the first one"
    consumed = await consume(kafka.bootstrap, topic, expected=41)
    values = [r.value for r in sorted(consumed, key=lambda r: r.offset) if r.partition == 0]
    assert values == [b"warm-up"] + [b"%03d" % i for i in range(40)]


@pytest.mark.parametrize(
    ("error_code", "error_type"),
    [
        (OUT_OF_ORDER_SEQUENCE_NUMBER, OutOfOrderSequenceNumberError),
        (UNKNOWN_PRODUCER_ID, UnknownProducerIdError),
    ],
)
async def test_transactional_producer_aborts_and_goes_on_with_a_new_epoch(
    broker_factory, proxy_factory, error_code, error_type
):
    broker = broker_factory(TXN_BROKER)
    topic = await create_topic(broker.bootstrap, unique("seq-errors"), partitions=1)
    proxy = await proxy_factory(broker.bootstrap)
    async with txn_producer(proxy.bootstrap, unique("tid"), linger_ms=0) as producer:
        await producer.init_transactions()
        txn = producer.transaction_manager
        assert txn is not None
        epoch = txn.producer_epoch
        await producer.begin_transaction()
        proxy.error_windows(error_code, 1)
        failed = await producer.send(topic, b"lost", partition=0)
        with pytest.raises(error_type):
            await failed
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert txn.producer_epoch > epoch
        await producer.begin_transaction()
        await producer.send(topic, b"kept", partition=0)
        await producer.commit_transaction()
    assert await asyncio.to_thread(read_committed, broker.bootstrap, topic, 1, 1) == [b"kept"]
