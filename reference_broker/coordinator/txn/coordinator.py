"""The transaction coordinator: Kafka's ``TransactionCoordinator`` state machine on one node.

Every transactional id has a ``TransactionMetadata``. A change of state is first written to
``__transaction_state`` (through a ``TxnStore``) and applied only once written, so the log is
always at least as new as memory. Ending a transaction is Kafka's two-phase sequence:

1. write PrepareCommit / PrepareAbort (from here on the outcome is decided: after a crash the
   loader rolls it forward or back),
2. write a COMMIT / ABORT marker to every partition of the transaction (``MarkerWriter``; the
   ``__consumer_offsets`` partition of a group whose offsets were sent to the transaction is one of
   them, and its marker makes the group coordinator publish or drop those offsets),
3. write CompleteCommit / CompleteAbort.

Transaction protocol v2 (KIP-890 part 2, a client ending with EndTxn v5): the prepare record
carries the epoch bumped by one, the markers carry it (so a late write of the ended transaction's
epoch is refused by every partition and by the implicit add), and the client continues with it;
an epoch that cannot be bumped any more moves the client to a new producer id (``next_producer_id``,
epoch 0). The partitions join implicitly (Produce v12+, TxnOffsetCommit v5 call ``add_partitions``
with TV_2). A retried EndTxn whose answer was lost is recognised by its epoch being one below the
completed transaction's and gets the same answer again.

Two-phase commit (KIP-939): InitProducerId with enable2Pc gives the transaction the timeout
Integer.MAX_VALUE, which is what marks it as 2PC (never aborted for its age, persisted with it).
keepPreparedTxn keeps such an ongoing transaction instead of aborting it: the transaction keeps its
producer id and epoch (they are in its data) and the keeper gets the next epoch, stored as
``next_producer_epoch`` (Kafka's NextProducerEpoch tag; past the last epoch, a new producer id in
``next_producer_id``); the keeper may only end it. Its markers carry the transaction's producer
id with an epoch above the keeper's (the highest epoch when the keeper has a new producer id).

All of it runs synchronously on the event loop (markers are in-process appends), so a client sees
the prepared states only when a marker append failed; those are retried by the periodic task and
answer CONCURRENT_TRANSACTIONS meanwhile. Time comes from a ``Clock``; no method blocks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from reference_broker.clock import Clock
from reference_broker.coordinator.txn import records
from reference_broker.coordinator.txn.remote_markers import MarkerInFlightError, MarkersCancelledError
from reference_broker.coordinator.txn.state import (
    COMPLETE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TV_0,
    TV_2,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TransactionMetadata,
    TxnState,
    check_txn_transition,
)
from reference_broker.coordinator.write_errors import write_error_code
from reference_broker.patterns import compile_client_pattern
from sdk.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("reference_broker.txn_coordinator")
#: transactional ids looked at per step of the expiry round (one tombstone write each at most)
EXPIRY_STEP = 1000

E = ErrorCode
TopicPartition = tuple[str, int]


class TxnStore(Protocol):
    """Where the coordinator's records go: one ``__transaction_state`` partition per id."""

    def write(self, partition: int, key: bytes, value: bytes | None) -> int | None:
        """Append one record; raises on failure (nothing is then applied). None when the record
        is durable at once (single node); else the offset the partition's high watermark must
        reach for it to be replicated (cluster mode: ``replication_done`` follows)."""


