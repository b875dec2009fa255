"""The idempotence and transaction rules of TransactionManager, on real batches (no broker needed)."""

from __future__ import annotations

import pytest

from sdk.errors import (
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    UnknownProducerIdError,
)
from sdk.producer.batch import ProducerBatch, increment_sequence
from sdk.producer.transaction_manager import FATAL_TRANSACTION_ERRORS, TransactionManager, TransactionState
from sdk.records import Compression, RecordBatch, RecordBatchBuilder


def _batch(records: int = 3, partition: int = 0) -> ProducerBatch:
    builder = RecordBatchBuilder(Compression.NONE)
    for i in range(records):
        builder.append(1000 + i, None, b"v%d" % i)
    return ProducerBatch("t", partition, builder, 0.0)


def _manager(established: bool = True) -> TransactionManager:
    """An idempotent manager with producer id 7, epoch 0. ``established``: partitions 0 and 1 of
    "t" had a first batch (one record, sequence 0) acknowledged, so their leaders hold the
    producer's state and the partitions pipeline; the tests' own batches start at sequence 1."""
    txn = TransactionManager()
    assert txn.needs_init(True)
    assert txn.begin_init(True) == (-1, -1)
    txn.set_producer_id(7, 0)
    if established:
        for partition in (0, 1):
            txn.on_success(_drain(txn, _batch(1, partition)))
    return txn


def _drain(txn: TransactionManager, batch: ProducerBatch) -> ProducerBatch:
    assert txn.can_drain(batch)
    txn.assign_sequence(batch)
    batch.close()
    return batch


def test_a_partition_new_to_its_leader_sends_one_batch_until_the_first_is_acknowledged():
    """The leader takes any first sequence from a producer id it has no state of: a second batch
    sent beside the first could be written ahead of it when the first is answered NOT_LEADER."""
    txn = _manager(established=False)
    first = _drain(txn, _batch())
    assert not txn.can_drain(_batch())
    assert txn.can_retry(first, NotLeaderOrFollowerError())
    txn.retry_pending(first)
    assert txn.can_drain(first) and not txn.can_drain(_batch())
    txn.on_success(first)
    second, third = _drain(txn, _batch()), _drain(txn, _batch())  # established: pipelining
    assert (first.base_sequence, second.base_sequence, third.base_sequence) == (0, 3, 6)


def test_sequences_are_assigned_at_drain_and_stamped_in_the_batch():
    txn = _manager()
    b1, b2 = _drain(txn, _batch(3)), _drain(txn, _batch(2))
    assert (b1.base_sequence, b2.base_sequence) == (1, 4)
    header = RecordBatch(b2.close())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 4)
    header.validate()
    txn.on_success(b1)
    txn.on_success(b2)
    assert txn.sequence_state("t", 0) == (6, 5, 0)


def test_no_producer_id_no_drain():
    txn = TransactionManager()
    assert not txn.can_drain(_batch())
    assert txn.needs_init(False)


def test_retry_goes_only_when_first_in_line():
    txn = _manager()
    assert txn.can_drain(_batch())  # with nothing unacknowledged, only a producer id is needed
    b1, b2 = _drain(txn, _batch()), _drain(txn, _batch())
    assert txn.can_drain(_batch())  # pipelining: nothing has failed
    assert txn.can_retry(b1, NotLeaderOrFollowerError())
    txn.retry_pending(b1)
    assert txn.can_retry(b2, OutOfOrderSequenceNumberError())  # behind b1: plain retry
    txn.retry_pending(b2)
    assert not txn.bump_required
    assert not txn.can_drain(b2)
    assert txn.can_drain(b1)
    assert not txn.can_drain(_batch())  # nothing new overtakes the retries
    txn.on_success(b1)
    assert txn.can_drain(b2)
    assert not txn.can_drain(_batch())
    txn.on_success(b2)
    assert not txn.is_retrying("t", 0)
    assert txn.can_drain(_batch())


