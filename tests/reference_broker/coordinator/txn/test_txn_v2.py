"""Transactions v2 (KIP-890 part 2) and two-phase commit (KIP-939) in the transaction coordinator,
on a real Storage and a ManualClock: the epoch bump of every TV_2 end and its markers, the new
producer id at epoch overflow, retried EndTxn v5 answers, implicit adds, TV_2 state reloaded after
a crash between prepare and markers, and 2PC transactions that never time out, are kept by
keepPreparedTxn (also across a restart) and ended by their keeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_broker.clock import ManualClock
from reference_broker.coordinator.txn import records
from reference_broker.coordinator.txn.state import (
    MAX_EPOCH,
    TV_2,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TxnState,
)
from reference_broker.storage import TRANSACTION_STATE
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import InvalidProducerEpochError, KafkaStorageError
from sdk.records import ControlType, iter_batches
from tests.reference_broker.coordinator.txn.test_txn_service import Node

TIMEOUT_MS = 10_000


def markers(node: Node, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(producer id, epoch, control type) of every marker in the partition."""
    data = node.storage.read(topic, partition, 0, 1 << 20, min_one=True, committed=False)
    return [
        (b.producer_id, b.producer_epoch, b.control_record().type)
        for b in iter_batches(bytes(data.records))
        if b.is_control
    ]


async def test_every_v2_end_bumps_the_epoch_and_the_markers_carry_it(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)], TV_2) == 0
    node.produce("data", 0, pid, 0, 0, [b"one"])
    committed = c.end_transaction_v2("tx", pid, 0, commit=True)
    assert (committed.error, committed.producer_id, committed.producer_epoch) == (0, pid, 1)
    assert markers(node, "data", 0) == [(pid, 1, ControlType.COMMIT)]
    meta = c.txns["tx"]
    assert (meta.state, meta.producer_epoch, meta.client_txn_version) == (TxnState.COMPLETE_COMMIT, 1, TV_2)
    # The ended transaction's epoch is fenced everywhere: the coordinator and the partition.
    assert c.add_partitions("tx", pid, 0, [("data", 0)], TV_2) == E.PRODUCER_FENCED
    with pytest.raises(InvalidProducerEpochError):
        node.produce("data", 0, pid, 0, 1, [b"late"])
    # The next transaction runs under the bumped epoch, sequences from 0.
    assert c.add_partitions("tx", pid, 1, [("data", 0)], TV_2) == 0
    node.produce("data", 0, pid, 1, 0, [b"two"])
    aborted = c.end_transaction_v2("tx", pid, 1, commit=False)
    assert (aborted.error, aborted.producer_epoch) == (0, 2)
    assert markers(node, "data", 0)[-1] == (pid, 2, ControlType.ABORT)
    assert node.committed_values("data", 0) == [b"one"]
    # The client version is in __transaction_state (tagged field 2).
    last = list(node.storage.read_batches(TRANSACTION_STATE, records.partition_for("tx", 3)))[-1]
    assert records.parse_value(next(iter(last)).value).client_txn_version == TV_2


async def test_a_retried_v2_end_gets_the_same_answer(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)], TV_2) == 0
    first = c.end_transaction_v2("tx", pid, 0, commit=True)
    again = c.end_transaction_v2("tx", pid, 0, commit=True)
    assert (again.error, again.producer_id, again.producer_epoch) == (0, pid, first.producer_epoch)
    assert c.end_transaction_v2("tx", pid, 0, commit=False).error == E.INVALID_TXN_STATE
    assert len(markers(node, "data", 0)) == 1  # nothing written twice
    # Older than the retry's epoch is a fenced producer.
    c.txns["tx"].producer_epoch = 5
    assert c.end_transaction_v2("tx", pid, 3, commit=True).error == E.PRODUCER_FENCED
    # With the current epoch: a commit of nothing is refused, an abort of nothing bumps the epoch.
    assert c.end_transaction_v2("tx", pid, 5, commit=True).error == E.INVALID_TXN_STATE
    empty_abort = c.end_transaction_v2("tx", pid, 5, commit=False)
    assert (empty_abort.error, empty_abort.producer_epoch) == (0, 6)
    assert c.txns["tx"].state is TxnState.COMPLETE_ABORT