class MarkerWriter(Protocol):
    def __call__(
        self, tp: TopicPartition, commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write a COMMIT/ABORT marker to ``tp``; raises ``KafkaError`` on failure."""


@dataclasses.dataclass
class Unreplicated:
    """A transactional id's change written to the leader's log but not yet to its ISR (cluster
    mode): ``previous`` is the metadata before it (None: the id was new), restored if the write
    never replicates; ``offset`` is where the high watermark must get."""

    previous: TransactionMetadata | None
    offset: int


@dataclasses.dataclass(frozen=True)
class TxnConfig:
    """The broker settings the coordinator obeys (Kafka's names in ``reference_broker.config``)."""

    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    num_partitions: int = 50


#: The highest epoch there is (Short.MaxValue): a fence or the last TV_2 bump may reach it.
EPOCH_CEILING = 32767


@dataclasses.dataclass
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    #: KIP-939 keepPreparedTxn: the kept transaction's producer id and epoch (-1/-1 if none).
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclasses.dataclass
class EndResult:
    """EndTxn's answer: the error, and (EndTxn v5) the producer id and epoch to continue with."""

    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


#: Marker errors after which the partition needs no marker any more (Kafka's
#: TransactionMarkerRequestCompletionHandler drops these partitions).
_MARKER_DONE_ERRORS = frozenset(
    {E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED}
)


class TransactionCoordinator:
    """Every transactional id of this broker."""

    def __init__(
        self,
        clock: Clock,
        config: TxnConfig,
        store: TxnStore | None,
        write_marker: MarkerWriter,
        next_producer_id: Callable[[], int],
    ):
        self.clock = clock
        self.config = config
        self.store = store
        self.write_marker = write_marker
        self.next_producer_id = next_producer_id
        #: The node's finalized ``transaction.version`` (``reference_broker.features``), read at
        #: each request as Kafka's coordinator reads its metadata cache: below TV_2 what needs
        #: transactions v2 (EndTxn v5, the implicit adds) is answered UNSUPPORTED_VERSION.
        self.transaction_version: Callable[[], int] = lambda: TV_2
        self.txns: dict[str, TransactionMetadata] = {}
        self.by_producer_id: dict[int, str] = {}
        #: True until ``__transaction_state`` has been read at start-up.
        self.loading = False
        #: Cluster mode: the ``__transaction_state`` partitions this node leads (their ids are
        #: coordinated here, the others answer NOT_COORDINATOR); None on a single node (all).
        self.owned: set[int] | None = None
        #: Cluster mode: owned partitions still being read (COORDINATOR_LOAD_IN_PROGRESS).
        self.loading_partitions: set[int] = set()
        #: Called once a PrepareCommit/PrepareAbort is written, before any marker (a fault point
        #: for crash tests; the service sets it from the environment).
        self.after_prepare: Callable[[TransactionMetadata], None] = lambda meta: None
        #: Called before the markers of a prepared transaction are written (a fault point for
        #: tests that stop the coordinator there; the service sets it from the environment).
        self.before_markers: Callable[[TransactionMetadata], None] = lambda meta: None
        #: Cluster mode: the leader epoch of each owned ``__transaction_state`` partition when this
        #: node was elected its leader (Kafka's coordinator epoch, carried by every marker so a
        #: deposed coordinator's markers are fenced); 0 where unknown (a single node).
        self.coordinator_epochs: dict[int, int] = {}
        #: Cluster mode: changes applied in memory whose records the ISR does not hold yet. The id
        #: answers CONCURRENT_TRANSACTIONS meanwhile (Kafka's pending state) and a prepared
        #: transaction's markers wait for it; ``replication_done`` keeps or undoes the change.
        self.unreplicated: dict[str, Unreplicated] = {}
        #: Cluster mode: told (transactional id, partition, offset) after each write that must
        #: replicate; it calls ``replication_done`` once the ISR holds it or it failed.
        self.await_replication: Callable[[str, int, int], None] = lambda tid, partition, offset: None
        #: a round of ``expire_transactional_ids`` still has steps to run
        self._expiry_running = False

    # -- persistence ---------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return records.partition_for(transactional_id, self.config.num_partitions)

    def owns(self, transactional_id: str) -> bool:
        """Whether this node coordinates ``transactional_id`` (always on a single node)."""
        return self.owned is None or self.partition_for(transactional_id) in self.owned

    def not_ready(self, transactional_id: str) -> int:
        """COORDINATOR_LOAD_IN_PROGRESS while the id's partition is read, NOT_COORDINATOR when
        another node coordinates it (cluster mode), 0 when this node may answer for it."""
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if self.owned is None:
            return 0
        partition = self.partition_for(transactional_id)
        if partition not in self.owned:
            return E.NOT_COORDINATOR
        return E.COORDINATOR_LOAD_IN_PROGRESS if partition in self.loading_partitions else 0

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch this node's markers for ``transactional_id`` carry."""
        return self.coordinator_epochs.get(self.partition_for(transactional_id), 0)

    def busy(self, transactional_id: str) -> int:
        """CONCURRENT_TRANSACTIONS while the id's last change is not replicated yet, else 0."""
        return E.CONCURRENT_TRANSACTIONS if transactional_id in self.unreplicated else 0

    def _persist(self, meta: TransactionMetadata, **changes: object) -> int:
        """Write ``meta`` with ``changes`` applied, then apply them; an error code (0 if stored).
        In cluster mode the change stays ``unreplicated`` until the ISR holds its record."""
        target = dataclasses.replace(meta, **changes)  # type: ignore[arg-type]  # field names as keywords
        if "state" in changes:
            check_txn_transition(meta.transactional_id, meta.state, target.state)
        target.last_update_ms = self.clock.now_ms()
        offset = None
        if self.store is not None:
            try:
                offset = self.store.write(
                    self.partition_for(meta.transactional_id),
                    records.key(meta.transactional_id),
                    records.value(target, target.state, target.partitions),
                )
            except Exception as exc:
                code = write_error_code(exc)
                log.warning("writing transaction %s to __transaction_state failed (answered %s): %s",
                            meta.transactional_id, E(code).name, exc)
                return code
        if offset is not None and meta.transactional_id not in self.unreplicated:
            previous = None
            if self.txns.get(meta.transactional_id) is meta:
                previous = dataclasses.replace(meta, partitions=set(meta.partitions))
            self.unreplicated[meta.transactional_id] = Unreplicated(previous, offset)
        elif offset is not None:
            self.unreplicated[meta.transactional_id].offset = offset
        if target.producer_id != meta.producer_id:
            self.by_producer_id.pop(meta.producer_id, None)
        for f in dataclasses.fields(meta):
            setattr(meta, f.name, getattr(target, f.name))
        self.txns[meta.transactional_id] = meta
        self.by_producer_id[meta.producer_id] = meta.transactional_id
        if offset is not None:
            self.await_replication(meta.transactional_id, self.partition_for(meta.transactional_id), offset)
        return 0

    def replication_done(self, transactional_id: str, offset: int, error: int) -> None:
        """Cluster mode: the write of ``transactional_id`` ending at ``offset`` is replicated
        (``error`` 0): a prepared transaction's markers go out now. Or it failed (the partition
        moved, the ISR fell below ``min.insync.replicas``, time ran out): the change is undone in
        memory, as Kafka drops the pending state, and the client was answered the error."""
        entry = self.unreplicated.get(transactional_id)
        if entry is None or offset < entry.offset:
            return  # unloaded meanwhile, or a later write is awaited
        del self.unreplicated[transactional_id]
        meta = self.txns.get(transactional_id)
        if meta is None:
            return
        if not error:
            if meta.markers_pending or meta.is_(*PREPARED):
                self._finish_prepared(meta)
            return
        log.warning("transaction %s: its write to __transaction_state was not replicated (%s); undone",
                    transactional_id, E(error).name)
        self._restore(meta, entry.previous)

    def _restore(self, meta: TransactionMetadata, previous: TransactionMetadata | None) -> None:
        for pid in (meta.producer_id, meta.client_producer_id):
            if self.by_producer_id.get(pid) == meta.transactional_id:
                del self.by_producer_id[pid]
        if previous is None:
            self.txns.pop(meta.transactional_id, None)
            return
        completing = previous.is_(*PREPARED) and meta.is_(*COMPLETE)
        for f in dataclasses.fields(meta):
            setattr(meta, f.name, getattr(previous, f.name))
        if meta.is_(TxnState.PREPARE_EPOCH_FENCE):
            meta.state = TxnState.ONGOING  # the fence never happened
        if completing:  # its markers are written: only the completion is to be written again
            meta.partitions = set()
            meta.markers_pending = True
        self.by_producer_id[meta.producer_id] = meta.transactional_id
        self.by_producer_id[meta.client_producer_id] = meta.transactional_id

    # -- InitProducerId ------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_pid: int = -1,
        expected_epoch: int = -1,
        *,
        enable_2pc: bool = False,
        keep_prepared: bool = False,
    ) -> InitResult:
        """Kafka's ``handleInitProducerId`` for a transactional id (with KIP-939's two flags; the
        handler checks that two-phase commit is enabled)."""
        if not transactional_id:
            return InitResult(E.INVALID_REQUEST)
        if enable_2pc:
            timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS  # Kafka's resolvedTxnTimeoutMs: any request timeout
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        if not_ready := self.not_ready(transactional_id) or self.busy(transactional_id):
            return InitResult(not_ready)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.is_(TxnState.DEAD):
            meta = TransactionMetadata(
                transactional_id, self.next_producer_id(), NO_PRODUCER_EPOCH, timeout_ms
            )
            error = self._persist(meta, producer_epoch=0, state=TxnState.EMPTY, partitions=set(), start_ms=-1)
            return (
                InitResult(error, meta.producer_id, meta.producer_epoch) if not error else InitResult(error)
            )
        if meta.markers_pending or meta.is_(*PREPARED):
            self._finish_prepared(meta)
            if meta.is_(*PREPARED):
                return InitResult(E.CONCURRENT_TRANSACTIONS)
        retry = False
        client_pid, client_epoch = meta.client_producer_id, meta.client_epoch
        if expected_pid >= 0:
            if meta.producer_epoch == NO_PRODUCER_EPOCH:
                pass
            elif expected_pid == client_pid:
                if expected_epoch == meta.last_producer_epoch and expected_epoch != client_epoch:
                    retry = meta.is_(*COMPLETE)
                elif expected_epoch != client_epoch:
                    return InitResult(E.PRODUCER_FENCED)
            elif expected_pid == meta.previous_producer_id and expected_epoch >= MAX_EPOCH:
                retry = meta.is_(*COMPLETE)
            else:
                return InitResult(E.PRODUCER_FENCED)
        if retry:  # the producer lost our answer to its bump: the same answer again
            return InitResult(0, meta.producer_id, meta.producer_epoch)
        if meta.is_(TxnState.ONGOING):
            if keep_prepared:
                return self._keep(meta)
            # The previous producer's transaction is aborted (with a fencing epoch) first.
            error = self._abort_with_fence(meta)
            if error or meta.is_(*PREPARED):
                return InitResult(error or E.CONCURRENT_TRANSACTIONS)
        return self._bump(meta, timeout_ms)

    def _keep(self, meta: TransactionMetadata) -> InitResult:
        """KIP-939 keepPreparedTxn: the ongoing 2PC transaction stays open; its producer is fenced
        by the next epoch, which the caller gets to end it with."""
        if not meta.is_two_phase_commit:
            return InitResult(E.INVALID_TXN_STATE)  # Kafka: only a 2PC transaction can be kept
        keeper_id, keeper_epoch = meta.client_producer_id, meta.client_epoch + 1
        if keeper_epoch > MAX_EPOCH:  # Kafka's rotation: the keeper continues as a new producer
            keeper_id, keeper_epoch = self.next_producer_id(), 0
        error = self._persist(
            meta,
            next_producer_id=keeper_id,
            next_producer_epoch=keeper_epoch,
            last_producer_epoch=meta.client_epoch,
        )
        if error:
            return InitResult(error)
        self.by_producer_id[keeper_id] = meta.transactional_id
        log.info(
            "kept the ongoing transaction of %s (producer %d epoch %d); keeper %d epoch %d",
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            keeper_id,
            keeper_epoch,
        )
        return InitResult(0, keeper_id, keeper_epoch, meta.producer_id, meta.producer_epoch)

    def _bump(self, meta: TransactionMetadata, timeout_ms: int) -> InitResult:
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            error = self._persist(
                meta,
                previous_producer_id=meta.producer_id,
                producer_id=self.next_producer_id(),
                producer_epoch=0,
                last_producer_epoch=NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=set(),
                start_ms=-1,
                next_producer_id=NO_PRODUCER_ID,
                next_producer_epoch=NO_PRODUCER_EPOCH,
            )
        else:
            error = self._persist(
                meta,
                producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=meta.producer_epoch,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=set(),
                start_ms=-1,
                next_producer_id=NO_PRODUCER_ID,
                next_producer_epoch=NO_PRODUCER_EPOCH,
            )
        if error:
            return InitResult(error)
        return InitResult(0, meta.producer_id, meta.producer_epoch)

    def _abort_with_fence(self, meta: TransactionMetadata) -> int:
        """Kafka's PrepareEpochFence: bump the epoch so the old producer's writes are refused, then
        abort its transaction with the new epoch. The abort is recorded as TV_0's (no further
        bump), so the fenced producer's EndTxn v5 cannot pass for a retry of it."""
        epoch = meta.client_epoch
        if meta.client_producer_id != meta.producer_id:  # a keeper moved to a new producer id
            epoch = EPOCH_CEILING
        fenced_epoch = epoch + 1 if epoch < EPOCH_CEILING else epoch
        meta.transition_to(TxnState.PREPARE_EPOCH_FENCE)  # in memory only, as in Kafka
        error = self._end(meta, commit=False, epoch=fenced_epoch, last_epoch=NO_PRODUCER_EPOCH)
        if meta.is_(TxnState.PREPARE_EPOCH_FENCE):  # the prepare write failed
            meta.state = TxnState.ONGOING  # undone, not a transition: the fence never happened
        return error

    # -- the transaction -----------------------------------------------------------------

    def _check_producer(self, meta: TransactionMetadata | None, producer_id: int, epoch: int) -> int:
        if meta is None or meta.client_producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.client_epoch != epoch:
            return E.PRODUCER_FENCED
        return 0

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        client_txn_version: int = TV_0,
    ) -> int:
        """AddPartitionsToTxn / AddOffsetsToTxn, and TV_2's implicit add by Produce v12+ and
        TxnOffsetCommit v5: the partitions join the (possibly new) transaction of the producer
        with exactly the current producer id and epoch."""
        if not transactional_id:
            return E.INVALID_REQUEST
        if not_ready := self.not_ready(transactional_id) or self.busy(transactional_id):
            return not_ready
        meta = self.txns.get(transactional_id)
        error = self._check_producer(meta, producer_id, epoch)
        if error:
            return error
        assert meta is not None
        if meta.markers_pending or meta.is_(*PREPARED):
            self._finish_prepared(meta)
        if meta.is_(*PREPARED) or meta.is_(TxnState.PREPARE_EPOCH_FENCE):
            return E.CONCURRENT_TRANSACTIONS
        if meta.is_(TxnState.DEAD):
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.is_kept:
            return E.INVALID_TXN_STATE  # a kept transaction may only be ended
        wanted = set(partitions)
        if meta.is_(TxnState.ONGOING) and wanted <= meta.partitions:
            return 0
        start = meta.start_ms if meta.is_(TxnState.ONGOING) else self.clock.now_ms()
        return self._persist(
            meta,
            state=TxnState.ONGOING,
            partitions=meta.partitions | wanted,
            start_ms=start,
            client_txn_version=client_txn_version,
        )

    @property
    def transactions_v2_enabled(self) -> bool:
        """The broker finalizes transaction.version 2 or more (KIP-890's transactions v2)."""
        return self.transaction_version() >= TV_2

    def add_partition_implicitly(
        self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition
    ) -> int:
        """Transactions v2: Produce v12+ and TxnOffsetCommit v5 add their partition to the
        producer's transaction themselves. UNSUPPORTED_VERSION while the broker's
        transaction.version is below 2. The error is the one Kafka's AddPartitionsToTxnManager
        hands both paths: PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, which producers expect there;
        the produce path translates the retriable ones further (``handlers.produce``)."""
        if not self.transactions_v2_enabled:
            return E.UNSUPPORTED_VERSION
        code = self.add_partitions(transactional_id, producer_id, epoch, [tp], TV_2)
        return E.INVALID_PRODUCER_EPOCH if code == E.PRODUCER_FENCED else code

    def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ verify_only: is each partition in the ongoing transaction?"""
        meta = self.txns.get(transactional_id)
        error = self._check_producer(meta, producer_id, epoch)
        if self.owned is not None:  # cluster mode: this node must coordinate the id
            error = self.not_ready(transactional_id) or error
        result = {}
        for tp in partitions:
            if error:
                result[tp] = error
            else:
                assert meta is not None
                ok = meta.is_(TxnState.ONGOING) and not meta.is_kept and tp in meta.partitions
                result[tp] = 0 if ok else E.INVALID_TXN_STATE
        return result

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """EndTxn v0-4 from the client (Kafka's ``handleEndTransaction`` with TV_0)."""
        return self._end_request(transactional_id, producer_id, epoch, commit, TV_0).error

    def end_transaction_v2(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> EndResult:
        """EndTxn v5 (TV_2): the epoch is bumped; the answer carries the producer id and epoch to
        continue with."""
        if not self.transactions_v2_enabled:
            return EndResult(E.UNSUPPORTED_VERSION)
        return self._end_request(transactional_id, producer_id, epoch, commit, TV_2)

    def _end_request(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, client_txn_version: int
    ) -> EndResult:
        if not transactional_id:
            return EndResult(E.INVALID_REQUEST)
        if not_ready := self.not_ready(transactional_id) or self.busy(transactional_id):
            return EndResult(not_ready)
        meta = self.txns.get(transactional_id)
        if meta is not None and (meta.markers_pending or meta.is_(*PREPARED)):
            self._finish_prepared(meta)
        if client_txn_version >= TV_2:
            return self._end_v2(meta, producer_id, epoch, commit)
        return EndResult(self._end_v1(meta, producer_id, epoch, commit))

    def _end_v1(self, meta: TransactionMetadata | None, producer_id: int, epoch: int, commit: bool) -> int:
        error = self._check_producer(meta, producer_id, epoch)
        if error:
            return error
        assert meta is not None
        state = meta.state
        if state is TxnState.ONGOING:
            marker_epoch, next_id, next_epoch = self._ending_identity(meta, bump=False)
            return self._end(meta, commit, marker_epoch, meta.last_producer_epoch, next_id, next_epoch)
        if state is TxnState.COMPLETE_COMMIT:
            return 0 if commit else E.INVALID_TXN_STATE
        if state is TxnState.COMPLETE_ABORT:
            return 0 if not commit else E.INVALID_TXN_STATE
        if state is TxnState.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        if state is TxnState.PREPARE_ABORT:
            return E.CONCURRENT_TRANSACTIONS if not commit else E.INVALID_TXN_STATE
        if state is TxnState.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE  # Empty, Dead

    def _end_v2(
        self, meta: TransactionMetadata | None, producer_id: int, epoch: int, commit: bool
    ) -> EndResult:
        """Kafka's TV_2 rules: the epoch must be the current one, or (for a transaction that has
        ended) the one before the bump, which is a retry and gets the same answer again."""
        if meta is None:
            return EndResult(E.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        bumped_by_v2 = meta.client_txn_version >= TV_2
        retry_on_bump = bumped_by_v2 and meta.producer_id == producer_id and meta.producer_epoch == epoch + 1
        retry_on_overflow = (
            bumped_by_v2
            and meta.is_(*COMPLETE)
            and meta.previous_producer_id == producer_id
            and epoch == MAX_EPOCH
            and meta.producer_epoch == 0
        )
        retry = retry_on_bump or retry_on_overflow
        if meta.client_producer_id != producer_id and not retry_on_overflow:
            return EndResult(E.INVALID_PRODUCER_ID_MAPPING)
        if state is TxnState.PREPARE_EPOCH_FENCE:
            return EndResult(E.CONCURRENT_TRANSACTIONS)
        if state in PREPARED:
            valid = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or epoch == meta.producer_epoch
        else:  # Ongoing, Empty, Dead
            valid = epoch == meta.client_epoch
        if not valid:
            return EndResult(E.PRODUCER_FENCED)
        if state is TxnState.ONGOING:
            return self._end_bumped(meta, commit, no_partitions=False)
        if state in PREPARED:
            same = state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            return EndResult(E.CONCURRENT_TRANSACTIONS if same else E.INVALID_TXN_STATE)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            same = state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
            if retry:
                if not same:
                    return EndResult(E.INVALID_TXN_STATE)
                return EndResult(0, meta.producer_id, meta.producer_epoch)
            if commit:
                return EndResult(E.INVALID_TXN_STATE)
            return self._end_bumped(meta, commit=False, no_partitions=True)
        if state is TxnState.EMPTY and not commit:
            # TV_2 may abort a transaction the coordinator has no partition of yet (its implicit
            # adds may not have arrived): nothing to mark, the epoch is bumped all the same.
            return self._end_bumped(meta, commit=False, no_partitions=True)
        return EndResult(E.INVALID_TXN_STATE)

    def _ending_identity(self, meta: TransactionMetadata, bump: bool) -> tuple[int, int, int]:
        """(marker epoch, next producer id, next epoch) for ending ``meta``'s transaction: the
        markers carry the transaction's producer id with an epoch above every one its data used;
        the client goes on with (next id, next epoch), or with the marker's identity if -1/-1.

        A kept transaction whose keeper was moved to a new producer id is marked with the highest
        epoch; TV_2 bumps the client's epoch, moving it to a new producer id once exhausted."""
        epoch = meta.client_epoch
        if meta.client_producer_id != meta.producer_id:
            return EPOCH_CEILING, meta.client_producer_id, epoch + 1 if bump else epoch
        if not bump:
            return epoch, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if epoch >= MAX_EPOCH:
            return epoch + 1, self.next_producer_id(), 0
        return epoch + 1, NO_PRODUCER_ID, NO_PRODUCER_EPOCH

    def _end_bumped(self, meta: TransactionMetadata, commit: bool, no_partitions: bool) -> EndResult:
        """End with the epoch bumped (TV_2); an exhausted epoch moves the client to a new producer id."""
        epoch = meta.client_epoch
        marker_epoch, next_id, next_epoch = self._ending_identity(meta, bump=True)
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        changes: dict[str, object] = {
            "state": prepare,
            "producer_epoch": marker_epoch,
            "last_producer_epoch": epoch,
            "next_producer_id": next_id,
            "next_producer_epoch": next_epoch,
            "client_txn_version": TV_2,
        }
        if no_partitions:
            changes.update(partitions=set(), start_ms=self.clock.now_ms())
        error = self._persist(meta, **changes)
        if error:
            return EndResult(error)
        self.after_prepare(meta)
        self._finish_prepared(meta)
        if meta.is_(*PREPARED) and meta.next_producer_id >= 0:
            return EndResult(0, meta.next_producer_id, max(meta.next_producer_epoch, 0))
        return EndResult(0, meta.producer_id, meta.producer_epoch)

    def _end(
        self,
        meta: TransactionMetadata,
        commit: bool,
        epoch: int,
        last_epoch: int,
        next_producer_id: int = NO_PRODUCER_ID,
        next_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> int:
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        error = self._persist(
            meta,
            state=prepare,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            next_producer_id=next_producer_id,
            next_producer_epoch=next_producer_epoch,
            client_txn_version=TV_0,
        )
        if error:
            return error
        self.after_prepare(meta)
        self._finish_prepared(meta)
        return 0

    def _finish_prepared(self, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction and complete it (or leave it prepared, with
        the partitions still to mark, when an append failed: the periodic task retries)."""
        if not meta.is_(*PREPARED):
            meta.markers_pending = False
            return
        if meta.transactional_id in self.unreplicated:
            return  # markers only for a decision the ISR holds (``replication_done`` sends them)
        if meta.markers_cancelled:
            return
        self.before_markers(meta)
        commit = meta.is_(TxnState.PREPARE_COMMIT)
        coordinator_epoch = self.coordinator_epoch(meta.transactional_id)
        remaining = set(meta.partitions)
        for tp in sorted(meta.partitions):
            try:
                self.write_marker(tp, commit, meta.producer_id, meta.producer_epoch, coordinator_epoch)
            except MarkerInFlightError:
                continue  # being written: ``retry_markers`` comes back once it is
            except MarkersCancelledError as exc:
                log.info("transaction %s: %s; a newer coordinator completes it, this one stops"
                         " sending its markers", meta.transactional_id, exc)
                meta.markers_cancelled = True
                meta.markers_pending = False
                return
            except KafkaError as exc:
                if exc.code not in _MARKER_DONE_ERRORS:
                    log.warning("marker for %s on %s-%d failed: %s", meta.transactional_id, *tp, exc)
                    continue
                log.info("marker for %s on %s-%d not needed: %s", meta.transactional_id, *tp, exc)
            except Exception:
                log.exception("marker for %s on %s-%d failed", meta.transactional_id, *tp)
                continue
            remaining.discard(tp)
        if remaining:
            meta.partitions = remaining
            meta.markers_pending = True
            return
        complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        changes: dict[str, object] = {"state": complete, "partitions": set(), "markers_pending": False}
        if meta.next_producer_id >= 0:  # epoch overflow: the client continues as a new producer
            changes.update(
                previous_producer_id=meta.producer_id,
                producer_id=meta.next_producer_id,
                producer_epoch=max(meta.next_producer_epoch, 0),
                next_producer_id=NO_PRODUCER_ID,
                next_producer_epoch=NO_PRODUCER_EPOCH,
            )
        if self._persist(meta, **changes):
            meta.markers_pending = True  # markers are written; the completion is retried

    # -- checks for the data path --------------------------------------------------------

    def verify_produce(self, producer_id: int, epoch: int, tp: TopicPartition) -> int:
        """A transactional batch may be appended only to a partition of the producer's ongoing
        transaction, with its current epoch (the defence against hanging transactions)."""
        if self.loading:
            return 0
        transactional_id = self.by_producer_id.get(producer_id)
        meta = self.txns.get(transactional_id) if transactional_id is not None else None
        if meta is None or meta.client_producer_id != producer_id:
            return E.INVALID_TXN_STATE
        if epoch < meta.client_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if (
            epoch != meta.client_epoch
            or not meta.is_(TxnState.ONGOING)
            or meta.is_kept
            or tp not in meta.partitions
        ):
            return E.INVALID_TXN_STATE
        return 0

    def verify_offset_commit(
        self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition
    ) -> int:
        """TxnOffsetCommit: the group's ``__consumer_offsets`` partition must be in the ongoing
        transaction (AddOffsetsToTxn first) and the producer current."""
        if not_ready := self.not_ready(transactional_id):
            return not_ready
        meta = self.txns.get(transactional_id)
        if meta is None or meta.client_producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.client_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if not meta.is_(TxnState.ONGOING) or meta.is_kept or tp not in meta.partitions:
            return E.INVALID_TXN_STATE
        return 0

    def retry_markers(self, producer_id: int) -> None:
        """Write the still missing markers of ``producer_id``'s prepared transaction now (a marker
        another node was writing is done), completing it when none is missing."""
        for meta in list(self.txns.values()):
            if meta.producer_id == producer_id and (meta.markers_pending or meta.is_(*PREPARED)):
                self._finish_prepared(meta)

    # -- periodic work -------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Abort (with an epoch bump that fences the producer) every transaction open longer than
        its timeout; retry the markers of prepared ones. Returns how many were aborted."""
        if self.loading:
            return 0
        now = self.clock.now_ms()
        aborted = 0
        for meta in list(self.txns.values()):
            if meta.transactional_id in self.unreplicated:
                continue  # its change is still replicating
            if meta.markers_pending or meta.is_(*PREPARED):
                self._finish_prepared(meta)
            elif meta.is_two_phase_commit:
                continue  # KIP-939: only the external transaction manager ends it
            elif meta.is_(TxnState.ONGOING) and now > meta.start_ms + meta.timeout_ms:
                log.info(
                    "aborting transaction %s (producer %d epoch %d): open longer than %d ms",
                    meta.transactional_id,
                    meta.producer_id,
                    meta.producer_epoch,
                    meta.timeout_ms,
                )
                if not self._abort_with_fence(meta):
                    aborted += 1
        return aborted

    def expire_transactional_ids(self) -> int:
        """Remove ids idle (no transaction open) for ``transactional.id.expiration.ms``.

        Done in steps of ``EXPIRY_STEP`` ids (each writes a tombstone): the first step runs now
        and returns how many it expired; the rest follow as timers of the clock, so other work
        runs between them however many ids there are."""
        if self.loading or self._expiry_running:
            return 0
        self._expiry_running = True
        try:
            return self._expire_step(list(self.txns.values()), 0)
        except BaseException:
            self._expiry_running = False
            raise

    def _expire_step(self, candidates: list[TransactionMetadata], start: int) -> int:
        end = min(start + EXPIRY_STEP, len(candidates))
        try:
            expired = self._expire_ids(candidates[start:end])
        finally:
            if end < len(candidates):
                def next_step() -> None:
                    self._expire_step(candidates, end)

                self.clock.call_later(0, next_step)
            else:
                self._expiry_running = False
        return expired

    def _expire_ids(self, candidates: list[TransactionMetadata]) -> int:
        now = self.clock.now_ms()
        expired = 0
        for meta in candidates:
            if self.txns.get(meta.transactional_id) is not meta:
                continue  # replaced or removed since the round started
            if meta.transactional_id in self.unreplicated:
                continue
            if meta.is_(*COMPLETE) and now - meta.last_update_ms >= self.config.id_expiration_ms:
                if self.store is not None:
                    try:
                        self.store.write(
                            self.partition_for(meta.transactional_id),
                            records.key(meta.transactional_id),
                            None,
                        )
                    except Exception:
                        log.exception("expiring %s failed", meta.transactional_id)
                        continue
                meta.transition_to(TxnState.DEAD)
                del self.txns[meta.transactional_id]
                self.by_producer_id.pop(meta.producer_id, None)
                expired += 1
        return expired

    # -- loading -------------------------------------------------------------------------

    def load_records(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay ``__transaction_state`` records (oldest first, the last of a key wins)."""
        latest: dict[str, bytes | None] = {}
        for key_bytes, value_bytes in entries:
            transactional_id = records.parse_key(key_bytes)
            if transactional_id is not None:
                latest[transactional_id] = value_bytes
        for transactional_id, value_bytes in latest.items():
            old = self.txns.pop(transactional_id, None)
            if old is not None:
                self.by_producer_id.pop(old.producer_id, None)
            if value_bytes is None:
                continue
            v = records.parse_value(value_bytes)
            meta = TransactionMetadata(
                transactional_id,
                v.producer_id,
                v.producer_epoch,
                v.timeout_ms,
                v.state,
                previous_producer_id=v.previous_producer_id,
                partitions=set(v.partitions),
                start_ms=v.start_ms,
                last_update_ms=v.last_update_ms,
                client_txn_version=v.client_txn_version,
                next_producer_id=v.next_producer_id,
                next_producer_epoch=v.next_producer_epoch,
            )
            self.txns[transactional_id] = meta
            self.by_producer_id[meta.producer_id] = transactional_id
            self.by_producer_id[meta.client_producer_id] = transactional_id

    def complete_loaded(self) -> None:
        """Finish what the previous run left prepared: PrepareCommit rolls forward, PrepareAbort
        back (Ongoing ones stay open; their timeout or their producer ends them)."""
        for meta in list(self.txns.values()):
            if meta.is_(*PREPARED):
                log.info("completing %s of %s after restart", meta.state.display, meta.transactional_id)
                self._finish_prepared(meta)

    def complete_loaded_partition(self, partition: int) -> None:
        """Cluster mode, a partition loaded on election: its prepared transactions are completed
        (markers resent), as Kafka's coordinator does once it took the partition over."""
        for meta in list(self.txns.values()):
            if meta.is_(*PREPARED) and self.partition_for(meta.transactional_id) == partition:
                log.info("completing %s of %s after taking over", meta.state.display, meta.transactional_id)
                self._finish_prepared(meta)

    def unload_partition(self, partition: int) -> None:
        """Cluster mode: forget the ids of a partition another node leads now (Kafka's
        ``removeTransactionsForTxnTopicPartition``)."""
        self.coordinator_epochs.pop(partition, None)
        for transactional_id in [t for t in self.unreplicated if self.partition_for(t) == partition]:
            del self.unreplicated[transactional_id]
        for transactional_id, meta in list(self.txns.items()):
            if self.partition_for(transactional_id) == partition:
                del self.txns[transactional_id]
                for pid in (meta.producer_id, meta.client_producer_id):
                    if self.by_producer_id.get(pid) == transactional_id:
                        del self.by_producer_id[pid]

    # -- admin ---------------------------------------------------------------------------

    def list_transactions(
        self, states: set[TxnState] | None, producer_ids: set[int], min_duration_ms: int, pattern: str | None
    ) -> list[TransactionMetadata]:
        now = self.clock.now_ms()
        regex = compile_client_pattern(pattern) if pattern else None
        found = []
        for meta in self.txns.values():
            if meta.is_(TxnState.DEAD):
                continue
            if states and meta.state not in states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            # Kafka's rule: whatever the state, the latest transaction began more than the filter ago.
            if min_duration_ms >= 0 and now - meta.start_ms <= min_duration_ms:
                continue
            if regex is not None and not regex.matches(meta.transactional_id):
                continue
            found.append(meta)
        return sorted(found, key=lambda m: m.transactional_id)
