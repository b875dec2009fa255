"""The decisions the transaction coordinator owns for several handlers: the transactions-v2 gate
(``transaction.version``), the implicit add of Produce v12+ / TxnOffsetCommit v5 with Kafka's
error (PRODUCER_FENCED as INVALID_PRODUCER_EPOCH), AddOffsetsToTxn and TxnOffsetCommit through
the group coordinator, and the marker on ``__consumer_offsets`` publishing pending offsets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reference_broker.clock import ManualClock
from reference_broker.coordinator.group.state import CommittedOffset
from reference_broker.coordinator.txn.service import TransactionalOffsetCommit
from reference_broker.coordinator.txn.state import TxnState
from reference_broker.storage import CONSUMER_OFFSETS
from sdk.protocol.errors import ErrorCode as E
from tests.reference_broker.coordinator.txn.test_txn_service import Node

TIMEOUT_MS = 10_000


@pytest.fixture
async def tv1_node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    """A node whose broker finalizes transaction.version 1 (no transactions v2)."""
    started = await Node(tmp_path, clock, **{"transaction.version": 1}).start()
    started.storage.create_topic("data", 2, {})
    yield started
    await started.stop()


def _commit(pid: int, epoch: int, group_id: str = "g", offset: int = 7) -> TransactionalOffsetCommit:
    return TransactionalOffsetCommit(
        transactional_id="tx",
        producer_id=pid,
        producer_epoch=epoch,
        group_id=group_id,
        generation=-1,
        member_id="",
        group_instance_id=None,
        offsets={("data", 0): CommittedOffset(offset, -1, "", 0)},
    )


async def test_implicit_add_joins_the_partition_and_answers_a_fenced_epoch_as_invalid_epoch(
    node: Node,
) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partition_implicitly("tx", pid, 0, ("data", 0)) == E.NONE
    assert c.txns["tx"].state is TxnState.ONGOING and ("data", 0) in c.txns["tx"].partitions
    c.init_producer_id("tx", TIMEOUT_MS)  # a new producer of the id fences epoch 0
    assert c.add_partition_implicitly("tx", pid, 0, ("data", 1)) == E.INVALID_PRODUCER_EPOCH
    assert c.add_partition_implicitly("tx", pid + 1000, 1, ("data", 1)) == E.INVALID_PRODUCER_ID_MAPPING


async def test_without_transactions_v2_the_implicit_add_and_endtxn_v5_are_unsupported(tv1_node: Node) -> None:
    c = tv1_node.coordinator
    assert not c.transactions_v2_enabled
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert c.add_partition_implicitly("tx", pid, 0, ("data", 0)) == E.UNSUPPORTED_VERSION
    assert c.end_transaction_v2("tx", pid, 0, commit=True).error == E.UNSUPPORTED_VERSION
    assert c.txns["tx"].state is TxnState.EMPTY
    # The explicit form still works.
    assert c.add_partitions("tx", pid, 0, [("data", 0)]) == E.NONE
    assert c.end_transaction("tx", pid, 0, commit=True) == E.NONE


async def test_txn_offset_commit_needs_the_offsets_partition_in_the_transaction(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert node.txn.commit_offsets(_commit(pid, 0, group_id=""), add_partition=False) == {
        ("data", 0): E.INVALID_GROUP_ID
    }
    assert node.txn.add_offsets("tx", pid, 0, "") == E.INVALID_GROUP_ID
    # Without AddOffsetsToTxn (and before v5) the group's partition is not in the transaction.
    assert node.txn.commit_offsets(_commit(pid, 0), add_partition=False) == {("data", 0): E.INVALID_TXN_STATE}
    assert node.txn.add_offsets("tx", pid, 0, "g") == E.NONE
    offsets_tp = (CONSUMER_OFFSETS, node.groups.coordinator.partition_for("g"))
    assert offsets_tp in c.txns["tx"].partitions
    assert node.txn.commit_offsets(_commit(pid, 0), add_partition=False) == {("data", 0): E.NONE}


async def test_txn_offset_commit_v5_adds_the_partition_and_the_commit_marker_publishes(node: Node) -> None:
    c = node.coordinator
    pid = c.init_producer_id("tx", TIMEOUT_MS).producer_id
    assert node.txn.commit_offsets(_commit(pid, 0, offset=42), add_partition=True) == {("data", 0): E.NONE}
    assert (CONSUMER_OFFSETS, node.groups.coordinator.partition_for("g")) in c.txns["tx"].partitions
    error, found = node.groups.coordinator.fetch_offsets("g", [("data", 0)], require_stable=True)
    assert found[("data", 0)][1] == E.UNSTABLE_OFFSET_COMMIT
    assert c.end_transaction_v2("tx", pid, 0, commit=True).error == E.NONE
    error, found = node.groups.coordinator.fetch_offsets("g", [("data", 0)], require_stable=True)
    committed, code = found[("data", 0)]
    assert (error, code, committed is not None and committed.offset) == (E.NONE, E.NONE, 42)
    # A fenced epoch is answered as the produce path answers it.
    assert node.txn.commit_offsets(_commit(pid, 0), add_partition=True) == {
        ("data", 0): E.INVALID_PRODUCER_EPOCH
    }
