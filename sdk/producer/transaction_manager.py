"""Idempotent-producer state: producer id, epoch and per-partition sequence numbers.

The rules are those of Kafka's Java ``TransactionManager`` for a non-transactional idempotent
producer, so the broker's duplicate and gap detection works as designed:

* A batch gets its sequence when it is first drained and keeps it across retries, so the broker
  recognises a resend of something it already wrote (DUPLICATE_SEQUENCE_NUMBER counts as success).
* Up to five requests per connection may be in flight. Once a batch of a partition is put back
  for a retry, the partition sends one batch at a time, and only the oldest unacknowledged one
  (the next sequence the broker expects): later batches, retried or new, wait until it is
  acknowledged, and the partition returns to pipelining when none of its batches is
  unacknowledged. Without this a batch drained after the retry could be written before an
  earlier one whose failure the client has not heard of yet: Kafka would answer it
  OUT_OF_ORDER_SEQUENCE_NUMBER, a broker that does not check sequences would store the
  partition out of order. Batches that failed with OUT_OF_ORDER_SEQUENCE_NUMBER because an
  earlier one failed are retried after it, in sequence order.
* When the broker has really lost the sequence (UNKNOWN_PRODUCER_ID, or OUT_OF_ORDER_SEQUENCE_NUMBER
  for the batch that is next in line), the producer does not die (aiokafka issue #1017): it gets a
  new epoch (KIP-360: InitProducerId with the current id and epoch where the broker supports v3+,
  a new producer id otherwise) and renumbers the affected partitions' unacknowledged batches from 0.
  Partitions not affected keep their old numbering until their in-flight batches are done.

For a transactional producer (``transactional_id``) it also keeps the transaction's state, as
the Java ``TransactionManager`` does: the state machine (``TransactionState``), the partitions
already in the transaction and those still to be added (a batch is drained only once its
partition was added with AddPartitionsToTxn), and the error model. A failed batch inside a
transaction makes it abortable (``last_error``; sends, commit and offsets then raise
``TransactionAbortableError``); a fenced or unauthorised producer is fatal (``fatal_error``).
Where the idempotent producer would bump its epoch at once, a transactional one fails the batch
instead and bumps the epoch when the transaction is aborted (KIP-360). The requests themselves
are sent by ``sdk.producer.transaction_requests``.

With transaction protocol v2 (KIP-890, ``transaction_v2``) no partition is added explicitly: a
partition joins the transaction with its first Produce request, and ending a transaction gives
the producer a new epoch (``reset_producer_id``), so every transaction numbers its batches from 0.
With two-phase commit (KIP-939) a transaction may also be ``PREPARED``: flushed and waiting for
an outside decision, after which only commit or abort are possible.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from sdk.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from sdk.producer.batch import ProducerBatch, increment_sequence
from sdk.producer.prepared_state import PreparedTxnState

__all__ = ["FATAL_TRANSACTION_ERRORS", "TransactionManager", "TransactionState"]

log = logging.getLogger(__name__)

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
UNKNOWN_PRODUCER_ID = 59
NO_LAST_ACKED = -1
#: No producer id (Kafka's ``RecordBatch.NO_PRODUCER_ID``).
NO_PRODUCER_ID = -1

TopicPartitionKey = tuple[str, int]

#: Errors after which a transactional producer cannot continue (Java's ``transitionToFatalError``
#: cases): only closing it is left; a new producer with the same transactional id takes over.
FATAL_TRANSACTION_ERRORS: tuple[type[KafkaError], ...] = (
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    UnsupportedVersionError,
)


class TransactionState(enum.Enum):
    """Java's ``TransactionManager.State``."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"
    #: KIP-939: flushed by ``prepare_transaction()``, or kept from a previous producer by
    #: ``init_transactions(keep_prepared_transaction=True)``; only commit or abort remain.
    PREPARED = "prepared"


_S = TransactionState
#: Allowed transitions (the target's valid sources), as in Java's ``isTransitionValid``.
_VALID_SOURCES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.INITIALIZING, _S.ABORTING}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING, _S.ABORTING}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.PREPARED: frozenset({_S.IN_TRANSACTION, _S.INITIALIZING}),
    _S.COMMITTING: frozenset({_S.IN_TRANSACTION, _S.COMMITTING, _S.PREPARED}),
    _S.ABORTING: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR, _S.ABORTING, _S.PREPARED}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING, _S.ABORTABLE_ERROR}),
}


