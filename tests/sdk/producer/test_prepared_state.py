"""KIP-939's client-side pieces without a broker: ``PreparedTxnState``'s text form, the
``enable_two_phase_commit`` option's validation, and the transaction state machine around a
prepared transaction (what may and may not follow ``prepare_transaction``), plus transaction
protocol v2's bookkeeping (a drained batch puts its partition in the transaction; EndTxn v5's
next epoch renumbers from 0)."""

from __future__ import annotations

import pytest

import sdk
from sdk import Producer
from sdk.errors import ConfigError, IllegalStateError
from sdk.producer.batch import ProducerBatch
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.transaction_manager import TransactionManager, TransactionState
from sdk.records import Compression, RecordBatchBuilder


def test_state_text_round_trips_and_empty_forms():
    state = PreparedTxnState(4000, 7)
    assert str(state) == "4000:7"
    assert PreparedTxnState.parse(str(state)) == state
    assert PreparedTxnState.parse(" 4000:7 ") == state
    empty = PreparedTxnState()
    assert not empty.has_transaction and state.has_transaction
    assert str(empty) == ""
    for text in ("", "none", "NONE", None, "-1:-1"):
        assert PreparedTxnState.parse(text) == empty
    assert sdk.PreparedTxnState is PreparedTxnState
    with pytest.raises(AttributeError):
        state.epoch = 8  # type: ignore[misc]


@pytest.mark.parametrize("text", ["4000", "a:b", "4000:7:1", "-5:3", "4000:40000", ":"])
def test_malformed_state_text_is_refused(text):
    with pytest.raises(ValueError, match="prepared transaction state"):
        PreparedTxnState.parse(text)


def test_two_phase_commit_option_is_validated():
    with pytest.raises(ConfigError, match=r"enable_two_phase_commit.*transactional_id"):
        Producer(bootstrap_servers="localhost:1", enable_two_phase_commit=True)
    with pytest.raises(ConfigError, match="enable_two_phase_commit"):
        Producer(bootstrap_servers="localhost:1", transactional_id="t", enable_two_phase_commit="yes")  # type: ignore[arg-type]
    producer = Producer(bootstrap_servers="localhost:1", transactional_id="t", enable_two_phase_commit=True)
    assert producer.config.enable_two_phase_commit
    assert producer.prepared_transaction_state is None and producer.transaction_version is None


def _in_transaction(two_phase_commit: bool = True) -> TransactionManager:
    txn = TransactionManager("tid", two_phase_commit=two_phase_commit)
    txn.begin_initializing()
    txn.initialized(10, 3)
    txn.begin_transaction()
    return txn


def test_prepare_then_only_commit_or_abort_are_possible():
    txn = _in_transaction()
    txn.require_prepare()
    txn.transaction_started = True
    state = txn.prepare()
    assert state == PreparedTxnState(10, 3) and txn.state == TransactionState.PREPARED
    assert txn.require_prepared("complete_transaction") == state
    with pytest.raises(IllegalStateError, match="prepared"):
        txn.check_can_send()
    with pytest.raises(IllegalStateError):
        txn.begin_transaction()
    with pytest.raises(IllegalStateError):
        txn.require_in_transaction("send_offsets_to_transaction")
    with pytest.raises(IllegalStateError):
        txn.require_prepare()
    txn.begin_commit()
    txn.complete_transaction()
    assert txn.state == TransactionState.READY and txn.prepared_state is None
    with pytest.raises(IllegalStateError, match="without a prepared transaction"):
        txn.require_prepared("complete_transaction")


def test_prepare_needs_two_phase_commit_and_an_open_transaction():
    with pytest.raises(IllegalStateError, match="enable_two_phase_commit"):
        _in_transaction(two_phase_commit=False).require_prepare()
    txn = TransactionManager("tid", two_phase_commit=True)
    txn.begin_initializing()
    txn.initialized(10, 3)
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        txn.require_prepare()


def test_nothing_sent_prepares_the_empty_state_and_abort_is_allowed():
    txn = _in_transaction()
    assert txn.prepare() == PreparedTxnState()
    txn.begin_abort()
    txn.complete_transaction()
    assert txn.state == TransactionState.READY


def test_a_kept_transaction_is_prepared_after_init():
    txn = TransactionManager("tid", two_phase_commit=True)
    txn.begin_initializing()
    txn.initialized(10, 5, PreparedTxnState(10, 4))
    assert txn.state == TransactionState.PREPARED and txn.transaction_started
    assert txn.require_prepared("complete_transaction") == PreparedTxnState(10, 4)


def _batch(topic: str, partition: int) -> ProducerBatch:
    builder = RecordBatchBuilder(Compression.NONE)
    builder.append(1000, None, b"v")
    return ProducerBatch(topic, partition, builder, 0.0)


def test_v2_partitions_join_when_drained_and_the_next_epoch_starts_at_zero():
    txn = _in_transaction()
    txn.transaction_v2 = True
    assert txn.partition_ready(("t", 0)) and not txn.new_partitions  # no AddPartitionsToTxn
    batch = _batch("t", 0)
    assert txn.can_drain(batch)
    txn.assign_sequence(batch)
    assert txn.transaction_started and ("t", 0) in txn.partitions_in_transaction
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (10, 3, 0)
    txn.on_success(batch)
    txn.request_epoch_bump("t", 0)
    txn.begin_commit()
    txn.reset_producer_id(10, 4)  # EndTxn v5's answer
    assert not txn.bump_required and txn.has_producer_id
    txn.complete_transaction()
    txn.begin_transaction()
    after = _batch("t", 0)
    txn.assign_sequence(after)
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (10, 4, 0)