def test_a_retry_holds_new_batches_until_batches_sent_before_it_are_answered():
    # b2 is on the wire when b1's NOT_LEADER_OR_FOLLOWER arrives; b1's retry is acknowledged
    # first. A new batch must still wait: b2 may yet fail, and go after anything sent now.
    txn = _manager()
    b1, b2 = _drain(txn, _batch()), _drain(txn, _batch())
    assert txn.can_retry(b1, NotLeaderOrFollowerError())
    txn.retry_pending(b1)
    txn.on_success(b1)
    assert txn.is_retrying("t", 0)
    assert not txn.can_drain(_batch())
    assert txn.can_retry(b2, NotLeaderOrFollowerError())
    txn.retry_pending(b2)
    assert txn.can_drain(b2)
    txn.on_success(b2)
    assert txn.can_drain(_batch())
    # Another partition was never held.
    assert txn.can_drain(_batch(partition=1))


def test_a_failed_batch_ends_the_hold_once_nothing_is_unacknowledged():
    txn = _manager()
    b1, b2 = _drain(txn, _batch()), _drain(txn, _batch())
    txn.retry_pending(b1)
    txn.on_failure(b1, InvalidRecordError())
    assert not txn.can_drain(_batch())  # b2 still unacknowledged (and a bump is due)
    txn.on_failure(b2, InvalidRecordError())
    assert not txn.is_retrying("t", 0)


def test_out_of_order_for_the_next_batch_bumps_the_epoch_and_renumbers():
    txn = _manager()
    b1, b2, b3 = (_drain(txn, _batch(2)) for _ in range(3))
    txn.on_success(b1)
    assert txn.can_retry(b2, OutOfOrderSequenceNumberError())  # b2 is next in line: a real gap
    assert txn.bump_required
    assert txn.can_retry(b3, OutOfOrderSequenceNumberError())
    assert not txn.can_drain(b2)  # nothing moves during the bump
    assert not txn.needs_init(False)  # waits for the wire to be empty
    assert txn.needs_init(True)
    assert txn.begin_init(True) == (7, 0)  # KIP-360: bump the current epoch
    txn.set_producer_id(7, 1)
    assert (b2.producer_epoch, b2.base_sequence, b3.base_sequence) == (1, 0, 2)
    assert b2.sequence_reset and b2.payload is None
    assert RecordBatch(b2.close()).producer_epoch == 1
    assert txn.can_drain(b2) and not txn.can_drain(b3)
    assert txn.epoch_bumps == 1


def test_unknown_producer_id_bumps_and_old_brokers_get_a_new_id():
    txn = _manager()
    b1 = _drain(txn, _batch())
    assert txn.can_retry(b1, UnknownProducerIdError())
    assert txn.needs_init(True)
    assert txn.begin_init(False) == (-1, -1)  # InitProducerId < v3 cannot bump
    txn.set_producer_id(8, 0)
    assert (b1.producer_id, b1.base_sequence) == (8, 0)


def test_failed_batch_leaves_a_gap_that_a_bump_closes():
    txn = _manager()
    b1, b2 = _drain(txn, _batch()), _drain(txn, _batch())
    txn.on_failure(b1, InvalidRecordError())
    assert txn.bump_required
    txn.begin_init(True)
    txn.set_producer_id(7, 1)
    assert b2.base_sequence == 0


def test_expired_batch_is_unresolved_until_later_batches_tell():
    txn = _manager()
    b1, b2 = _drain(txn, _batch()), _drain(txn, _batch())
    txn.on_failure(b1, DeliveryTimeoutError("expired"))
    assert not txn.bump_required
    assert not txn.can_drain(_batch())  # new batches wait while b1's fate is unknown
    txn.on_success(b2)  # b2 written after b1, so b1 was written too
    txn.maybe_resolve_sequences()
    assert not txn.bump_required
    assert txn.can_drain(_batch())

    b3, b4 = _drain(txn, _batch()), _drain(txn, _batch())
    txn.on_failure(b3, DeliveryTimeoutError("expired"))
    assert txn.can_retry(b4, OutOfOrderSequenceNumberError())  # right after the unresolved one
    assert txn.bump_required