class _PartitionSequences:
    """Sequence bookkeeping for one partition under one producer id and epoch."""

    __slots__ = (
        "established_producer_id",
        "in_flight",
        "last_acked",
        "next_sequence",
        "producer_epoch",
        "producer_id",
        "retrying",
        "unresolved",
    )

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.last_acked = NO_LAST_ACKED
        #: Batches with a sequence that are not acknowledged or failed yet (on the wire or queued
        #: for a retry), in sequence order.
        self.in_flight: list[ProducerBatch] = []
        #: Last sequence of a batch that expired after being sent: it may or may not be written.
        self.unresolved: int | None = None
        #: A batch was put back for a retry and ``in_flight`` is not empty yet: only
        #: ``in_flight[0]`` may be sent.
        self.retrying = False
        #: The producer id of the last batch the partition's leader acknowledged: from then on the
        #: leader holds this producer's state and refuses any sequence but the next one. Before,
        #: it takes whatever sequence comes first, so a later batch could overtake a first batch
        #: that is answered NOT_LEADER_OR_FOLLOWER and be written ahead of it.
        self.established_producer_id = NO_PRODUCER_ID

    def forget(self, batch: ProducerBatch) -> None:
        """``batch`` is acknowledged or failed; with nothing left unacknowledged, the partition
        pipelines again."""
        _remove(self.in_flight, batch)
        if not self.in_flight:
            self.retrying = False

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.last_acked = NO_LAST_ACKED
        self.unresolved = None


