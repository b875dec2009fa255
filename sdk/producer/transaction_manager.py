"""Idempotent-producer state: producer id, epoch and per-partition sequence numbers.

The rules are those of Kafka's Java ``TransactionManager`` for a non-transactional idempotent
producer, so the broker's duplicate and gap detection works as designed:

* A batch gets its sequence when it is first drained and keeps it across retries, so the broker
  recognises a resend of something it already wrote (DUPLICATE_SEQUENCE_NUMBER counts as success).
* Up to five requests per connection may be in flight. A retried batch is only resent when it is
  the oldest unacknowledged one of its partition; later batches that failed with
  OUT_OF_ORDER_SEQUENCE_NUMBER because an earlier one failed are retried after it, in order.
* When the broker has really lost the sequence (UNKNOWN_PRODUCER_ID, or OUT_OF_ORDER_SEQUENCE_NUMBER
  for the batch that is next in line), the producer does not die (aiokafka issue #1017): it gets a
  new epoch (KIP-360: InitProducerId with the current id and epoch where the broker supports v3+,
  a new producer id otherwise) and renumbers the affected partitions' unacknowledged batches from 0.
  Partitions not affected keep their old numbering until their in-flight batches are done.

Transactions (``transactional_id``) are stored for the issue that adds them; the transactional
operations raise ``TransactionsNotImplementedError`` until then.
"""

from __future__ import annotations

import logging

from sdk.errors import (
    KafkaError,
    KafkaTimeoutError,
    TransactionsNotImplementedError,
)
from sdk.producer.batch import ProducerBatch, increment_sequence

__all__ = ["TransactionManager"]

log = logging.getLogger(__name__)

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
UNKNOWN_PRODUCER_ID = 59
NO_LAST_ACKED = -1

TopicPartitionKey = tuple[str, int]


class _PartitionSequences:
    """Sequence bookkeeping for one partition under one producer id and epoch."""

    __slots__ = ("in_flight", "last_acked", "next_sequence", "producer_epoch", "producer_id", "unresolved")

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

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.last_acked = NO_LAST_ACKED
        self.unresolved = None


class TransactionManager:
    """Producer id/epoch and sequence numbers for the sender (idempotence)."""

    def __init__(self, transactional_id: str | None = None, transaction_timeout_ms: float = 60000):
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
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

    # -- InitProducerId -------------------------------------------------------------------------

    def needs_init(self, nothing_on_the_wire: bool) -> bool:
        """Whether the sender should send InitProducerId now.

        An epoch bump waits until no Produce request is on the wire, so no old-epoch batch of a
        partition being renumbered can still be written after the renumbering.
        """
        if self.fatal_error is not None or self.init_in_progress:
            return False
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

    def request_epoch_bump(self, topic: str, partition: int) -> None:
        self._bump_partitions.add((topic, partition))
        self.bump_required = True

    # -- draining -------------------------------------------------------------------------------

    def can_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (first in its queue) may be sent now (Java's
        ``shouldStopDrainBatchesForPartition``, inverted)."""
        if not self.has_producer_id:
            return False
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return True
        if not batch.has_sequence:
            stale = state.producer_id != self.producer_id or state.producer_epoch != self.producer_epoch
            if state.in_flight and stale:
                # Sequence 0 of the new epoch must not overtake old-epoch batches still pending.
                return False
            # Nothing new while an expired batch's fate is unknown.
            return state.unresolved is None
        # A retry goes only when it is the oldest unacknowledged batch of its partition.
        return not state.in_flight or state.in_flight[0] is batch

    def assign_sequence(self, batch: ProducerBatch) -> None:
        key = (batch.topic, batch.partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _PartitionSequences(self.producer_id, self.producer_epoch)
        elif not state.in_flight and (
            state.producer_id != self.producer_id or state.producer_epoch != self.producer_epoch
        ):
            state.reset(self.producer_id, self.producer_epoch)
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
        _remove(state.in_flight, batch)
        if (state.producer_id, state.producer_epoch) == (batch.producer_id, batch.producer_epoch):
            state.last_acked = max(state.last_acked, batch.last_sequence)

    def on_failure(self, batch: ProducerBatch, error: BaseException) -> None:
        """A batch failed for good. Its sequence numbers now leave a gap unless it was written."""
        if not batch.has_sequence:
            return
        state = self._partitions.get((batch.topic, batch.partition))
        if state is None:
            return
        _remove(state.in_flight, batch)
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
            self.request_epoch_bump(batch.topic, batch.partition)
            return True
        if code == OUT_OF_ORDER_SEQUENCE_NUMBER:
            if state is None:
                self.request_epoch_bump(batch.topic, batch.partition)
                return True
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
                self.request_epoch_bump(batch.topic, batch.partition)
            return True
        return error.retriable

    def replace_split(self, batch: ProducerBatch, halves: list[ProducerBatch]) -> None:
        """``batch`` was split: its halves take its place (and its sequence numbers)."""
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

    # -- transactions (a later issue) -----------------------------------------------------------

    def require_transactions(self, operation: str) -> None:
        raise TransactionsNotImplementedError(
            f"{operation}() is not implemented yet: transactional_id={self.transactional_id!r} is "
            "stored, and records are sent idempotently, but transactions come with a later release"
        )


def _remove(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for index, candidate in enumerate(batches):
        if candidate is batch:
            del batches[index]
            return
