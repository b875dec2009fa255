"""The transactional producer's operations (Kafka's transactions, KIP-98/360/447), with their
state kept in the ``TransactionManager`` and their requests sent by the
``TransactionCoordinatorChannel`` (``sdk.producer.transaction_requests``):

* ``init_transactions`` gets the producer id and epoch for the transactional id (fencing any
  older producer with the same id, whose open transaction the coordinator aborts).
* While a transaction is open, a partition is added to it (AddPartitionsToTxn, the partitions
  waiting at that moment in one request) before its first batch is drained: ``poll`` runs at
  every pass of the sender and starts that request, which runs beside the produce requests.
* ``commit_transaction`` flushes, then ends the transaction with EndTxn(commit) once every batch
  is acknowledged; a failed batch makes the commit raise ``TransactionAbortableError``.
* ``abort_transaction`` fails the batches not sent yet with ``TransactionAbortedError``, waits
  for those on the wire, sends EndTxn(abort), and bumps the epoch (KIP-360, InitProducerId with
  the current producer id and epoch) when a failure left the sequence numbers in doubt, so the
  next transaction works without a restart.
* ``send_offsets_to_transaction`` adds the group to the transaction (AddOffsetsToTxn) and
  commits the offsets through the group coordinator (TxnOffsetCommit, with the consumer's
  generation, member id and group instance id for KIP-447's zombie fencing): they become visible
  only if the transaction commits.

Transaction protocol v2 (KIP-890 part 2, ``transaction_version`` 2) is used when the coordinator's
broker finalizes the feature ``transaction.version`` >= 2 and speaks Produce v12+, EndTxn v5+ and
TxnOffsetCommit v5+ (Java's ``isTransactionV2Enabled``); otherwise everything above (v1). With
v2 there is no AddPartitionsToTxn nor AddOffsetsToTxn: a Produce request (v12+, with the
transactional id) adds its partitions and TxnOffsetCommit v5 the group's offsets partition; the
coordinator bumps the epoch when it ends the transaction and EndTxn v5's answer carries the
producer id and epoch to use next, with sequences from 0. An abort after a failure therefore
needs no InitProducerId: the EndTxn bump is the recovery.

Two-phase commit (KIP-939, ``enable_two_phase_commit``): InitProducerId v6 with Enable2Pc (the
coordinator never times the transaction out); ``prepare_transaction`` flushes and returns the
``PreparedTxnState`` an outside coordinator stores; a later producer with the same transactional
id calls ``init_transactions(keep_prepared_transaction=True)``, which fences the old producer but
keeps its transaction, and ``complete_transaction(state)`` commits that transaction if it is the
one ``state`` names and aborts it otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from sdk.client.coordinators import CoordinatorType
from sdk.errors import (
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortedError,
    UnsupportedVersionError,
)
from sdk.producer.clock import SYSTEM_CLOCK, ProducerClock
from sdk.producer.network_port import ProducerPort
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.sender import Sender
from sdk.producer.transaction_errors import is_fatal, needs_bump
from sdk.producer.transaction_manager import TransactionManager, TransactionState
from sdk.producer.transaction_offsets import group_identity, offsets_by_topic
from sdk.producer.transaction_requests import (
    TRANSACTION_VERSION_FEATURE,
    TV2_VERSIONS,
    TransactionCoordinatorChannel,
)

if TYPE_CHECKING:
    from sdk.producer.accumulator import RecordAccumulator

__all__ = ["Transactions"]

log = logging.getLogger(__name__)


class Transactions:
    """The producer's transactional operations (see the module docstring)."""

    def __init__(
        self,
        port: ProducerPort,
        txn: TransactionManager,
        accumulator: RecordAccumulator,
        sender: Sender,
        *,
        max_block_ms: float,
        clock: ProducerClock = SYSTEM_CLOCK,
    ) -> None:
        assert txn.transactional_id is not None
        self.txn = txn
        self.channel = TransactionCoordinatorChannel(
            port,
            txn.transactional_id,
            timeout_ms=max_block_ms,
            sender=sender,
            fatal_error=lambda: txn.fatal_error,
            two_phase_commit=txn.two_phase_commit,
            clock=clock,
        )
        self._port = port
        self._clock = clock
        self._acc = accumulator
        self._sender = sender
        self._add_task: asyncio.Task[None] | None = None
        #: One user operation (init, commit, abort, send_offsets) at a time.
        self._operation = asyncio.Lock()

    # -- the sender's hook ----------------------------------------------------------------------

    def poll(self) -> None:
        """At every sender pass: drop what an abort makes pointless, and add partitions."""
        txn = self.txn
        state = txn.state
        if (
            state in (TransactionState.ABORTABLE_ERROR, TransactionState.ABORTING)
            and self._acc.has_undrained()
        ):
            error = TransactionAbortedError(
                f"transaction of {txn.transactional_id!r} "
                + ("aborted" if state == TransactionState.ABORTING else f"failed: {txn.last_error!r}")
            )
            error.__cause__ = txn.last_error
            self._sender.abort_undrained(error)
        if state == TransactionState.IN_TRANSACTION and not txn.transaction_v2:
            # A partition joins the transaction as soon as it has a batch (as Java adds it at
            # send), so AddPartitionsToTxn overlaps the linger instead of following it.
            in_transaction = txn.partitions_in_transaction
            for topic, parts in self._acc.open.items():
                for partition in parts:
                    if (topic, partition) not in in_transaction:
                        txn.partition_ready((topic, partition))
        if txn.new_partitions and (self._add_task is None or self._add_task.done()):
            self._add_task = asyncio.get_running_loop().create_task(
                self._add_partitions(), name="kafka-add-partitions-to-txn"
            )

    def _adding(self) -> bool:
        return self.txn.state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)

    async def _add_partitions(self) -> None:
        txn = self.txn
        while txn.new_partitions and self._adding():
            keys = txn.take_new_partitions()
            try:
                await self.channel.add_partitions(txn.producer_id, txn.producer_epoch, keys, self._adding)
            except asyncio.CancelledError:
                txn.partitions_not_added(keys, retry=False)
                raise
            except IllegalStateError:
                txn.partitions_not_added(keys, retry=False)  # the transaction is being aborted
            except KafkaError as exc:
                txn.partitions_not_added(keys, retry=False)
                self._record_error(exc)
            else:
                log.debug("partitions %s added to the transaction of %r", keys, txn.transactional_id)
                txn.partitions_added(keys)
            self._sender.wake()

    def _record_error(self, error: BaseException) -> None:
        txn = self.txn
        if is_fatal(error):
            assert isinstance(error, KafkaError)
            txn.fail_fatal(error)
        else:
            if needs_bump(error):
                txn.bump_required = True
            txn.fail_abortable(error)
        self._sender.wake()

    async def _wait_for_add(self) -> None:
        task = self._add_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # -- transaction protocol version ------------------------------------------------------------

    def _update_transaction_version(self) -> None:
        """Use transaction protocol v2 when the coordinator's broker finalized it and speaks its
        request versions (Java's ``maybeUpdateTransactionV2Enabled``); decided at
        ``init_transactions`` and again before each transaction, never inside one."""
        port = self._port
        node = port.cached_coordinator(CoordinatorType.TRANSACTION, self.channel.transactional_id)
        features = port.finalized_features(node) if node is not None else None
        if node is None or features is None:
            return  # not connected now: keep what was decided
        v2 = features.get(TRANSACTION_VERSION_FEATURE, 0) >= 2 and all(
            self._supports(node, api_key, version) for api_key, version in TV2_VERSIONS.items()
        )
        txn = self.txn
        if v2 != txn.transaction_v2:
            log.info("transactional id %r: transaction protocol v%d", txn.transactional_id, 2 if v2 else 1)
        txn.transaction_v2 = v2
        self.channel.transaction_v2 = v2

    def _supports(self, node: int, api_key: int, version: int) -> bool:
        try:
            return self._port.version_for(node, api_key) >= version
        except (UnsupportedVersionError, KafkaError):
            return False

    # -- operations -----------------------------------------------------------------------------

    async def init_transactions(self, keep_prepared_transaction: bool = False) -> None:
        txn = self.txn
        if keep_prepared_transaction and not txn.two_phase_commit:
            raise IllegalStateError(
                f"transactional producer {txn.transactional_id!r}: init_transactions("
                "keep_prepared_transaction=True) needs enable_two_phase_commit=True"
            )
        async with self._operation:
            if txn.state == TransactionState.READY and not keep_prepared_transaction:
                return  # start() did it already
            txn.begin_initializing()
            try:
                producer_id, epoch, kept = await self.channel.init_producer_id(
                    txn.transaction_timeout_ms, keep_prepared_transaction=keep_prepared_transaction
                )
            except KafkaTimeoutError:
                raise  # still initializing: init_transactions() may be called again
            except KafkaError as exc:
                txn.fail_fatal(exc)
                raise
            self._update_transaction_version()
            txn.initialized(producer_id, epoch, kept)
            log.info(
                "transactional id %r: producer id %d epoch %d (transaction protocol v%d%s)",
                txn.transactional_id,
                producer_id,
                epoch,
                2 if txn.transaction_v2 else 1,
                f"; kept prepared transaction {kept}" if kept is not None else "",
            )
        self._sender.wake()

    def begin_transaction(self) -> None:
        if self.txn.state == TransactionState.READY:
            self._update_transaction_version()
        self.txn.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Any, group: Any) -> None:
        txn = self.txn
        txn.require_in_transaction("send_offsets_to_transaction")
        by_topic = offsets_by_topic(offsets)
        identity = group_identity(group)
        async with self._operation:
            txn.require_in_transaction("send_offsets_to_transaction")
            if not by_topic:
                return
            try:
                if not txn.transaction_v2:  # v2: TxnOffsetCommit v5 adds the group implicitly
                    await self.channel.add_offsets(txn.producer_id, txn.producer_epoch, identity.group_id)
                txn.transaction_started = True
                await self.channel.txn_offset_commit(txn.producer_id, txn.producer_epoch, identity, by_topic)
            except KafkaTimeoutError:
                raise  # nothing known to have failed: the caller may retry or abort
            except KafkaError as exc:
                self._record_error(exc)
                if not is_fatal(exc):
                    raise txn.abortable_error() from exc
                raise

    async def _flush_transaction(self) -> None:
        """Every record of the transaction sent and answered, and (v1) every partition added."""
        acc = self._acc
        acc.begin_flush()
        try:
            await acc.wait_for_incomplete()
        finally:
            acc.end_flush()
        await self._wait_for_add()

    async def commit_transaction(self) -> None:
        txn = self.txn
        async with self._operation:
            txn.begin_commit()
            await self._flush_transaction()
            txn.raise_if_failed()
            if txn.transaction_started:
                try:
                    await self._end_txn(commit=True)
                except KafkaTimeoutError:
                    raise  # still committing: commit_transaction() may be called again
                except KafkaError as exc:
                    self._record_error(exc)
                    if not is_fatal(exc):
                        raise txn.abortable_error() from exc
                    raise
            txn.complete_transaction()

    async def abort_transaction(self) -> None:
        txn = self.txn
        async with self._operation:
            log.info(
                "transactional id %r: aborting the transaction%s",
                txn.transactional_id,
                f" after {txn.last_error!r}" if txn.last_error is not None else "",
                extra=txn.log_fields(txn.last_error),
            )
            txn.begin_abort()
            self.poll()  # fail the batches not sent yet
            await self._acc.wait_for_incomplete()
            await self._wait_for_add()
            try:
                if txn.transaction_started and not isinstance(txn.last_error, InvalidProducerIdMappingError):
                    await self._end_txn(commit=False)  # v2: its epoch bump is the recovery
                if txn.bump_required:
                    await self._bump_epoch()
            except KafkaTimeoutError:
                raise  # still aborting: abort_transaction() may be called again
            except KafkaError as exc:
                if is_fatal(exc):
                    txn.fail_fatal(exc)
                raise
            txn.complete_transaction()
        self._sender.wake()

    async def _end_txn(self, commit: bool) -> None:
        """EndTxn; with transaction protocol v2, continue with the producer id and epoch it gave."""
        txn = self.txn
        following = await self.channel.end_txn(txn.producer_id, txn.producer_epoch, commit)
        if following is not None:
            txn.reset_producer_id(*following)
            log.debug(
                "transactional id %r: next transaction with producer id %d epoch %d",
                txn.transactional_id,
                *following,
            )
        elif txn.transaction_v2:
            log.warning(
                "transactional id %r: EndTxn v5 answer without the next producer id and epoch",
                txn.transactional_id,
            )

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939's first phase: flush, check every record was written, and leave the
        transaction open (PREPARED) for ``complete_transaction`` or a successor to end."""
        txn = self.txn
        txn.require_prepare()
        async with self._operation:
            txn.require_prepare()
            await self._flush_transaction()
            state = txn.prepare()
        log.info("transactional id %r: transaction prepared (%s)", txn.transactional_id, str(state) or "-")
        return state

    async def complete_transaction(self, state: PreparedTxnState) -> bool:
        """Commit the prepared (or kept) transaction if ``state`` names it, abort it otherwise
        (Java's ``KafkaProducer.completeTransaction``). Returns whether it committed."""
        if not isinstance(state, PreparedTxnState):
            raise TypeError(f"complete_transaction takes a PreparedTxnState, not {state!r}")
        prepared = self.txn.require_prepared("complete_transaction")
        commit = prepared == state
        log.info(
            "transactional id %r: %s the prepared transaction %s (given state %s)",
            self.txn.transactional_id,
            "committing" if commit else "aborting",
            str(prepared) or "(empty)",
            str(state) or "(empty)",
        )
        if commit:
            await self.commit_transaction()
        else:
            await self.abort_transaction()
        return commit

    async def abort_open_transaction(self, timeout: float | None) -> None:
        """At close, abort a transaction still open (as Java's sender does at shutdown) rather
        than leave it to the coordinator's timeout, which would hold read_committed readers back
        until then. Best effort within ``timeout`` seconds: a failure is only logged."""
        txn = self.txn
        open_states = (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
            TransactionState.ABORTING,
        )
        if txn.fatal_error is not None or txn.state not in open_states:
            return
        log.info("transactional id %r: aborting the open transaction at close", txn.transactional_id)
        try:
            await self._clock.wait_for(self.abort_transaction(), timeout)
        except (KafkaError, TimeoutError) as exc:
            log.warning(
                "transactional id %r: open transaction not aborted at close: %r", txn.transactional_id, exc
            )

    async def _bump_epoch(self) -> None:
        """KIP-360: a new epoch for the same producer id, so the sequence numbers a failed batch
        left in doubt start again from 0."""
        txn = self.txn
        producer_id, epoch, _ = await self.channel.init_producer_id(
            txn.transaction_timeout_ms, txn.producer_id, txn.producer_epoch
        )
        txn.set_producer_id(producer_id, epoch)
        log.info("transactional id %r: epoch bumped to %d", txn.transactional_id, epoch)
