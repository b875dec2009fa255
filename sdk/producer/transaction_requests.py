"""The transactional producer's requests to its coordinators (Java's ``TxnRequestHandler``s).

``TransactionCoordinatorChannel`` sends InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and
EndTxn to the transaction coordinator of the transactional id, and TxnOffsetCommit to the consumer
group's coordinator. Each is retried, with the coordinator looked up again where the answer says
it moved, on the errors Kafka's Java client retries (coordinator moving or loading,
CONCURRENT_TRANSACTIONS while the previous transaction is still completing, a topic not known
yet); other errors are raised for the caller to classify (``sdk.producer.transaction_errors``).

The versions it sends depend on the transaction protocol (``transaction_v2``, KIP-890: EndTxn v5
and TxnOffsetCommit v5) and on two-phase commit (KIP-939: InitProducerId v6 with Enable2Pc).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sdk.client.coordinators import COORDINATOR_ERRORS, CoordinatorType
from sdk.errors import (
    ErrorCode,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    make_error,
)
from sdk.producer.clock import SYSTEM_CLOCK, ProducerClock
from sdk.producer.network_port import ProducerPort
from sdk.producer.prepared_state import PreparedTxnState
from sdk.producer.sender import Sender, TransactionalRequest
from sdk.producer.transaction_errors import (
    CONCURRENT_TRANSACTIONS_BACKOFF_MS,
    RETRIED_CODES,
    coordinator_error,
)
from sdk.producer.transaction_offsets import GroupIdentity, group_mismatch_error
from sdk.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

__all__ = [
    "INIT_BUMP_VERSION",
    "INIT_TWO_PHASE_COMMIT_VERSION",
    "MAX_VERSIONS",
    "TRANSACTION_VERSION_FEATURE",
    "TV2_VERSIONS",
    "TransactionCoordinatorChannel",
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


class TransactionCoordinatorChannel:
    """Requests to the transaction coordinator of one transactional id (and TxnOffsetCommit to a
    group coordinator), with Kafka's retries; see the module docstring."""

    def __init__(
        self,
        port: ProducerPort,
        transactional_id: str,
        *,
        timeout_ms: float,
        sender: Sender,
        fatal_error: Callable[[], BaseException | None] = lambda: None,
        two_phase_commit: bool = False,
        clock: ProducerClock = SYSTEM_CLOCK,
    ) -> None:
        self.port = port
        self.clock = clock
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        #: Whether requests are sent in transaction protocol v2's versions (EndTxn and
        #: TxnOffsetCommit v5); set by ``Transactions`` from the coordinator's ApiVersions.
        self.transaction_v2 = False
        #: KIP-939: every InitProducerId says Enable2Pc (so needs v6).
        self.two_phase_commit = two_phase_commit
        #: Requests go through the sender's queue of transactional requests, ahead of (and
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
        request = TransactionalRequest(api_key, build, node=lambda: node, max_version=cap)
        # Bounded: a request queued for a coordinator that cannot be reached is given up (the
        # sender drops it) and retried after a new lookup.
        timeout_s = self.port.request_timeout_ms / 1000 + 1
        try:
            return await self.clock.wait_for(self.sender.send_transactional(request), timeout_s)
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
        port = self.port
        attempt = 0
        last: BaseException | None = None
        while True:
            fatal = self._fatal_error()
            if fatal is not None:
                raise fatal
            node: int | None = None
            backoff_ms = port.retry_backoff.backoff_ms(attempt)
            try:
                node = await port.coordinator(key_type, key)
                response = await self._request(node, api_key, build)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                if node is not None:
                    port.invalidate_coordinator(key_type, key, node)
                last = exc
            else:
                codes = [code for code in codes_of(response) if code]
                if not codes:
                    return response
                retried = [code for code in codes if code in COORDINATOR_ERRORS or code in RETRIED_CODES]
                if len(retried) < len(codes):
                    code = next(
                        c for c in codes if c not in retried and c != ErrorCode.OPERATION_NOT_ATTEMPTED
                    )
                    raise coordinator_error(code, what, getattr(response, "error_message", None))
                if any(code in COORDINATOR_ERRORS for code in codes):
                    moved = make_error(next(c for c in codes if c in COORDINATOR_ERRORS))
                    log.info(
                        "%s coordinator of %r at node %s answered %s: looking it up again",
                        key_type.name.lower(),
                        key,
                        node,
                        moved.name,
                        extra={
                            "kafka_coordinator_type": key_type.name,
                            "kafka_coordinator_key": key,
                            "kafka_node": node,
                            "kafka_error": moved.name,
                            "kafka_request": what,
                        },
                    )
                    port.invalidate_coordinator(key_type, key, node)
                if ErrorCode.CONCURRENT_TRANSACTIONS in codes and attempt < 5:
                    backoff_ms = CONCURRENT_TRANSACTIONS_BACKOFF_MS
                last = make_error(codes[0], what)
            if not wanted():
                raise IllegalStateError(f"{what}: no longer needed (the transaction moved on)") from last
            if deadline is not None and self.clock.monotonic() + backoff_ms / 1000 >= deadline:
                raise KafkaTimeoutError(
                    f"{what}: no answer within {self.timeout_ms:.0f} ms (last error: {last})"
                ) from last
            log.debug("%s: retrying after %r", what, last)
            await self.clock.sleep(backoff_ms / 1000)
            attempt += 1

    def _deadline(self) -> float:
        return self.clock.monotonic() + self.timeout_ms / 1000

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
                    f"the transaction coordinator speaks at most v{version} (a broker offers v6 only "
                    "with transaction.two.phase.commit.enable=true; Kafka's default is false)",
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

        what = f"InitProducerId for transactional id {self.transactional_id!r}"
        if two_phase_commit:  # refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED where disabled
            what += (
                " with two-phase commit (the broker must set transaction.two.phase.commit.enable=true;"
                " Kafka's default is false)"
            )
        async with self.lock:
            response = await self._send(
                CoordinatorType.TRANSACTION,
                self.transactional_id,
                InitProducerIdRequest.API_KEY,
                build,
                lambda r: [r.error_code],
                what,
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