async def test_epoch_overflow_moves_the_client_to_a_new_producer_id(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    c.txns["tx"].producer_epoch = MAX_EPOCH  # 32766: the last epoch a client may use
    assert c.add_partitions("tx", pid, MAX_EPOCH, [("data", 0)], TV_2) == 0
    node.produce("data", 0, pid, MAX_EPOCH, 0, [b"last"])
    result = c.end_transaction_v2("tx", pid, MAX_EPOCH, commit=True)
    assert result.error == 0 and result.producer_id != pid and result.producer_epoch == 0
    assert markers(node, "data", 0) == [(pid, MAX_EPOCH + 1, ControlType.COMMIT)]
    meta = c.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (result.producer_id, 0, pid)
    # A retry from the old producer id is recognised.
    retry = c.end_transaction_v2("tx", pid, MAX_EPOCH, commit=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (0, result.producer_id, 0)
    # The new producer id works at once.
    new_pid = result.producer_id
    assert c.add_partitions("tx", new_pid, 0, [("data", 1)], TV_2) == 0
    node.produce("data", 1, new_pid, 0, 0, [b"first"])
    assert c.end_transaction_v2("tx", new_pid, 0, commit=True).producer_epoch == 1
    assert node.committed_values("data", 0) == [b"last"] and node.committed_values("data", 1) == [b"first"]


async def test_v2_prepare_left_by_a_crash_rolls_forward_with_the_bumped_epoch(
    tmp_path: Path, clock: ManualClock
) -> None:
    first = await Node(tmp_path, clock).start()
    first.storage.create_topic("data", 2, {})
    c = first.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0), ("data", 1)], TV_2) == 0
    first.produce("data", 0, pid, 0, 0, [b"a"])
    first.produce("data", 1, pid, 0, 0, [b"b"])

    def broken(*args: object) -> None:
        raise KafkaStorageError("disk gone")

    c.write_marker = broken  # the "crash": PrepareCommit written, no marker
    result = c.end_transaction_v2("tx", pid, 0, commit=True)
    assert (result.error, result.producer_epoch) == (0, 1)
    assert c.txns["tx"].state is TxnState.PREPARE_COMMIT
    await first.stop()

    second = await Node(tmp_path, clock).start()
    try:
        meta = second.coordinator.txns["tx"]
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
        assert meta.client_txn_version == TV_2
        assert markers(second, "data", 0) == [(pid, 1, ControlType.COMMIT)]
        assert second.committed_values("data", 1) == [b"b"]
        retry = second.coordinator.end_transaction_v2("tx", pid, 0, commit=True)
        assert (retry.error, retry.producer_epoch) == (0, 1)
    finally:
        await second.stop()


async def test_two_phase_commit_transactions_never_time_out(node: Node, clock: ManualClock) -> None:
    c = node.coordinator
    plain = c.init_producer_id("plain", 1000)
    two_pc = c.init_producer_id("2pc", 1000, enable_2pc=True)
    assert c.txns["2pc"].timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    assert c.add_partitions("plain", plain.producer_id, 0, [("data", 0)]) == 0
    assert c.add_partitions("2pc", two_pc.producer_id, 0, [("data", 1)]) == 0
    clock.advance(10 * 24 * 3600 * 1000)
    assert c.abort_timed_out_transactions() == 1
    assert c.txns["plain"].state is TxnState.COMPLETE_ABORT
    assert c.txns["2pc"].state is TxnState.ONGOING