def test_stale_partitions_keep_their_epoch_until_drained():
    txn = _manager()
    a1 = _drain(txn, _batch(partition=0))
    b1 = _drain(txn, _batch(partition=1))
    txn.on_success(a1)
    assert txn.can_retry(b1, NotLeaderOrFollowerError())
    txn.request_epoch_bump("t", 0)
    txn.begin_init(True)
    txn.set_producer_id(7, 1)
    assert (b1.producer_epoch, b1.base_sequence) == (0, 1)  # partition 1 keeps its numbering
    assert not txn.can_drain(_batch(partition=1))  # new epoch must not overtake b1
    assert txn.can_drain(b1)
    txn.on_success(b1)
    fresh = _drain(txn, _batch(partition=1))
    assert (fresh.producer_epoch, fresh.base_sequence) == (1, 0)


def test_sequence_wraps_like_kafka():
    assert increment_sequence(2**31 - 2, 1) == 2**31 - 1
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3


# -- transactions: the state machine, partitions and the error model --------------------------


def _transactional() -> TransactionManager:
    txn = TransactionManager("tx")
    assert not txn.needs_init(True)  # init_transactions() gets the id, not the sender
    txn.begin_initializing()
    txn.initialized(11, 3)
    assert txn.state == TransactionState.READY
    return txn


def test_wrong_state_calls_raise_illegal_state():
    txn = TransactionManager("tx")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        txn.begin_transaction()
    with pytest.raises(IllegalStateError, match="init_transactions"):
        txn.check_can_send()
    txn.begin_initializing()
    txn.initialized(11, 3)
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        txn.check_can_send()
    with pytest.raises(IllegalStateError, match="without a transaction"):
        txn.begin_commit()
    with pytest.raises(IllegalStateError, match="without a transaction"):
        txn.begin_abort()
    with pytest.raises(IllegalStateError, match="outside a transaction"):
        txn.require_in_transaction("send_offsets_to_transaction")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        txn.begin_initializing()
    txn.begin_transaction()
    with pytest.raises(IllegalStateError, match="already in progress"):
        txn.begin_transaction()
    txn.check_can_send()
    txn.begin_commit()
    with pytest.raises(IllegalStateError, match="committing"):
        txn.check_can_send()
    txn.complete_transaction()
    assert txn.state == TransactionState.READY


def test_idempotent_manager_refuses_transactional_calls():
    txn = _manager()
    txn.check_can_send()  # not transactional: always allowed
    with pytest.raises(IllegalStateError, match="transactional_id"):
        txn.begin_transaction()


def test_batches_wait_until_their_partition_is_added_and_are_marked_transactional():
    txn = _transactional()
    changes = []
    txn.on_change = lambda: changes.append(txn.state)
    txn.begin_transaction()
    b0, b1 = _batch(partition=0), _batch(partition=1)
    assert not txn.can_drain(b0) and not txn.can_drain(b1)
    assert txn.new_partitions == {("t", 0), ("t", 1)}
    taken = txn.take_new_partitions()
    assert taken == [("t", 0), ("t", 1)] and not txn.new_partitions
    assert not txn.can_drain(b0)  # pending: not asked for twice
    assert not txn.new_partitions
    txn.partitions_added(taken)
    assert txn.transaction_started
    drained = _drain(txn, b0)
    header = RecordBatch(drained.close())
    assert header.is_transactional and (header.producer_id, header.producer_epoch) == (11, 3)
    txn.begin_commit()
    txn.complete_transaction()
    assert not txn.partitions_in_transaction and not txn.transaction_started
    assert changes  # the producer hears of every state change


