"""The transition tables of the classic group and the transaction state machines (Kafka's
validPreviousStates in ``ClassicGroupState`` and ``TransactionState``): every pair of states is
either allowed or refused with the specific internal error, and nothing changes when refused."""

from __future__ import annotations

import itertools

import pytest

from reference_broker.clock import ManualClock
from reference_broker.coordinator.group.state import (
    VALID_PREVIOUS_STATES as GROUP_PREVIOUS,
)
from reference_broker.coordinator.group.state import (
    Group,
    GroupState,
    IllegalGroupTransition,
)
from reference_broker.coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from reference_broker.coordinator.txn.state import (
    VALID_PREVIOUS_STATES as TXN_PREVIOUS,
)
from reference_broker.coordinator.txn.state import (
    IllegalTxnTransition,
    TransactionMetadata,
    TxnState,
)

G = GroupState
T = TxnState

#: Kafka's tables written out as (from, to) pairs, independently of the module's own table.
KAFKA_GROUP_TRANSITIONS = {
    (G.PREPARING_REBALANCE, G.EMPTY),
    (G.STABLE, G.PREPARING_REBALANCE),
    (G.COMPLETING_REBALANCE, G.PREPARING_REBALANCE),
    (G.EMPTY, G.PREPARING_REBALANCE),
    (G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE),
    (G.COMPLETING_REBALANCE, G.STABLE),
    *((s, G.DEAD) for s in G),
}
_ENDED = (T.EMPTY, T.COMPLETE_COMMIT, T.COMPLETE_ABORT)
KAFKA_TXN_TRANSITIONS = {
    *((s, T.EMPTY) for s in _ENDED),
    *((s, T.ONGOING) for s in (*_ENDED, T.ONGOING)),
    (T.ONGOING, T.PREPARE_COMMIT),
    *((s, T.PREPARE_ABORT) for s in (*_ENDED, T.ONGOING, T.PREPARE_EPOCH_FENCE)),
    (T.PREPARE_COMMIT, T.COMPLETE_COMMIT),
    (T.PREPARE_ABORT, T.COMPLETE_ABORT),
    *((s, T.DEAD) for s in _ENDED),
    (T.ONGOING, T.PREPARE_EPOCH_FENCE),
}


def test_group_table_is_kafkas() -> None:
    assert {(prev, to) for to, prevs in GROUP_PREVIOUS.items() for prev in prevs} == KAFKA_GROUP_TRANSITIONS


def test_txn_table_is_kafkas() -> None:
    assert {(prev, to) for to, prevs in TXN_PREVIOUS.items() for prev in prevs} == KAFKA_TXN_TRANSITIONS


@pytest.mark.parametrize(("current", "target"), list(itertools.product(G, G)))
def test_group_transition(current: GroupState, target: GroupState) -> None:
    group = Group("g", now_ms=1)
    group.state = current  # as a group restored at load is set
    if (current, target) in KAFKA_GROUP_TRANSITIONS:
        group.transition(target, now_ms=2)
        assert (group.state, group.state_timestamp_ms) == (target, 2)
    else:
        with pytest.raises(IllegalGroupTransition, match=f"from {current.value} to {target.value}"):
            group.transition(target, now_ms=2)
        assert (group.state, group.state_timestamp_ms) == (current, 1)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(T, T)))
def test_txn_transition(current: TxnState, target: TxnState) -> None:
    meta = TransactionMetadata("tx", producer_id=1, producer_epoch=0, timeout_ms=1000, state=current)
    if (current, target) in KAFKA_TXN_TRANSITIONS:
        meta.transition_to(target)
        assert meta.state is target
    else:
        with pytest.raises(IllegalTxnTransition, match=f"from {current.display} to {target.display}"):
            meta.transition_to(target)
        assert meta.state is current


class _Records:
    def __init__(self) -> None:
        self.written: list[tuple[int, bytes, bytes | None]] = []

    def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.written.append((partition, key, value))


def test_coordinator_refuses_an_illegal_transition_before_writing_it() -> None:
    store = _Records()
    ids = itertools.count(1000)
    coordinator = TransactionCoordinator(
        ManualClock(), TxnConfig(), store, lambda *marker: None, lambda: next(ids)
    )
    pid = coordinator.init_producer_id("tx", 1000).producer_id
    meta = coordinator.txns["tx"]
    written = len(store.written)
    with pytest.raises(IllegalTxnTransition, match="from Empty to PrepareCommit"):
        coordinator._persist(meta, state=TxnState.PREPARE_COMMIT)
    assert (len(store.written), meta.state, meta.producer_id) == (written, TxnState.EMPTY, pid)
