"""The transactional producer against librdkafka's mock cluster (a broker nobody here wrote).

The mock serves InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn and epoch
fencing; it does not filter aborted records for read_committed readers (so visibility is checked
against the reference broker, in test_transactions_broker.py). What it shows here: the request
sequence and states work, records of a committed transaction arrive, an abort drops what was not
sent, every call in the wrong state raises; and, with librdkafka's error injection, that fencing
is fatal, coordinator moves and CONCURRENT_TRANSACTIONS are retried, and a failed send makes the
transaction abortable until an abort, which bumps the epoch (KIP-360).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sdk import Producer
from sdk.errors import (
    ErrorCode,
    IllegalStateError,
    InvalidRecordError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from sdk.producer.transaction_manager import TransactionState
from sdk.protocol.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from sdk.testing.librdkafka_mock import LibrdkafkaMockCluster

pytestmark = pytest.mark.asyncio

PRODUCE = ProduceRequest.API_KEY
INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
ADD_PARTITIONS = AddPartitionsToTxnRequest.API_KEY
END_TXN = EndTxnRequest.API_KEY


def _producer(bootstrap: str, transactional_id: str, **kwargs: object) -> Producer:
    return Producer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        request_timeout_ms=5000,
        max_block_ms=10000,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_start_initializes_and_a_committed_transaction_arrives(
    mock_cluster, topic_name, consume, unique
):
    async with _producer(mock_cluster.bootstrap, unique("tx")) as producer:
        txn = producer.transaction_manager
        assert txn is not None and txn.state == TransactionState.READY and txn.producer_id >= 0
        await producer.init_transactions()  # start() did it: a no-op now
        producer.begin_transaction()  # aiokafka's form, without await
        futures = [await producer.send(topic_name, b"v%d" % i, key=b"k%d" % i) for i in range(20)]
        await producer.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futures)
        assert txn.state == TransactionState.READY and not txn.partitions_in_transaction
        # A second transaction with the same producer continues the sequence numbers; offsets
        # join it (the mock accepts AddOffsetsToTxn and TxnOffsetCommit, and then drops them).
        async with producer.transaction():
            await producer.send(topic_name, b"second", key=b"k0")
            await producer.send_offsets_to_transaction({(topic_name, 0): 1}, unique("group"))
            assert txn.transaction_started
    records = await consume(mock_cluster.bootstrap, topic_name, expected=21)
    assert sorted(r.value for r in records) == sorted([b"v%d" % i for i in range(20)] + [b"second"])


async def test_abort_fails_unsent_records_and_the_next_transaction_works(mock_cluster, topic_name, unique):
    async with _producer(mock_cluster.bootstrap, unique("tx"), linger_ms=60000) as producer:
        await producer.begin_transaction()
        queued = [await producer.send(topic_name, b"never", partition=0) for _ in range(3)]
        await producer.abort_transaction()
        for future in queued:
            with pytest.raises(TransactionAbortedError):
                await future
        txn = producer.transaction_manager
        assert txn is not None and txn.state == TransactionState.READY
        await producer.begin_transaction()
        sent = await producer.send(topic_name, b"kept", partition=1)
        await producer.commit_transaction()
        assert (await sent).partition == 1


async def test_transaction_context_aborts_on_an_exception(mock_cluster, topic_name, unique):
    async with _producer(mock_cluster.bootstrap, unique("tx"), linger_ms=60000) as producer:
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                future = await producer.send(topic_name, b"dropped")
                raise RuntimeError("boom")
        with pytest.raises(TransactionAbortedError):
            await future
        assert producer.transaction_manager.state == TransactionState.READY  # type: ignore[union-attr]


async def test_calls_in_the_wrong_state_raise(mock_cluster, topic_name, unique):
    async with _producer(mock_cluster.bootstrap, unique("tx")) as producer:
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send(topic_name, b"outside")
        with pytest.raises(IllegalStateError, match="without a transaction"):
            await producer.commit_transaction()
        with pytest.raises(IllegalStateError, match="without a transaction"):
            await producer.abort_transaction()
        with pytest.raises(IllegalStateError, match="outside a transaction"):
            await producer.send_offsets_to_transaction({(topic_name, 0): 5}, "group")
        await producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="already in progress"):
            await producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.init_transactions()
        await producer.send_and_wait(topic_name, b"inside")
        many = await producer.send_many(topic_name, [(None, b"a"), (None, b"b")], partition=0)
        await producer.commit_transaction()
        assert many.done() and many.exception() is None
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send_many(topic_name, [(None, b"outside")])
        assert await producer.partitions_for(topic_name)  # metadata needs no transaction
    async with Producer(bootstrap_servers=mock_cluster.bootstrap) as plain:
        for call in (plain.begin_transaction, plain.commit_transaction, plain.abort_transaction):
            with pytest.raises(IllegalStateError, match="transactional_id"):
                await call()
    unstarted = _producer(mock_cluster.bootstrap, unique("tx"))
    with pytest.raises(IllegalStateError, match="not started"):
        await unstarted.begin_transaction()


@pytest.fixture
def injecting_mock() -> Iterator[LibrdkafkaMockCluster]:
    """A mock cluster of its own whose requests can be made to fail (librdkafka's error injection)."""
    with LibrdkafkaMockCluster(num_brokers=3) as cluster:
        yield cluster


async def test_fencing_is_fatal(injecting_mock, topic_name, unique):
    """The mock gives every InitProducerId a new producer id, so a second producer does not fence
    the first there (the reference broker test does that); the coordinator's answer is injected."""
    injecting_mock.create_topic(topic_name, 4)
    async with _producer(injecting_mock.bootstrap, unique("tx")) as producer:
        await producer.begin_transaction()
        await producer.send_and_wait(topic_name, b"zombie")
        injecting_mock.push_request_errors(END_TXN, ErrorCode.PRODUCER_FENCED)
        with pytest.raises(ProducerFencedError):
            await producer.commit_transaction()
        # Fatal: nothing but stop() works any more.
        for call in (producer.begin_transaction, producer.abort_transaction, producer.commit_transaction):
            with pytest.raises(ProducerFencedError):
                await call()
        with pytest.raises(ProducerFencedError):
            await producer.send(topic_name, b"more")
    # INVALID_PRODUCER_EPOCH from the coordinator means the same.
    async with _producer(injecting_mock.bootstrap, unique("tx")) as producer:
        await producer.begin_transaction()
        injecting_mock.push_request_errors(ADD_PARTITIONS, ErrorCode.INVALID_PRODUCER_EPOCH)
        future = await producer.send(topic_name, b"x")
        with pytest.raises(ProducerFencedError):
            await future
        with pytest.raises(ProducerFencedError):
            await producer.commit_transaction()


async def test_coordinator_errors_and_concurrent_transactions_are_retried(injecting_mock, topic_name, unique):
    injecting_mock.create_topic(topic_name, 4)
    injecting_mock.push_request_errors(
        INIT_PRODUCER_ID, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS
    )
    async with _producer(injecting_mock.bootstrap, unique("tx"), retry_backoff_ms=10) as producer:
        await producer.begin_transaction()
        injecting_mock.push_request_errors(
            ADD_PARTITIONS,
            ErrorCode.CONCURRENT_TRANSACTIONS,
            ErrorCode.NOT_COORDINATOR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
        )
        injecting_mock.push_request_errors(
            END_TXN, ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS
        )
        future = await producer.send(topic_name, b"kept", partition=2)
        await producer.commit_transaction()
        assert (await future).partition == 2


async def test_failed_send_makes_the_transaction_abortable_until_aborted(injecting_mock, topic_name, unique):
    injecting_mock.create_topic(topic_name, 4)
    async with _producer(injecting_mock.bootstrap, unique("tx")) as producer:
        txn = producer.transaction_manager
        assert txn is not None
        await producer.begin_transaction()
        injecting_mock.push_request_errors(PRODUCE, ErrorCode.INVALID_RECORD)
        failed = await producer.send(topic_name, b"refused", partition=0)
        with pytest.raises(InvalidRecordError):
            await failed
        with pytest.raises(TransactionAbortableError) as info:
            await producer.send(topic_name, b"after the failure")
        assert isinstance(info.value.__cause__, InvalidRecordError)
        with pytest.raises(TransactionAbortableError):
            await producer.send_offsets_to_transaction({(topic_name, 0): 1}, "group")
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        epoch = txn.producer_epoch
        await producer.abort_transaction()
        # KIP-360: the failed batch left its sequence in doubt, so the abort bumped the epoch.
        assert txn.epoch_bumps == 1 and txn.producer_epoch == epoch + 1
        async with producer.transaction():
            ok = await producer.send(topic_name, b"next transaction", partition=0)
        assert (await ok).offset >= 0


async def test_many_partitions_are_added_in_few_requests(mock_cluster, topic_name, unique):
    async with _producer(mock_cluster.bootstrap, unique("tx"), linger_ms=20) as producer:
        txn = producer.transaction_manager
        assert txn is not None
        await producer.begin_transaction()
        futures = [await producer.send(topic_name, b"x", partition=p) for p in range(4)]
        await producer.commit_transaction()
        await asyncio.gather(*futures)
        assert not txn.partitions_in_transaction  # cleared for the next transaction
