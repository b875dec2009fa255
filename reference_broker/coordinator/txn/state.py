"""A transactional id's state, as Kafka's ``TransactionMetadata`` keeps it."""

from __future__ import annotations

import dataclasses
import enum


class TxnState(enum.Enum):
    """Kafka's ``TransactionState``: (code in TransactionLogValue, name ListTransactions reports)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_code(cls, code: int) -> TxnState:
        for state in cls:
            if state.code == code:
                return state
        raise ValueError(f"unknown transaction state {code}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.display == name), None)


class IllegalTxnTransition(Exception):
    """A transactional id was asked to move to a state its current one cannot lead to (a
    coordinator bug, as Kafka's IllegalStateException: the request fails and nothing is written)."""


_T = TxnState
_ENDED = frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT})
#: Kafka's ``TransactionState.VALID_PREVIOUS_STATES``: state -> the states it may be entered from.
#: PrepareAbort from an ended state is transactions v2's abort of a transaction the coordinator
#: has no partition of yet.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _T.EMPTY: _ENDED,
    _T.ONGOING: _ENDED | {_T.ONGOING},
    _T.PREPARE_COMMIT: frozenset({_T.ONGOING}),
    _T.PREPARE_ABORT: _ENDED | {_T.ONGOING, _T.PREPARE_EPOCH_FENCE},
    _T.COMPLETE_COMMIT: frozenset({_T.PREPARE_COMMIT}),
    _T.COMPLETE_ABORT: frozenset({_T.PREPARE_ABORT}),
    _T.DEAD: _ENDED,
    _T.PREPARE_EPOCH_FENCE: frozenset({_T.ONGOING}),
}


def check_txn_transition(transactional_id: str, current: TxnState, target: TxnState) -> None:
    """Raise ``IllegalTxnTransition`` unless ``current`` may lead to ``target``."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTxnTransition(
            f"transaction {transactional_id} cannot move from {current.display} to {target.display}"
            f" (only from {', '.join(sorted(s.display for s in VALID_PREVIOUS_STATES[target]))})"
        )


#: States in which no transaction is open: a new one may begin, the id may expire.
COMPLETE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka bumps to a new producer id rather than past this epoch (Short.MaxValue - 1).
MAX_EPOCH = 32766
#: KIP-939: a two-phase-commit transaction is one whose timeout is Integer.MAX_VALUE (Kafka's
#: ``isDistributedTwoPhaseCommitTxn``); it is never aborted for its age.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1
#: Kafka's ``TransactionVersion``: TV_2 (KIP-890 part 2) bumps the epoch at every EndTxn.
TV_0, TV_2 = 0, 2


@dataclasses.dataclass
class TransactionMetadata:
    """One transactional id: its producer id and epoch and its current transaction.

    ``last_producer_epoch`` is the epoch before the latest bump, so a producer retrying an
    InitProducerId whose answer it lost (KIP-360) is recognised rather than fenced.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    #: Markers of a prepared transaction not all written yet (a failed append is retried).
    markers_pending: bool = False
    #: A partition leader fenced this coordinator's marker (TRANSACTION_COORDINATOR_FENCED or an
    #: older producer epoch): a newer coordinator owns the transaction, so this one sends no more
    #: of its markers and writes no completion (Kafka's ``removeMarkersForTxn``), until reloaded.
    markers_cancelled: bool = False
    #: Kafka's ``clientTransactionVersion``: TV_2 when the transaction is driven by a v2 client
    #: (EndTxn v5, implicit adds); decides whether ending it bumps the epoch.
    client_txn_version: int = TV_0
    #: Prepare states: the producer id the client gets once complete (epoch overflow, TV_2);
    #: a kept KIP-939 transaction (Ongoing): the client's producer id.
    next_producer_id: int = NO_PRODUCER_ID
    #: A kept KIP-939 transaction (Ongoing): the epoch of the producer that kept it, while
    #: ``producer_epoch`` stays the transaction's own (Kafka's dual identity). Prepare states:
    #: the epoch that goes with ``next_producer_id`` (-1 for 0).
    next_producer_epoch: int = NO_PRODUCER_EPOCH

    def is_(self, *states: TxnState) -> bool:
        return self.state in states

    def transition_to(self, state: TxnState) -> None:
        """Move to ``state`` in memory, which the current state must be allowed to lead to
        (``VALID_PREVIOUS_STATES``)."""
        check_txn_transition(self.transactional_id, self.state, state)
        self.state = state

    @property
    def is_two_phase_commit(self) -> bool:
        return self.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def is_kept(self) -> bool:
        """An ongoing transaction kept by InitProducerId(keepPreparedTxn): only ending it is allowed."""
        return self.state is TxnState.ONGOING and self.next_producer_epoch >= 0

    @property
    def client_producer_id(self) -> int:
        """The producer id a current client uses (the keeper's, for a kept transaction)."""
        return self.next_producer_id if self.is_kept and self.next_producer_id >= 0 else self.producer_id

    @property
    def client_epoch(self) -> int:
        """The epoch a current client uses (the keeper's, for a kept transaction)."""
        return self.next_producer_epoch if self.is_kept else self.producer_epoch
