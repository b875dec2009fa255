"""The transactional producer's requests and operations (Kafka's transactions, KIP-98/360/447).

``TransactionCoordinatorChannel`` sends the transactional requests: InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the transaction coordinator of the
transactional id, TxnOffsetCommit to the consumer group's coordinator. Each is retried, with the
coordinator looked up again where the answer says it moved, on the errors Kafka's Java client
retries (coordinator moving or loading, CONCURRENT_TRANSACTIONS while the previous transaction
is still completing, a topic not known yet); other errors are raised for the caller to classify.

``Transactions`` is the producer's side of a transaction, the state kept in the
``TransactionManager``:

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
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sdk.client.client import KafkaClient
from sdk.client.connection import pick_version
from sdk.client.coordinators import COORDINATOR_ERRORS, CoordinatorLookup, CoordinatorType
from sdk.consumer.errors import CommitFailedError
from sdk.errors import (
    ErrorCode,
    IllegalGenerationError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    make_error,
)
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.sender import Sender, TransactionalRequest
from sdk.producer.transaction_manager import FATAL_TRANSACTION_ERRORS, TransactionManager, TransactionState
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

if TYPE_CHECKING:
    from sdk.producer.accumulator import RecordAccumulator

__all__ = [
    "FATAL_TRANSACTION_ERRORS",
    "GroupIdentity",
    "PreparedTxnState",
    "TransactionCoordinatorChannel",
    "TransactionalMixin",
    "Transactions",
    "group_identity",
    "offsets_by_topic",
]

log = logging.getLogger(__name__)

#: Highest versions sent with transaction protocol v1. AddPartitionsToTxn v4+ is the brokers'
#: batched form; EndTxn v5 and TxnOffsetCommit v5 belong to transaction protocol v2 (KIP-890), in
#: which partitions are added implicitly and the epoch changes with every transaction.
MAX_VERSIONS = {
    InitProducerIdRequest.API_KEY: 5,
    AddPartitionsToTxnRequest.API_KEY: 3,
    AddOffsetsToTxnRequest.API_KEY: 4,
    TxnOffsetCommitRequest.API_KEY: 4,
    EndTxnRequest.API_KEY: 4,
}
#: Transaction protocol v2: the first versions of its requests, which it needs (and sends).
TV2_VERSIONS = {
    ProduceRequest.API_KEY: 12,
    EndTxnRequest.API_KEY: 5,
    TxnOffsetCommitRequest.API_KEY: 5,
}
#: The feature (KIP-584) whose finalized level says which transaction protocol the cluster runs.
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: First InitProducerId version that bumps the epoch of a given producer id and epoch (KIP-360).
INIT_BUMP_VERSION = 3
#: InitProducerId v6 carries Enable2Pc and KeepPreparedTxn (KIP-939).
INIT_TWO_PHASE_COMMIT_VERSION = 6

#: Answers retried as they are (besides the coordinator errors, which also re-find it).
_RETRIED = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
#: Coordinator answers after which this producer cannot go on (besides FATAL_TRANSACTION_ERRORS).
_FATAL_CODES = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    }
)
#: Abortable answers that also leave the producer id unknown to the coordinator or the partition
#: leaders: the abort then gets a new epoch.
_BUMP_CODES = frozenset({ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNKNOWN_PRODUCER_ID})
#: Backoff for CONCURRENT_TRANSACTIONS: the previous EndTxn completes in milliseconds (Java's
#: producer uses 20 ms for the first AddPartitionsToTxn of a transaction).
_CONCURRENT_BACKOFF_MS = 20


def _error(code: int, what: str, message: str | None = None) -> KafkaError:
    """The exception for a coordinator's answer; an old epoch means a newer producer took over."""
    text = f"{what}: {message}" if message else what
    if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
        fenced = ProducerFencedError(
            f"{text}: a newer producer with the same transactional id has fenced this one "
            f"({ErrorCode(code).name})"
        )
        return fenced
    return make_error(code, text)


def is_fatal(error: BaseException) -> bool:
    """Whether ``error``, met by a transactional request, leaves the producer unusable."""
    if isinstance(error, FATAL_TRANSACTION_ERRORS):
        return True
    return isinstance(error, KafkaError) and error.code in _FATAL_CODES