def test_failed_send_makes_the_transaction_abortable_and_abort_bumps_the_epoch():
    txn = _transactional()
    txn.begin_transaction()
    batch = _batch()
    txn.can_drain(batch)
    txn.partitions_added(txn.take_new_partitions())
    _drain(txn, batch)
    # A real sequence gap is not retried inside a transaction: the batch fails instead.
    assert not txn.can_retry(batch, UnknownProducerIdError())
    txn.on_failure(batch, UnknownProducerIdError())
    assert txn.state == TransactionState.ABORTABLE_ERROR and txn.bump_required
    for call in (txn.check_can_send, txn.begin_commit, lambda: txn.require_in_transaction("x")):
        with pytest.raises(TransactionAbortableError) as info:
            call()
        assert isinstance(info.value.__cause__, UnknownProducerIdError)
    txn.begin_abort()
    assert txn.state == TransactionState.ABORTING
    txn.set_producer_id(11, 4)  # the bump after EndTxn(abort)
    txn.complete_transaction()
    assert txn.state == TransactionState.READY and not txn.bump_required and txn.has_producer_id
    txn.begin_transaction()
    again = _batch()
    txn.can_drain(again)
    txn.partitions_added(txn.take_new_partitions())
    assert (_drain(txn, again).producer_epoch, again.base_sequence) == (4, 0)


def test_fencing_is_fatal_and_aborted_batches_are_not_errors():
    txn = _transactional()
    txn.begin_transaction()
    txn.on_failure(_batch(), TransactionAbortedError("aborted"))
    assert txn.state == TransactionState.IN_TRANSACTION
    txn.on_failure(_batch(), ProducerFencedError("fenced"))
    assert txn.state == TransactionState.FATAL_ERROR
    for call in (txn.check_can_send, txn.begin_commit, txn.begin_abort, txn.begin_transaction):
        with pytest.raises(ProducerFencedError):
            call()
    assert isinstance(ProducerFencedError(), FATAL_TRANSACTION_ERRORS)


def test_out_of_order_inside_a_transaction_is_abortable_not_retried():
    txn = _transactional()
    txn.begin_transaction()
    b0, b1, b2 = _batch(1), _batch(), _batch()
    txn.can_drain(b0)
    txn.partitions_added(txn.take_new_partitions())
    txn.on_success(_drain(txn, b0))  # the leader holds the producer's state: pipelining
    _drain(txn, b1)
    _drain(txn, b2)
    # b2 is behind b1, which is being retried: b2 follows it (no gap yet).
    assert txn.can_retry(b1, NotLeaderOrFollowerError())
    txn.retry_pending(b1)
    assert txn.can_retry(b2, OutOfOrderSequenceNumberError())
    assert not txn.bump_required
    # b1 is next in line: the broker really lost sequences. Inside a transaction that fails the
    # batch (the transaction must be aborted) and the abort bumps the epoch (KIP-360).
    assert not txn.can_retry(b1, OutOfOrderSequenceNumberError())
    assert txn.bump_required
    txn.on_failure(b1, OutOfOrderSequenceNumberError())
    assert txn.state == TransactionState.ABORTABLE_ERROR
    assert not txn.needs_init(True)  # the abort does the bump, not the sender


def test_unknown_producer_id_renumbers_unacknowledged_batches_from_zero_in_order():
    txn = _manager()
    b1, b2, b3 = (_drain(txn, _batch(2)) for _ in range(3))
    txn.on_success(b1)
    assert txn.can_retry(b2, UnknownProducerIdError())
    txn.retry_pending(b2)
    assert txn.can_retry(b3, UnknownProducerIdError())
    txn.retry_pending(b3)
    assert not txn.can_drain(b2)  # no sends until the new epoch
    txn.begin_init(True)
    txn.set_producer_id(7, 1)
    assert [(b.producer_epoch, b.base_sequence) for b in (b2, b3)] == [(1, 0), (1, 2)]
    assert txn.can_drain(b2) and not txn.can_drain(b3) and not txn.can_drain(_batch())
    txn.on_success(b2)
    assert txn.can_drain(b3)
    txn.on_success(b3)
    fresh = _drain(txn, _batch())
    assert (fresh.producer_epoch, fresh.base_sequence) == (1, 4)
