"""The transactional producer's state machine, driven by a scripted cluster and a manual clock
(Java's TransactionManagerTest with MockClient and MockTime).

No broker and no socket: ``MockProducerBroker`` answers each request from the test's script and
``MockTime`` moves only when the test ticks it. Each test drives one case of Java's
TransactionManagerTest and checks our producer does what Java's does: coordinator moves,
CONCURRENT_TRANSACTIONS retries, fencing, abortable errors with the epoch bump at the abort
(KIP-360), fatal errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sdk.consumer.errors import CommitFailedError
from sdk.errors import (
    ErrorCode,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
)
from sdk.producer.transaction_manager import TransactionState
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from sdk.testing.mock_producer_broker import GROUP, TRANSACTION, MockProducerBroker, produce_response
from sdk.testing.mock_time import MockTime, settle
from tests.sdk.producer.sender_harness import (
    BACKOFF_MS,
    PRODUCER_ID,
    ProducerParts,
    batch_of,
    init_producer_id_response,
    run,
    time,
)

__all__ = ["time"]

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "t"
TXN_ID = "txn"
#: CONCURRENT_TRANSACTIONS is retried sooner than retry_backoff_ms (Java's producer: 20 ms).
CONCURRENT_BACKOFF_MS = 20

Partition = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def add_partitions_response(partition: int = 0, error: int = 0) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(
                name=TOPIC,
                results_by_partition=[Partition(partition_index=partition, partition_error_code=error)],
            )
        ]
    )


@pytest.fixture
def broker() -> MockProducerBroker:
    return MockProducerBroker(nodes=(0, 1), topics={TOPIC: 2}, retry_backoff_ms=BACKOFF_MS)


@pytest.fixture
async def producer(broker: MockProducerBroker, time: MockTime) -> AsyncIterator[ProducerParts]:
    """A transactional producer that went through init_transactions (producer id 1000, epoch 0)."""
    parts = ProducerParts(broker, time, transactional_id=TXN_ID)
    assert parts.transactions is not None
    init = await run(time, parts.transactions.init_transactions())
    broker.prepare_response(
        init_producer_id_response(), match={"transactional_id": TXN_ID, "producer_id": -1}
    )
    await settle()
    await init
    yield parts
    await parts.close()
    broker.verify()


def ops(parts: ProducerParts) -> Any:
    assert parts.transactions is not None
    return parts.transactions


async def open_transaction_with_a_record(broker: MockProducerBroker, parts: ProducerParts) -> Any:
    """begin, send one record to partition 0, AddPartitionsToTxn answered: the Produce request is
    on the wire, unanswered. Returns the record's future."""
    ops(parts).begin_transaction()
    record = parts.send(TOPIC, 0)
    await settle()
    broker.prepare_response(add_partitions_response(), match={"v3_and_below_transactional_id": TXN_ID})
    await settle()
    assert len(broker.sent(ProduceRequest)) == 1
    return record


async def test_a_transaction_adds_its_partition_before_producing_and_ends_after_the_acks(
    broker, producer, time
):
    record = await open_transaction_with_a_record(broker, producer)
    names = [s.name for s in broker.requests]
    assert names == ["InitProducerIdRequest", "AddPartitionsToTxnRequest", "ProduceRequest"]
    batch = batch_of(broker.sent(ProduceRequest)[0], TOPIC, 0)
    assert batch.is_transactional and (batch.producer_id, batch.producer_epoch) == (PRODUCER_ID, 0)
    commit = await run(time, ops(producer).commit_transaction())
    assert not broker.sent(EndTxnRequest)  # not before the record is acknowledged
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=5))
    await settle()
    assert (await record).offset == 5
    (end,) = broker.sent(EndTxnRequest)
    assert end.request.committed and (end.request.producer_id, end.request.producer_epoch) == (PRODUCER_ID, 0)
    broker.prepare_response(EndTxnResponse())
    await commit
    assert producer.txn is not None and producer.txn.state == TransactionState.READY


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
async def test_a_coordinator_move_on_add_partitions_finds_the_coordinator_again(broker, producer, time, code):
    ops(producer).begin_transaction()
    producer.send(TOPIC, 0)
    await settle()
    lookups, forgotten = broker.lookups, broker.forgotten
    broker.move_coordinator(TRANSACTION, 1)
    broker.prepare_response(add_partitions_response(error=code))
    await settle()
    assert broker.forgotten == forgotten + 1
    await time.tick(BACKOFF_MS)
    assert broker.lookups == lookups + 1
    retry = broker.sent(AddPartitionsToTxnRequest)[-1]
    assert retry.node == 1 and len(broker.sent(AddPartitionsToTxnRequest)) == 2
    broker.prepare_response(add_partitions_response())
    await settle()
    assert len(broker.sent(ProduceRequest)) == 1  # drained once its partition is in the transaction