def needs_bump(error: BaseException) -> bool:
    return isinstance(error, KafkaError) and error.code in _BUMP_CODES


class TransactionCoordinatorChannel:
    """Requests to the transaction coordinator of one transactional id (and TxnOffsetCommit to a
    group coordinator), with Kafka's retries; see the module docstring."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        *,
        timeout_ms: float,
        sender: Sender | None = None,
        fatal_error: Callable[[], BaseException | None] = lambda: None,
        two_phase_commit: bool = False,
    ) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        #: Whether requests are sent in transaction protocol v2's versions (EndTxn and
        #: TxnOffsetCommit v5); set by ``Transactions`` from the coordinator's ApiVersions.
        self.transaction_v2 = False
        #: KIP-939: every InitProducerId says Enable2Pc (so needs v6).
        self.two_phase_commit = two_phase_commit
        self.lookup = CoordinatorLookup(client)
        #: With a sender, requests go through its queue of transactional requests, ahead of (and
        #: holding back) produce requests, as Java's producer sends them.
        self.sender = sender
        self._fatal_error = fatal_error
        #: One transactional request at a time, as Java's producer sends them.
        self.lock = asyncio.Lock()

    def _max_version(self, api_key: int) -> int:
        if api_key == InitProducerIdRequest.API_KEY and self.two_phase_commit:
            return INIT_TWO_PHASE_COMMIT_VERSION
        if self.transaction_v2 and api_key in TV2_VERSIONS:
            return TV2_VERSIONS[api_key]
        return MAX_VERSIONS[api_key]

    async def _request(self, node: int, api_key: int, build: Callable[[int], Any]) -> Any:
        cap = self._max_version(api_key)
        sender = self.sender
        if sender is None:
            conn = await self.client.get_connection(node)
            version = pick_version(api_key, conn.broker_versions.get(api_key), max_version=cap)
            return await conn.request(build(version), version)
        request = TransactionalRequest(api_key, build, node=lambda: node, max_version=cap)
        # Bounded: a request queued for a coordinator that cannot be reached is given up (the
        # sender drops it) and retried after a new lookup.
        timeout_s = self.client.request_timeout_ms / 1000 + 1
        try:
            return await asyncio.wait_for(sender.send_transactional(request), timeout_s)
        except TimeoutError:
            raise KafkaTimeoutError(f"no answer from broker {node} within {timeout_s:.0f} s") from None

    async def _send(
        self,
        key_type: CoordinatorType,
        key: str,
        api_key: int,
        build: Callable[[int], Any],
        codes_of: Callable[[Any], list[int]],
        what: str,
        *,
        deadline: float | None,
        wanted: Callable[[], bool] = lambda: True,
    ) -> Any:
        """``build(version)`` to ``key``'s coordinator until ``codes_of(response)`` has no error
        (returns the response) or a non-retriable one (raised)."""
        client = self.client
        attempt = 0
        last: BaseException | None = None
        while True:
            fatal = self._fatal_error()
            if fatal is not None:
                raise fatal
            node: int | None = None
            backoff_ms = client.retry_backoff.backoff_ms(attempt)
            try:
                node = await self.lookup.coordinator(key_type, key)
                response = await self._request(node, api_key, build)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                if node is not None:
                    self.lookup.invalidate(key_type, key, node)
                last = exc
            else:
                codes = [code for code in codes_of(response) if code]
                if not codes:
                    return response
                retried = [code for code in codes if code in COORDINATOR_ERRORS or code in _RETRIED]
                if len(retried) < len(codes):
                    code = next(
                        c for c in codes if c not in retried and c != ErrorCode.OPERATION_NOT_ATTEMPTED
                    )
                    raise _error(code, what, getattr(response, "error_message", None))
                if any(code in COORDINATOR_ERRORS for code in codes):
                    self.lookup.invalidate(key_type, key, node)
                if ErrorCode.CONCURRENT_TRANSACTIONS in codes and attempt < 5:
                    backoff_ms = _CONCURRENT_BACKOFF_MS
                last = make_error(codes[0], what)
            if not wanted():
                raise IllegalStateError(f"{what}: no longer needed (the transaction moved on)") from last
            if deadline is not None and time.monotonic() + backoff_ms / 1000 >= deadline:
                raise KafkaTimeoutError(
                    f"{what}: no answer within {self.timeout_ms:.0f} ms (last error: {last})"
                ) from last
            log.debug("%s: retrying after %r", what, last)
            await asyncio.sleep(backoff_ms / 1000)
            attempt += 1

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout_ms / 1000

    async def init_producer_id(
        self,
        transaction_timeout_ms: float,
        producer_id: int = -1,
        producer_epoch: int = -1,
        *,
        keep_prepared_transaction: bool = False,
    ) -> tuple[int, int, PreparedTxnState | None]:
        """InitProducerId for the transactional id; with the current id and epoch (KIP-360) when
        given and the coordinator supports it. Returns the producer id and epoch, and the
        transaction the coordinator kept open (``keep_prepared_transaction``, KIP-939) or None."""
        bump = producer_id >= 0
        two_phase_commit = self.two_phase_commit

        def build(version: int) -> InitProducerIdRequest:
            if two_phase_commit and version < INIT_TWO_PHASE_COMMIT_VERSION:
                raise UnsupportedVersionError(
                    f"two-phase commit needs InitProducerId v{INIT_TWO_PHASE_COMMIT_VERSION} (KIP-939); "
                    f"the transaction coordinator speaks at most v{version}",
                    api_key=InitProducerIdRequest.API_KEY,
                )
            keep = bump and version >= INIT_BUMP_VERSION
            return InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=int(transaction_timeout_ms),
                producer_id=producer_id if keep else -1,
                producer_epoch=producer_epoch if keep else -1,
                enable2_pc=two_phase_commit,
                keep_prepared_txn=keep_prepared_transaction,
            )

        async with self.lock:
            response = await self._send(
                CoordinatorType.TRANSACTION,
                self.transactional_id,
                InitProducerIdRequest.API_KEY,
                build,
                lambda r: [r.error_code],
                f"InitProducerId for transactional id {self.transactional_id!r}",
                deadline=self._deadline(),
            )
        kept: PreparedTxnState | None = None
        if keep_prepared_transaction and response.ongoing_txn_producer_id >= 0:
            kept = PreparedTxnState(response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch)
        return response.producer_id, response.producer_epoch, kept

    async def add_partitions(
        self,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        wanted: Callable[[], bool],
    ) -> None:
        """AddPartitionsToTxn (v0-3 form), retried while ``wanted()``."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=parts)
            for topic, parts in by_topic.items()
        ]

        def build(version: int) -> AddPartitionsToTxnRequest:
            return AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=producer_epoch,
                v3_and_below_topics=topics,
            )

        def codes(response: Any) -> list[int]:
            found = [
                part.partition_error_code
                for topic in response.results_by_topic_v3_and_below
                for part in topic.results_by_partition
            ]
            return [response.error_code, *found]

        async with self.lock:
            await self._send(
                CoordinatorType.TRANSACTION,
                self.transactional_id,
                AddPartitionsToTxnRequest.API_KEY,
                build,
                codes,
                f"AddPartitionsToTxn {sorted(by_topic)} for transactional id {self.transactional_id!r}",
                deadline=None,
                wanted=wanted,
            )

    async def add_offsets(self, producer_id: int, producer_epoch: int, group_id: str) -> None:
        request = AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            group_id=group_id,
        )
        async with self.lock:
            await self._send(
                CoordinatorType.TRANSACTION,
                self.transactional_id,
                AddOffsetsToTxnRequest.API_KEY,
                lambda version: request,
                lambda r: [r.error_code],
                f"AddOffsetsToTxn group {group_id!r} for transactional id {self.transactional_id!r}",
                deadline=self._deadline(),
            )

    async def txn_offset_commit(
        self,
        producer_id: int,
        producer_epoch: int,
        group: GroupIdentity,
        offsets: dict[str, list[tuple[int, int, str | None, int]]],
    ) -> None:
        """TxnOffsetCommit to the group's coordinator; ``offsets`` maps a topic to its
        ``(partition, offset, metadata, leader_epoch)``."""
        Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        Partition = TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition
        topics = [
            Topic(
                name=topic,
                partitions=[
                    Partition(
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=leader_epoch,
                        committed_metadata=metadata,
                    )
                    for partition, offset, metadata, leader_epoch in parts
                ],
            )
            for topic, parts in offsets.items()
        ]
        request = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=topics,
        )
        what = f"TxnOffsetCommit group {group.group_id!r} for transactional id {self.transactional_id!r}"
        try:
            await self._send(
                CoordinatorType.GROUP,
                group.group_id,
                TxnOffsetCommitRequest.API_KEY,
                lambda version: request,
                lambda r: [part.error_code for topic in r.topics for part in topic.partitions],
                what,
                deadline=self._deadline(),
            )
        except (IllegalGenerationError, UnknownMemberIdError) as exc:
            raise group_mismatch_error(what, group, exc) from exc

    async def end_txn(self, producer_id: int, producer_epoch: int, commit: bool) -> tuple[int, int] | None:
        """EndTxn; with transaction protocol v2, returns the producer id and epoch its answer
        (v5) says to use next, else None."""
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=commit,
        )
        v2 = self.transaction_v2

        def build(version: int) -> EndTxnRequest:
            if v2 and version < TV2_VERSIONS[EndTxnRequest.API_KEY]:
                raise UnsupportedVersionError(
                    f"transaction protocol v2 needs EndTxn v5; the transaction coordinator speaks v{version}",
                    api_key=EndTxnRequest.API_KEY,
                )
            return request

        async with self.lock:
            response = await self._send(
                CoordinatorType.TRANSACTION,
                self.transactional_id,
                EndTxnRequest.API_KEY,
                build,
                lambda r: [r.error_code],
                f"EndTxn({'commit' if commit else 'abort'}) for transactional id {self.transactional_id!r}",
                deadline=self._deadline(),
            )
        if v2 and response.producer_id >= 0 and response.producer_epoch >= 0:
            return response.producer_id, response.producer_epoch
        return None