async def test_kept_transaction_survives_a_restart_and_its_keeper_commits_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    first = await Node(tmp_path, clock).start()
    first.storage.create_topic("data", 2, {})
    c = first.coordinator
    pid = c.init_producer_id("tx", 1000, enable_2pc=True).producer_id
    assert c.add_partitions("tx", pid, 0, [("data", 0)], TV_2) == 0
    first.produce("data", 0, pid, 0, 0, [b"prepared"])
    await first.stop()

    second = await Node(tmp_path, clock).start()
    try:
        c = second.coordinator
        assert c.txns["tx"].state is TxnState.ONGOING
        kept = c.init_producer_id("tx", 1000, enable_2pc=True, keep_prepared=True)
        assert (kept.error, kept.producer_id, kept.producer_epoch) == (0, pid, 1)
        assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (pid, 0)
        # The old producer is fenced; the keeper may not add to the kept transaction.
        assert c.add_partitions("tx", pid, 0, [("data", 1)], TV_2) == E.PRODUCER_FENCED
        assert c.add_partitions("tx", pid, 1, [("data", 1)], TV_2) == E.INVALID_TXN_STATE
        assert c.end_transaction_v2("tx", pid, 0, commit=True).error == E.PRODUCER_FENCED
        assert c.verify_produce(pid, 0, ("data", 0)) == E.INVALID_PRODUCER_EPOCH
        # The dual identity is persisted as Kafka does (NextProducerId/NextProducerEpoch).
        last = list(second.storage.read_batches(TRANSACTION_STATE, records.partition_for("tx", 3)))[-1]
        value = records.parse_value(next(iter(last)).value)
        assert (value.producer_epoch, value.next_producer_id, value.next_producer_epoch) == (0, pid, 1)
        await second.stop()
        third = await Node(tmp_path, clock).start()
        second = third
        c = third.coordinator
        assert c.txns["tx"].is_kept and c.txns["tx"].client_epoch == 1
        # Kept again by a second restarted keeper: the ongoing epoch is still the data's.
        again = c.init_producer_id("tx", 1000, enable_2pc=True, keep_prepared=True)
        assert (again.producer_epoch, again.ongoing_producer_epoch) == (2, 0)
        ended = c.end_transaction_v2("tx", pid, 2, commit=True)
        assert (ended.error, ended.producer_epoch) == (0, 3)
        assert markers(third, "data", 0) == [(pid, 3, ControlType.COMMIT)]
        assert third.committed_values("data", 0) == [b"prepared"]
    finally:
        await second.stop()


async def test_keep_prepared_needs_a_two_phase_transaction(node: Node) -> None:
    c = node.coordinator
    none_open = c.init_producer_id("idle", 1000, enable_2pc=True, keep_prepared=True)
    assert (none_open.error, none_open.ongoing_producer_id, none_open.ongoing_producer_epoch) == (0, -1, -1)
    pid = c.init_producer_id("plain", 1000).producer_id
    assert c.add_partitions("plain", pid, 0, [("data", 0)]) == 0
    refused = c.init_producer_id("plain", 1000, enable_2pc=True, keep_prepared=True)
    assert refused.error == E.INVALID_TXN_STATE
    # Without keepPreparedTxn an ongoing 2PC transaction is aborted, as any other.
    two_pc = c.init_producer_id("2pc", 1000, enable_2pc=True).producer_id
    assert c.add_partitions("2pc", two_pc, 0, [("data", 1)]) == 0
    node.produce("data", 1, two_pc, 0, 0, [b"gone"])
    assert c.init_producer_id("2pc", 1000, enable_2pc=True).error == 0
    assert node.committed_values("data", 1) == []
    assert markers(node, "data", 1) == [(two_pc, 1, ControlType.ABORT)]


@pytest.mark.parametrize("v2_end", [True, False], ids=["EndTxn-v5", "EndTxn-v4"])
async def test_keeper_past_the_last_epoch_gets_a_new_producer_id(node: Node, v2_end: bool) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", 1000, enable_2pc=True).producer_id
    c.txns["tx"].producer_epoch = MAX_EPOCH
    assert c.add_partitions("tx", pid, MAX_EPOCH, [("data", 0)], TV_2) == 0
    node.produce("data", 0, pid, MAX_EPOCH, 0, [b"kept"])
    kept = c.init_producer_id("tx", 1000, enable_2pc=True, keep_prepared=True)
    keeper = kept.producer_id
    assert kept.error == 0 and keeper != pid and kept.producer_epoch == 0
    assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (pid, MAX_EPOCH)
    assert c.add_partitions("tx", pid, MAX_EPOCH, [("data", 1)], TV_2) == E.INVALID_PRODUCER_ID_MAPPING
    if v2_end:
        ended = c.end_transaction_v2("tx", keeper, 0, commit=True)
        assert (ended.error, ended.producer_id, ended.producer_epoch) == (0, keeper, 1)
        again = c.end_transaction_v2("tx", keeper, 0, commit=True)
        assert (again.error, again.producer_id, again.producer_epoch) == (0, keeper, 1)
    else:
        assert c.end_transaction("tx", keeper, 0, commit=True) == 0
    # The transaction's own producer id is marked with the highest epoch, above all its data.
    assert markers(node, "data", 0) == [(pid, MAX_EPOCH + 1, ControlType.COMMIT)]
    assert node.committed_values("data", 0) == [b"kept"]
    meta = c.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch) == (keeper, 1 if v2_end else 0)
    assert meta.previous_producer_id == pid
    assert c.add_partitions("tx", keeper, meta.producer_epoch, [("data", 1)], TV_2) == 0