async def test_a_coordinator_move_on_end_txn_sends_it_again_to_the_new_coordinator(broker, producer, time):
    record = await open_transaction_with_a_record(broker, producer)
    broker.prepare_response(produce_response(TOPIC, 0))
    await settle()
    await record
    commit = await run(time, ops(producer).commit_transaction())
    broker.move_coordinator(TRANSACTION, 1)
    broker.prepare_response(EndTxnResponse(error_code=ErrorCode.NOT_COORDINATOR))
    await time.tick(BACKOFF_MS)
    ends = broker.sent(EndTxnRequest)
    assert [s.node for s in ends] == [0, 1]
    broker.prepare_response(EndTxnResponse())
    await commit


async def test_concurrent_transactions_is_retried_after_a_short_backoff(broker, producer, time):
    """The previous transaction is still completing on the coordinator: AddPartitionsToTxn is
    retried after 20 ms rather than retry_backoff_ms (Java's TransactionManager)."""
    ops(producer).begin_transaction()
    producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(add_partitions_response(error=ErrorCode.CONCURRENT_TRANSACTIONS))
    await time.tick(CONCURRENT_BACKOFF_MS - 1)
    assert len(broker.sent(AddPartitionsToTxnRequest)) == 1
    await time.tick(1)
    assert len(broker.sent(AddPartitionsToTxnRequest)) == 2
    broker.prepare_response(add_partitions_response())
    await settle()
    assert len(broker.sent(ProduceRequest)) == 1


async def test_concurrent_transactions_on_end_txn_is_retried_until_it_completes(broker, producer, time):
    record = await open_transaction_with_a_record(broker, producer)
    broker.prepare_response(produce_response(TOPIC, 0))
    await settle()
    await record
    commit = await run(time, ops(producer).commit_transaction())
    for _ in range(3):
        broker.prepare_response(EndTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS))
        await time.tick(CONCURRENT_BACKOFF_MS)
    assert len(broker.sent(EndTxnRequest)) == 4
    broker.prepare_response(EndTxnResponse())
    await commit


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ErrorCode.INVALID_PRODUCER_EPOCH, InvalidProducerEpochError),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, OutOfOrderSequenceNumberError),
    ],
)
async def test_a_refused_produce_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch(
    broker, producer, time, code, error
):
    """Java's testInvalidProducerEpochFromProduce / testAllowAbortOnProduceFailure: the commit is
    refused, the abort sends EndTxn(abort) and then InitProducerId with the current id and epoch
    (KIP-360), after which a new transaction works."""
    record = await open_transaction_with_a_record(broker, producer)
    broker.prepare_response(produce_response(TOPIC, 0, error=code))
    await settle()
    with pytest.raises(error):
        await record
    txn = producer.txn
    assert txn is not None and txn.state == TransactionState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError) as refused:
        await ops(producer).commit_transaction()
    assert isinstance(refused.value.__cause__, error)
    assert not broker.sent(EndTxnRequest)
    abort = await run(time, ops(producer).abort_transaction())
    (end,) = broker.sent(EndTxnRequest)
    assert not end.request.committed
    broker.prepare_response(EndTxnResponse())
    await settle()
    bump = broker.sent(InitProducerIdRequest)[-1]
    assert (bump.request.producer_id, bump.request.producer_epoch) == (PRODUCER_ID, 0)
    broker.prepare_response(init_producer_id_response(epoch=1))
    await abort
    assert (txn.state, txn.producer_epoch) == (TransactionState.READY, 1)
    ops(producer).begin_transaction()
    producer.send(TOPIC, 0)
    await settle()
    assert len(broker.sent(AddPartitionsToTxnRequest)) == 2
    broker.prepare_response(add_partitions_response())
    await settle()
    again = batch_of(broker.sent(ProduceRequest)[-1], TOPIC, 0)
    assert (again.producer_epoch, again.base_sequence) == (1, 0)


async def test_producer_fenced_on_produce_is_fatal(broker, producer, time):
    record = await open_transaction_with_a_record(broker, producer)
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.PRODUCER_FENCED))
    await settle()
    with pytest.raises(ProducerFencedError):
        await record
    with pytest.raises(ProducerFencedError):
        await ops(producer).commit_transaction()
    with pytest.raises(ProducerFencedError):
        ops(producer).begin_transaction()
    assert not broker.sent(EndTxnRequest)


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
async def test_fencing_on_end_txn_is_fatal(broker, producer, time, code):
    """Java's testFatalErrorOnEndTxn / fencing cases: an old epoch at the coordinator means a newer
    producer took over; every later operation raises the same error."""
    record = await open_transaction_with_a_record(broker, producer)
    broker.prepare_response(produce_response(TOPIC, 0))
    await settle()
    await record
    commit = await run(time, ops(producer).commit_transaction())
    broker.prepare_response(EndTxnResponse(error_code=code))
    with pytest.raises(ProducerFencedError):
        await commit
    assert producer.txn is not None and producer.txn.state == TransactionState.FATAL_ERROR
    for operation in (ops(producer).begin_transaction, ops(producer).abort_transaction):
        with pytest.raises(ProducerFencedError):
            result = operation()
            if asyncio.iscoroutine(result):
                await result
    assert len(broker.sent(EndTxnRequest)) == 1  # never retried