class GroupIdentity:
    """The group fields of TxnOffsetCommit (KIP-447): what ``ConsumerGroupMetadata`` carries."""

    __slots__ = ("generation_id", "group_id", "group_instance_id", "member_id")

    def __init__(
        self,
        group_id: str,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (
            f"GroupIdentity({self.group_id!r}, generation={self.generation_id}, "
            f"member={self.member_id!r}, instance={self.group_instance_id!r})"
        )


def group_identity(group: Any) -> GroupIdentity:
    """A group id (no generation checks, as before KIP-447) or a consumer's ``group_metadata()``."""
    if isinstance(group, str):
        if not group:
            raise ValueError("send_offsets_to_transaction needs a non-empty group id")
        return GroupIdentity(group)
    group_id = getattr(group, "group_id", None)
    if not isinstance(group_id, str) or not group_id:
        raise TypeError(
            f"send_offsets_to_transaction takes a group id or a consumer's group_metadata(), not {group!r}"
        )
    return GroupIdentity(
        group_id,
        int(getattr(group, "generation_id", -1)),
        getattr(group, "member_id", "") or "",
        getattr(group, "group_instance_id", None),
    )


def group_mismatch_error(what: str, group: GroupIdentity, refusal: KafkaError) -> CommitFailedError:
    """The group coordinator refused the offsets because ``group`` is not (or no longer) its
    member in that generation: the consumer was dropped from the group, or it rebalanced, and
    another member may own the partitions now. As Java's producer does, a ``CommitFailedError``
    (the transaction is abortable, the producer stays usable); FENCED_INSTANCE_ID keeps its own
    class."""
    return CommitFailedError(
        f"{what}: offsets refused ({refusal.name}): consumer group metadata {group!r} is not the "
        "group's current member and generation (the consumer was dropped from the group or it "
        "rebalanced); abort the transaction and poll again"
    )


def offsets_by_topic(
    offsets: Mapping[Any, Any] | Iterable[Any],
) -> dict[str, list[tuple[int, int, str | None, int]]]:
    """``{TopicPartition or (topic, partition): OffsetAndMetadata or offset}`` (a list of
    confluent-style ``TopicPartition`` objects with ``.offset`` also works) as TxnOffsetCommit's
    ``topic -> [(partition, offset, metadata, leader_epoch)]``. The offset is the next record to
    read, as in every Kafka commit."""
    items: list[tuple[Any, Any]]
    if isinstance(offsets, Mapping):
        items = list(offsets.items())
    else:
        items = [(tp, getattr(tp, "offset", None)) for tp in offsets]
    result: dict[str, list[tuple[int, int, str | None, int]]] = {}
    for key, value in items:
        if isinstance(key, tuple) and len(key) == 2 and not hasattr(key, "topic"):
            topic, partition = key
        else:
            topic, partition = getattr(key, "topic", None), getattr(key, "partition", None)
        if not isinstance(topic, str) or not isinstance(partition, int):
            raise TypeError(f"offsets keys are TopicPartition or (topic, partition), not {key!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            offset, metadata, leader_epoch = value, "", -1
        elif hasattr(value, "offset"):
            offset = value.offset
            metadata = getattr(value, "metadata", "") or ""
            leader_epoch = getattr(value, "leader_epoch", -1)
            if not isinstance(leader_epoch, int) or leader_epoch is None:
                leader_epoch = -1
        else:
            raise TypeError(
                f"offset for {topic}-{partition} must be an int or OffsetAndMetadata, not {value!r}"
            )
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset for {topic}-{partition} must be >= 0, not {offset!r}")
        result.setdefault(topic, []).append((partition, offset, metadata, leader_epoch))
    return result


class Transactions:
    """The producer's transactional operations (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        txn: TransactionManager,
        accumulator: RecordAccumulator,
        sender: Sender,
        *,
        max_block_ms: float,
    ) -> None:
        assert txn.transactional_id is not None
        self.txn = txn
        self.channel = TransactionCoordinatorChannel(
            client,
            txn.transactional_id,
            timeout_ms=max_block_ms,
            sender=sender,
            fatal_error=lambda: txn.fatal_error,
            two_phase_commit=txn.two_phase_commit,
        )
        self._client = client
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

    # -- operations -----------------------------------------------------------------------------

    # -- transaction protocol version ------------------------------------------------------------

    def _coordinator_connection(self) -> Any:
        node = self.channel.lookup.cached(CoordinatorType.TRANSACTION, self.channel.transactional_id)
        return self._client.connection(node) if node is not None else None

    def _update_transaction_version(self) -> None:
        """Use transaction protocol v2 when the coordinator's broker finalized it and speaks its
        request versions (Java's ``maybeUpdateTransactionV2Enabled``); decided at
        ``init_transactions`` and again before each transaction, never inside one."""
        conn = self._coordinator_connection()
        if conn is None or not conn.broker_versions:
            return  # not connected now: keep what was decided
        v2 = conn.finalized_features.get(TRANSACTION_VERSION_FEATURE, 0) >= 2 and all(
            conn.supports(api_key, version) for api_key, version in TV2_VERSIONS.items()
        )
        txn = self.txn
        if v2 != txn.transaction_v2:
            log.info(
                "transactional id %r: transaction protocol v%d", txn.transactional_id, 2 if v2 else 1
            )
        txn.transaction_v2 = v2
        self.channel.transaction_v2 = v2

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
            await asyncio.wait_for(self.abort_transaction(), timeout)
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
        await self._transactions_or_raise("init_transactions").init_transactions(keep_prepared_transaction)

    def begin_transaction(self) -> Awaitable[None]:
        """Start a transaction: records sent from now on belong to it. Raises ``IllegalStateError``
        if one is already open or ``init_transactions`` did not complete. Works with and without
        ``await`` (aiokafka's is a plain method)."""
        self._transactions_or_raise("begin_transaction").begin_transaction()
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
        await self._transactions_or_raise("send_offsets_to_transaction").send_offsets_to_transaction(
            offsets, group_id
        )

    async def commit_transaction(self) -> None:
        """Flush, then commit. Raises ``TransactionAbortableError`` (cause: what failed) if any
        record of the transaction failed: call ``abort_transaction()`` then; a fatal error
        (``ProducerFencedError``, ...) if the producer can no longer work."""
        await self._transactions_or_raise("commit_transaction").commit_transaction()

    async def abort_transaction(self) -> None:
        """Abort: records not sent yet fail with ``TransactionAbortedError``, the rest is marked
        aborted, and a new transaction may begin."""
        await self._transactions_or_raise("abort_transaction").abort_transaction()

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
