"""The producer's public transactional methods (``Producer`` inherits them, as it does the batch
API of ``sdk.producer.batch_api``): each checks that the producer is transactional and started,
then runs the operation of ``sdk.producer.transaction_operations.Transactions``.
``producer.transaction()`` is the ``async with`` form (``TransactionContext``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from sdk.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from sdk.metrics.producer import ProducerMetrics
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.transaction_manager import TransactionState
from sdk.producer.transaction_operations import Transactions

__all__ = ["TransactionContext", "TransactionalMixin"]


class TransactionContext:
    """``async with producer.transaction():`` begins a transaction, commits it when the block
    ends normally and aborts it when the block raises (the exception then propagates). A commit
    that fails with ``TransactionAbortableError`` is aborted before the error is raised, so the
    producer is ready for the next transaction."""

    def __init__(self, producer: TransactionalMixin) -> None:
        self._producer = producer

    async def __aenter__(self) -> TransactionContext:
        await self._producer.begin_transaction()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        producer = self._producer
        txn = producer._transactions_or_raise("transaction").txn
        if exc_type is None:
            try:
                await producer.commit_transaction()
            except KafkaError as error:
                if txn.fatal_error is None and not isinstance(error, KafkaTimeoutError):
                    await producer.abort_transaction()
                raise
            return
        if txn.fatal_error is None and txn.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
            TransactionState.ABORTING,
        ):
            await producer.abort_transaction()


class _Done:
    """An already-finished awaitable: ``begin_transaction()`` works with and without ``await``."""

    __slots__ = ()

    def __await__(self) -> Any:
        return iter(())


class TransactionalMixin:
    """The Producer's transactional methods (they delegate to ``Transactions``)."""

    _transactions: Transactions | None
    _metrics: ProducerMetrics

    def _transactions_or_raise(self, operation: str) -> Transactions:
        transactions = self._transactions
        if transactions is None:
            config = getattr(self, "config", None)
            if config is None or config.transactional_id is None:
                raise IllegalStateError(f"{operation}() needs a transactional producer: set transactional_id")
            raise IllegalStateError(f"{operation}(): the producer is not started (await producer.start())")
        return transactions

    async def init_transactions(self, keep_prepared_transaction: bool = False) -> None:
        """Get the producer id and epoch of ``transactional_id`` from its transaction coordinator,
        fencing older producers with the same id (their open transaction is aborted). ``start()``
        does this already (except with ``enable_two_phase_commit``), so calling it again is a
        no-op. Raises ``KafkaTimeoutError`` after ``max_block_ms`` (may be called again), or a
        fatal error (``ProducerFencedError``, ``TransactionalIdAuthorizationFailedError``, ...).

        ``keep_prepared_transaction=True`` (KIP-939, needs ``enable_two_phase_commit``): the
        older producer is fenced but its open transaction is kept, not aborted; if there is one,
        ``prepared_transaction_state`` names it and ``complete_transaction(state)`` must end it
        before a new transaction can begin."""
        transactions = self._transactions_or_raise("init_transactions")
        with self._metrics.timed("txn-init"):
            await transactions.init_transactions(keep_prepared_transaction)

    def begin_transaction(self) -> Awaitable[None]:
        """Start a transaction: records sent from now on belong to it. Raises ``IllegalStateError``
        if one is already open or ``init_transactions`` did not complete. Works with and without
        ``await`` (aiokafka's is a plain method)."""
        transactions = self._transactions_or_raise("begin_transaction")
        with self._metrics.timed("txn-begin"):
            transactions.begin_transaction()
        return _Done()

    async def send_offsets_to_transaction(self, offsets: Any, group_id: Any) -> None:
        """Commit consumer offsets as part of the transaction: visible only if it commits.

        ``offsets``: ``{TopicPartition or (topic, partition): OffsetAndMetadata or int}``, the
        next offset to read per partition. ``group_id``: the group id, or better the consumer's
        ``group_metadata()``, whose generation and member id let the coordinator reject a
        zombie's commit (KIP-447). A refusal makes the transaction abortable:
        ``TransactionAbortableError`` whose cause is ``CommitFailedError`` (the consumer is no
        longer the group's member in that generation) or ``FencedInstanceIdError`` (another
        consumer holds its ``group_instance_id``); abort, then poll again."""
        transactions = self._transactions_or_raise("send_offsets_to_transaction")
        with self._metrics.timed("txn-send-offsets"):
            await transactions.send_offsets_to_transaction(offsets, group_id)

    async def commit_transaction(self) -> None:
        """Flush, then commit. Raises ``TransactionAbortableError`` (cause: what failed) if any
        record of the transaction failed: call ``abort_transaction()`` then; a fatal error
        (``ProducerFencedError``, ...) if the producer can no longer work."""
        transactions = self._transactions_or_raise("commit_transaction")
        with self._metrics.timed("txn-commit"):
            await transactions.commit_transaction()

    async def abort_transaction(self) -> None:
        """Abort: records not sent yet fail with ``TransactionAbortedError``, the rest is marked
        aborted, and a new transaction may begin."""
        transactions = self._transactions_or_raise("abort_transaction")
        with self._metrics.timed("txn-abort"):
            await transactions.abort_transaction()

    async def prepare_transaction(self) -> PreparedTxnState:
        """Two-phase commit's first phase (KIP-939, needs ``enable_two_phase_commit``): flush the
        transaction and leave it open on the broker, which never times it out. Returns its
        ``PreparedTxnState`` (``str()`` it to store it; empty if no record or offset reached the
        coordinator). Afterwards only ``commit_transaction``, ``abort_transaction`` or
        ``complete_transaction`` are possible; a closed or crashed producer leaves it for a
        successor (``init_transactions(keep_prepared_transaction=True)``). Raises
        ``TransactionAbortableError`` if a record of it failed."""
        return await self._transactions_or_raise("prepare_transaction").prepare_transaction()

    @property
    def prepared_transaction_state(self) -> PreparedTxnState | None:
        """The prepared transaction's state: the one ``prepare_transaction()`` returned, or the
        transaction ``init_transactions(keep_prepared_transaction=True)`` kept; None when no
        transaction is prepared."""
        transactions = self._transactions
        if transactions is None or transactions.txn.state != TransactionState.PREPARED:
            return None
        return transactions.txn.prepared_state

    async def complete_transaction(self, state: PreparedTxnState) -> None:
        """End the prepared (or kept) transaction: commit it if ``state`` is its state, abort it
        otherwise (a state stored for another transaction never commits this one). Raises
        ``IllegalStateError`` when no transaction is prepared."""
        await self._transactions_or_raise("complete_transaction").complete_transaction(state)

    @property
    def transaction_version(self) -> int | None:
        """The transaction protocol in use: 2 (KIP-890) or 1; None before ``init_transactions``
        or without ``transactional_id``."""
        transactions = self._transactions
        if transactions is None or transactions.txn.state in (
            TransactionState.UNINITIALIZED,
            TransactionState.INITIALIZING,
        ):
            return None
        return 2 if transactions.txn.transaction_v2 else 1

    def transaction(self) -> TransactionContext:
        """``async with producer.transaction(): ...`` commits on success, aborts on an exception
        (entering it is ``begin_transaction()``, with its errors)."""
        return TransactionContext(self)