async def test_an_authorization_failure_on_add_partitions_is_fatal(broker, producer, time):
    ops(producer).begin_transaction()
    record = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(add_partitions_response(error=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    await settle()
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await record
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await ops(producer).commit_transaction()
    assert not broker.sent(ProduceRequest)


async def test_init_transactions_fenced_is_fatal_and_a_second_call_raises_it_again(broker, time):
    parts = ProducerParts(broker, time, transactional_id=TXN_ID)
    try:
        init = await run(time, ops(parts).init_transactions())
        broker.prepare_response(init_producer_id_response(error=ErrorCode.PRODUCER_FENCED))
        with pytest.raises(ProducerFencedError):
            await init
        with pytest.raises(ProducerFencedError):
            await ops(parts).init_transactions()
        with pytest.raises((ProducerFencedError, IllegalStateError)):
            ops(parts).begin_transaction()
    finally:
        await parts.close()


async def test_init_transactions_gives_up_after_max_block_ms_when_no_coordinator_is_available(broker, time):
    parts = ProducerParts(broker, time, transactional_id=TXN_ID, max_block_ms=5_000)
    broker.move_coordinator(TRANSACTION, None)
    try:
        init = await run(time, ops(parts).init_transactions())
        await time.tick(4_000)
        assert not init.done()
        await time.tick(1_100)
        with pytest.raises(KafkaTimeoutError):
            await init
        assert not broker.sent(InitProducerIdRequest)
        broker.move_coordinator(TRANSACTION, 0)  # init_transactions() may be called again
        again = await run(time, ops(parts).init_transactions())
        broker.prepare_response(init_producer_id_response())
        await again
        assert parts.txn is not None and parts.txn.state == TransactionState.READY
    finally:
        await parts.close()


class ConsumerGroupMetadata:
    """What a consumer's ``group_metadata()`` carries (KIP-447)."""

    group_id = "g"
    generation_id = 3
    member_id = "member-1"
    group_instance_id = None


def txn_offset_commit_response(error: int = 0) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=TOPIC,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                        partition_index=0, error_code=error
                    )
                ],
            )
        ]
    )


async def test_offsets_are_added_then_committed_to_the_group_coordinator_with_the_generation(
    broker, producer, time
):
    """Java's testRetriableErrorInTxnOffsetCommit: AddOffsetsToTxn to the transaction coordinator,
    then TxnOffsetCommit to the group's coordinator (here another broker), retried on
    COORDINATOR_LOAD_IN_PROGRESS; the call completes only once the offsets are committed."""
    broker.move_coordinator(GROUP, 1)
    ops(producer).begin_transaction()
    sending = await run(
        time, ops(producer).send_offsets_to_transaction({(TOPIC, 0): 11}, ConsumerGroupMetadata())
    )
    (add,) = broker.sent(AddOffsetsToTxnRequest)
    assert (add.node, add.request.group_id) == (0, "g")
    broker.prepare_response(AddOffsetsToTxnResponse())
    await settle()
    (commit,) = broker.sent(TxnOffsetCommitRequest)
    assert commit.node == 1
    assert (commit.request.generation_id, commit.request.member_id) == (3, "member-1")
    assert commit.request.topics[0].partitions[0].committed_offset == 11
    broker.prepare_response(txn_offset_commit_response(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    await settle()
    assert not sending.done()
    await time.tick(BACKOFF_MS)
    assert len(broker.sent(TxnOffsetCommitRequest)) == 2
    broker.prepare_response(txn_offset_commit_response())
    await sending
    assert producer.txn is not None and producer.txn.transaction_started


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
async def test_offsets_refused_for_a_stale_member_make_the_transaction_abortable(
    broker, producer, time, code
):
    """The consumer is no longer the group's member in that generation (KIP-447): the producer
    stays usable, the transaction must be aborted (``CommitFailedError`` as the cause)."""
    ops(producer).begin_transaction()
    sending = await run(
        time, ops(producer).send_offsets_to_transaction({(TOPIC, 0): 1}, ConsumerGroupMetadata())
    )
    broker.prepare_response(AddOffsetsToTxnResponse())
    broker.prepare_response(txn_offset_commit_response(code))
    with pytest.raises(TransactionAbortableError) as refused:
        await sending
    assert isinstance(refused.value.__cause__, CommitFailedError)
    assert producer.txn is not None and producer.txn.state == TransactionState.ABORTABLE_ERROR
    abort = await run(time, ops(producer).abort_transaction())
    broker.prepare_response(EndTxnResponse(), match={"committed": False})
    await abort
    assert producer.txn.state == TransactionState.READY and len(broker.sent(InitProducerIdRequest)) == 1