class TransactionManager:
    """Producer id/epoch and sequence numbers for the sender (idempotence)."""

    def __init__(
        self,
        transactional_id: str | None = None,
        transaction_timeout_ms: float = 60000,
        *,
        two_phase_commit: bool = False,
    ):
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        #: KIP-939: InitProducerId says Enable2Pc (the coordinator never times the transaction
        #: out) and transactions can be prepared and kept.
        self.two_phase_commit = two_phase_commit
        #: KIP-890 transaction protocol v2 in use (decided from the coordinator's ApiVersions by
        #: ``sdk.producer.transaction_operations``): partitions are added implicitly by Produce, offsets by
        #: TxnOffsetCommit v5, and EndTxn v5 gives the next producer id and epoch.
        self.transaction_v2 = False
        #: The prepared transaction's state: set by ``prepare`` or by an InitProducerId that kept
        #: a transaction; None when no transaction is prepared.
        self.prepared_state: PreparedTxnState | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartitionKey, _PartitionSequences] = {}
        self._bump_partitions: set[TopicPartitionKey] = set()
        self.bump_required = False
        self.init_in_progress = False
        self.fresh_id_required = False
        #: A non-retriable InitProducerId failure: the producer cannot continue.
        self.fatal_error: KafkaError | None = None
        self.epoch_bumps = 0
        # -- transactions --
        self.state = TransactionState.UNINITIALIZED
        #: The failure that made the transaction abortable (``__cause__`` of what callers get).
        self.last_error: BaseException | None = None
        #: Partitions AddPartitionsToTxn accepted for the current transaction.
        self.partitions_in_transaction: set[TopicPartitionKey] = set()
        #: Partitions with data waiting to be added, and those whose AddPartitionsToTxn is out.
        self.new_partitions: set[TopicPartitionKey] = set()
        self.pending_partitions: set[TopicPartitionKey] = set()
        #: Whether the coordinator knows of this transaction (partitions or offsets were added),
        #: so that ending it needs an EndTxn.
        self.transaction_started = False
        #: Called after every state change (the producer gates ``send`` on it) and when partitions
        #: wait to be added (the sender wakes up).
        self.on_change: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return (
            f"TransactionManager(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"bump_required={self.bump_required})"
        )

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0 and not self.init_in_progress and not self.bump_required

    # -- the transaction state machine ----------------------------------------------------------

    def _transition(self, target: TransactionState, error: BaseException | None = None) -> None:
        if target == TransactionState.FATAL_ERROR:
            assert isinstance(error, KafkaError)
            self.fatal_error = error
            self.last_error = error
        elif self.state not in _VALID_SOURCES[target]:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: invalid transition from "
                f"{self.state.value} to {target.value}"
            )
        elif target == TransactionState.ABORTABLE_ERROR:
            self.last_error = error
        log.debug("transactional id %r: %s -> %s", self.transactional_id, self.state.value, target.value)
        self.state = target
        if self.on_change is not None:
            self.on_change()

    @property
    def accepts_sends(self) -> bool:
        """Whether ``send`` may append records now (only inside a transaction that is healthy)."""
        return not self.is_transactional or self.state == TransactionState.IN_TRANSACTION

    @property
    def is_completing(self) -> bool:
        return self.state in (TransactionState.COMMITTING, TransactionState.ABORTING)

    @property
    def has_abortable_error(self) -> bool:
        return self.state == TransactionState.ABORTABLE_ERROR

    def raise_if_failed(self) -> None:
        """Raise the fatal error, or ``TransactionAbortableError`` when the transaction must be
        aborted."""
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.state == TransactionState.ABORTABLE_ERROR:
            raise self.abortable_error()

    def abortable_error(self) -> TransactionAbortableError:
        cause = self.last_error
        error = TransactionAbortableError(
            f"transactional producer {self.transactional_id!r}: the transaction cannot be committed "
            f"and must be aborted (abort_transaction()) because of an earlier error: {cause!r}"
        )
        error.__cause__ = cause
        return error

    def check_can_send(self) -> None:
        """Raise what a ``send`` in the current state gets (nothing inside a healthy transaction)."""
        if not self.is_transactional:
            return
        self.raise_if_failed()
        state = self.state
        if state == TransactionState.IN_TRANSACTION:
            return
        if state in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: init_transactions() must complete "
                "before records are sent"
            )
        if state == TransactionState.READY:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: send outside a transaction; "
                "call begin_transaction() first"
            )
        if state == TransactionState.PREPARED:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: cannot send: the transaction is "
                "prepared; only commit_transaction(), abort_transaction() or complete_transaction() "
                "are possible"
            )
        raise IllegalStateError(
            f"transactional producer {self.transactional_id!r}: cannot send while the transaction is "
            f"{state.value}"
        )

    def require_transactional(self, operation: str) -> None:
        if not self.is_transactional:
            raise IllegalStateError(f"{operation}() needs a transactional producer (transactional_id)")

    def begin_initializing(self) -> None:
        self.require_transactional("init_transactions")
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.state not in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: init_transactions() when "
                f"{self.state.value}"
            )
        self._transition(TransactionState.INITIALIZING)

    def initialized(
        self, producer_id: int, producer_epoch: int, kept: PreparedTxnState | None = None
    ) -> None:
        """InitProducerId done; ``kept`` is the prepared transaction it kept (KIP-939), which
        this producer now has to complete."""
        self.set_producer_id(producer_id, producer_epoch)
        if kept is not None:
            self.prepared_state = kept
            self.transaction_started = True
            self._transition(TransactionState.PREPARED)
        else:
            self._transition(TransactionState.READY)

    def prepare(self) -> PreparedTxnState:
        """The open transaction is flushed (``prepare_transaction()``): it is now PREPARED; its
        state is the producer id and epoch, or empty when nothing reached the coordinator."""
        self.raise_if_failed()
        if self.transaction_started:
            state = PreparedTxnState(self.producer_id, self.producer_epoch)
        else:
            state = PreparedTxnState()
        self.prepared_state = state
        self._transition(TransactionState.PREPARED)
        return state

    def require_prepare(self) -> None:
        """Raise unless ``prepare_transaction()`` is possible now."""
        self.require_transactional("prepare_transaction")
        if not self.two_phase_commit:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: prepare_transaction() needs "
                "enable_two_phase_commit=True"
            )
        self.require_in_transaction("prepare_transaction")

    def require_prepared(self, operation: str) -> PreparedTxnState:
        """The prepared transaction's state; ``IllegalStateError`` when none is prepared or kept."""
        self.require_transactional(operation)
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.state != TransactionState.PREPARED or self.prepared_state is None:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: {operation}() without a prepared "
                f"transaction (state: {self.state.value}); prepare_transaction() or "
                "init_transactions(keep_prepared_transaction=True) must give one first"
            )
        return self.prepared_state

    def begin_transaction(self) -> None:
        self.require_transactional("begin_transaction")
        self.raise_if_failed()
        state = self.state
        if state == TransactionState.IN_TRANSACTION:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: a transaction is already in "
                "progress (commit or abort it first)"
            )
        if state != TransactionState.READY:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: begin_transaction() when "
                f"{state.value}" + (
                    "; call init_transactions() first" if state == TransactionState.UNINITIALIZED else ""
                )
            )
        self._transition(TransactionState.IN_TRANSACTION)

    def require_in_transaction(self, operation: str) -> None:
        """For operations only valid inside a healthy transaction (send_offsets_to_transaction)."""
        self.require_transactional(operation)
        self.raise_if_failed()
        if self.state != TransactionState.IN_TRANSACTION:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: {operation}() outside a "
                f"transaction (state: {self.state.value}); call begin_transaction() first"
            )

    def begin_commit(self) -> None:
        self.require_transactional("commit_transaction")
        self.raise_if_failed()
        if self.state not in _VALID_SOURCES[TransactionState.COMMITTING]:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: commit_transaction() without a "
                f"transaction (state: {self.state.value})"
            )
        self._transition(TransactionState.COMMITTING)

    def begin_abort(self) -> None:
        self.require_transactional("abort_transaction")
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.state not in _VALID_SOURCES[TransactionState.ABORTING]:
            raise IllegalStateError(
                f"transactional producer {self.transactional_id!r}: abort_transaction() without a "
                f"transaction (state: {self.state.value})"
            )
        self.new_partitions.clear()
        self._transition(TransactionState.ABORTING)

    def complete_transaction(self) -> None:
        """EndTxn done (or not needed): ready for the next transaction."""
        self.partitions_in_transaction.clear()
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.transaction_started = False
        self.last_error = None
        self.prepared_state = None
        self._transition(TransactionState.READY)

    def fail_abortable(self, error: BaseException) -> None:
        """Something in the transaction failed: only an abort is possible now."""
        if self.state == TransactionState.ABORTING or self.fatal_error is not None:
            return  # an abort is already under way, or nothing is possible any more
        if self.state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING):
            log.warning(
                "transactional id %r: transaction must be aborted: %r",
                self.transactional_id,
                error,
                extra=self.log_fields(error),
            )
            self._transition(TransactionState.ABORTABLE_ERROR, error)

    def fail_fatal(self, error: KafkaError) -> None:
        if self.fatal_error is None:
            fenced = isinstance(error, ProducerFencedError) or error.code == ErrorCode.INVALID_PRODUCER_EPOCH
            log.error(
                "transactional id %r: %s: %r",
                self.transactional_id,
                "fenced by a newer producer with the same transactional id" if fenced else "fatal error",
                error,
                extra={**self.log_fields(error), "kafka_fenced": fenced},
            )
            self._transition(TransactionState.FATAL_ERROR, error)

    def log_fields(self, error: BaseException | None = None) -> dict[str, object]:
        """The ``extra`` fields of this producer's structured log lines."""
        fields: dict[str, object] = {
            "kafka_transactional_id": self.transactional_id,
            "kafka_producer_id": self.producer_id,
            "kafka_producer_epoch": self.producer_epoch,
        }
        if error is not None:
            fields["kafka_error"] = type(error).__name__
        return fields

    def on_transaction_error(self, error: BaseException) -> None:
        """Classify an error met inside the transaction: fatal, or abortable."""
        if isinstance(error, FATAL_TRANSACTION_ERRORS):
            self.fail_fatal(error)
        else:
            self.fail_abortable(error)

    # -- partitions in the transaction ----------------------------------------------------------

    def partition_ready(self, key: TopicPartitionKey) -> bool:
        """Whether the partition is in the transaction; if not, it is queued to be added. With
        transaction protocol v2 every partition is: its Produce request adds it."""
        if key in self.partitions_in_transaction or self.transaction_v2:
            return True
        if (
            self.state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)
            and key not in self.pending_partitions
            and key not in self.new_partitions
        ):
            self.new_partitions.add(key)
            if self.on_change is not None:
                self.on_change()
        return False

    def take_new_partitions(self) -> list[TopicPartitionKey]:
        """The partitions to put in the next AddPartitionsToTxn (now pending)."""
        taken = sorted(self.new_partitions)
        self.pending_partitions.update(taken)
        self.new_partitions.clear()
        return taken

    def partitions_added(self, added: list[TopicPartitionKey]) -> None:
        self.pending_partitions.difference_update(added)
        self.partitions_in_transaction.update(added)
        self.transaction_started = True

    def partitions_not_added(self, keys: list[TopicPartitionKey], retry: bool) -> None:
        self.pending_partitions.difference_update(keys)
        if retry and self.state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING):
            self.new_partitions.update(keys)

    # -- InitProducerId -------------------------------------------------------------------------

    def needs_init(self, nothing_on_the_wire: bool) -> bool:
        """Whether the sender should send InitProducerId now.

        An epoch bump waits until no Produce request is on the wire, so no old-epoch batch of a
        partition being renumbered can still be written after the renumbering.
        """
        if self.fatal_error is not None or self.init_in_progress:
            return False
        if self.is_transactional:
            return False  # init_transactions() and abort_transaction() get the id and epoch
        if self.producer_id < 0:
            return True
        return self.bump_required and nothing_on_the_wire

    def begin_init(self, broker_supports_bump: bool) -> tuple[int, int]:
        """Producer id and epoch to send: the current ones to bump (KIP-360), else -1/-1."""
        self.init_in_progress = True
        if broker_supports_bump and self.producer_id >= 0 and not self.fresh_id_required:
            return self.producer_id, self.producer_epoch
        return -1, -1

    def init_failed(self, fatal: KafkaError | None = None) -> None:
        self.init_in_progress = False
        if fatal is not None:
            self.fatal_error = fatal

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Apply InitProducerId's answer; renumber the partitions that needed a new epoch."""
        bumped = self.producer_id >= 0
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.init_in_progress = False
        self.fresh_id_required = False
        if bumped:
            self.epoch_bumps += 1
            log.info(
                "producer id %d now at epoch %d; renumbering %d partition(s)",
                producer_id,
                producer_epoch,
                len(self._bump_partitions),
            )
        for key in self._bump_partitions:
            self._renumber(key)
        self._bump_partitions.clear()
        self.bump_required = False

    def _renumber(self, key: TopicPartitionKey) -> None:
        state = self._partitions.get(key)
        if state is None:
            return
        state.reset(self.producer_id, self.producer_epoch)
        sequence = 0
        for batch in state.in_flight:
            batch.set_producer_state(self.producer_id, self.producer_epoch, sequence)
            batch.sequence_reset = True
            sequence = increment_sequence(sequence, batch.record_count)
        state.next_sequence = sequence

    def reset_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """EndTxn v5 ended the transaction with a new epoch (or producer id): the next one
        numbers every partition from 0, and any epoch bump a failure asked for is done."""
        self._partitions = {
            key: state for key, state in self._partitions.items() if state.in_flight or state.unresolved
        }
        self._bump_partitions.clear()
        self.bump_required = False
        self.fresh_id_required = False
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch

    def request_epoch_bump(self, topic: str, partition: int) -> None:
        self._bump_partitions.add((topic, partition))
        self.bump_required = True

    # -- draining -------------------------------------------------------------------------------

    def can_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (first in its queue) may be sent now (Java's
        ``shouldStopDrainBatchesForPartition``, inverted)."""
        if not self.has_producer_id:
            return False
        if self.transactional_id is not None and not self.partition_ready((batch.topic, batch.partition)):
            return False
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return True
        if not batch.has_sequence:
            if state.in_flight and state.retrying:
                # A retry is pending: nothing new until every batch sent before it is acknowledged.
                return False
            stale = state.producer_id != self.producer_id or state.producer_epoch != self.producer_epoch
            if state.in_flight and stale:
                # Sequence 0 of the new epoch must not overtake old-epoch batches still pending.
                return False
            if state.in_flight and state.established_producer_id != self.producer_id:
                # The leader has no state of this producer id yet: one batch at a time until it has.
                return False
            # Nothing new while an expired batch's fate is unknown.
            return state.unresolved is None
        # A retry goes only when it is the oldest unacknowledged batch of its partition.
        return not state.in_flight or state.in_flight[0] is batch

    def retry_pending(self, batch: ProducerBatch) -> None:
        """``batch`` goes back to its queue for a retry: from now on its partition sends only its
        oldest unacknowledged batch, one at a time, until none is left unacknowledged."""
        state = self._partitions.get((batch.topic, batch.partition))
        if state is not None and state.in_flight:
            state.retrying = True

    def is_retrying(self, topic: str, partition: int) -> bool:
        """Whether the partition sends only its oldest unacknowledged batch (a retry is pending)."""
        state = self._partitions.get((topic, partition))
        return state is not None and state.retrying and bool(state.in_flight)

    def assign_sequence(self, batch: ProducerBatch) -> None:
        key = (batch.topic, batch.partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _PartitionSequences(self.producer_id, self.producer_epoch)
        elif not state.in_flight and (
            state.producer_id != self.producer_id or state.producer_epoch != self.producer_epoch
        ):
            state.reset(self.producer_id, self.producer_epoch)
        if self.transactional_id is not None:
            batch.builder.set_transactional()
            if self.transaction_v2 and not batch.has_sequence:
                # Its Produce request adds the partition to the transaction (KIP-890).
                self.partitions_in_transaction.add(key)
                self.transaction_started = True
        batch.set_producer_state(state.producer_id, state.producer_epoch, state.next_sequence)
        state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
        state.in_flight.append(batch)

    # -- outcomes -------------------------------------------------------------------------------

    def _state_of(self, batch: ProducerBatch) -> _PartitionSequences | None:
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None or (state.producer_id, state.producer_epoch) != (
            batch.producer_id,
            batch.producer_epoch,
        ):
            return None
        return state

    def on_success(self, batch: ProducerBatch) -> None:
        if not batch.has_sequence:
            return
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return
        state.forget(batch)
        if (state.producer_id, state.producer_epoch) == (batch.producer_id, batch.producer_epoch):
            state.last_acked = max(state.last_acked, batch.last_sequence)
            state.established_producer_id = batch.producer_id

    def on_failure(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch failed for good. Its sequence numbers now leave a gap unless it was written.
        Inside a transaction, the transaction can then only be aborted (or is fatal)."""
        if self.transactional_id is not None and not isinstance(error, TransactionAbortedError):
            self.on_transaction_error(error)
        if not batch.has_sequence:
            return
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return
        state.forget(batch)
        if (state.producer_id, state.producer_epoch) != (batch.producer_id, batch.producer_epoch):
            return
        if isinstance(error, KafkaTimeoutError):
            # Given up on after it was sent: maybe written. Decide once the partition's other
            # batches are done (maybe_resolve_sequences).
            last = batch.last_sequence
            state.unresolved = last if state.unresolved is None else max(state.unresolved, last)
        else:
            # Rejected by the broker, so not written: later sequences would leave a gap.
            self.request_epoch_bump(batch.topic, batch.partition)

    def can_retry(self, batch: ProducerBatch, error: KafkaError) -> bool:
        """Whether a batch that failed with ``error`` should be retried (Java's ``canRetry``)."""
        code = error.code
        state = self._state_of(batch)
        if code == UNKNOWN_PRODUCER_ID:
            # The broker lost our state for this partition (e.g. it was truncated or deleted).
            # An epoch bump waits until no Produce request is on the wire, so this answer is to
            # the batch's current numbering, never to one a bump already replaced: bump again.
            return self._bump_or_fail(batch)
        if code == OUT_OF_ORDER_SEQUENCE_NUMBER:
            if state is None:
                return self._bump_or_fail(batch)
            next_in_line = (
                batch.base_sequence == increment_sequence(state.last_acked, 1)
                if (state.last_acked != NO_LAST_ACKED)
                else batch.base_sequence == 0
            )
            if state.unresolved is None and (batch.sequence_reset or not next_in_line):
                # An earlier batch failed and will be retried first; this one follows it.
                return True
            if state.unresolved is None or batch.base_sequence == increment_sequence(state.unresolved, 1):
                # A real gap: the broker does not have what we think it acknowledged.
                return self._bump_or_fail(batch)
            return True
        return error.retriable

    def _bump_or_fail(self, batch: ProducerBatch) -> bool:
        """The partition needs a new epoch. The idempotent producer bumps now and retries the
        batch; a transactional one fails it (the transaction becomes abortable) and bumps when
        the transaction is aborted, as Java's producer does."""
        self.request_epoch_bump(batch.topic, batch.partition)
        return self.transactional_id is None

    def replace_split(self, batch: ProducerBatch, halves: list[ProducerBatch]) -> None:
        """``batch`` was split: its halves take its place (and its sequence numbers)."""
        if self.transactional_id is not None:
            for half in halves:
                half.builder.set_transactional()
                half.payload = None
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return
        for index, candidate in enumerate(state.in_flight):
            if candidate is batch:
                state.in_flight[index : index + 1] = halves
                return

    def maybe_resolve_sequences(self) -> None:
        """Settle partitions whose expired batch's fate is now known."""
        for (topic, partition), state in self._partitions.items():
            if state.unresolved is None or state.in_flight:
                continue
            if state.last_acked != NO_LAST_ACKED and state.last_acked >= state.unresolved:
                state.unresolved = None  # a later batch was acknowledged, so the expired one was written
            else:
                state.unresolved = None
                self.request_epoch_bump(topic, partition)

    def sequence_state(self, topic: str, partition: int) -> tuple[int, int, int] | None:
        """(next_sequence, last_acked, in-flight batches) for a partition, for tests and debugging."""
        state = self._partitions.get((topic, partition))
        if state is None:
            return None
        return state.next_sequence, state.last_acked, len(state.in_flight)


def _remove(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for index, candidate in enumerate(batches):
        if candidate is batch:
            del batches[index]
            return
