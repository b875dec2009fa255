"""The transaction coordinator as a broker service: its ``__transaction_state`` topic, loading at
start-up (after the group coordinator, whose pending transactional offsets the markers settle),
the markers written in-process, and the periodic aborts of timed-out transactions and expiry of
idle transactional ids."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from reference_broker.clock import Clock
from reference_broker.coordinator.txn import records
from reference_broker.coordinator.txn.coordinator import TopicPartition, TransactionCoordinator, TxnConfig
from reference_broker.coordinator.txn.remote_markers import RemoteMarkers
from reference_broker.coordinator.txn.state import TransactionMetadata
from reference_broker.log.config import segment_size_configs
from reference_broker.services import PeriodicTask
from reference_broker.storage import CONSUMER_OFFSETS, TRANSACTION_STATE
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import UnknownTopicOrPartitionError
from sdk.records import ControlType

if TYPE_CHECKING:
    from reference_broker.config import BrokerConfig
    from reference_broker.coordinator.group.service import GroupCoordinatorService
    from reference_broker.coordinator.group.state import CommittedOffset
    from reference_broker.producer_ids import ProducerIdManager
    from reference_broker.storage import Storage

log = logging.getLogger("reference_broker.txn_coordinator")
#: records replayed (and transactional ids installed) between two yields of the event loop at load
LOAD_STEP_RECORDS = 2000

#: Crash tests name a transactional id here: the broker SIGKILLs itself right after writing that
#: id's PrepareCommit/PrepareAbort, before any marker (a restart must then roll it forward/back).
KILL_AFTER_PREPARE_ENV = "REFERENCE_BROKER_TXN_KILL_AFTER_PREPARE"

#: Kafka's coordinator epoch is the leader epoch of the ``__transaction_state`` partition; a
#: single node never changes leader.
COORDINATOR_EPOCH = 0


def txn_config(config: BrokerConfig, num_partitions: int | None = None) -> TxnConfig:
    return TxnConfig(
        max_timeout_ms=config.get("transaction.max.timeout.ms"),
        id_expiration_ms=config.get("transactional.id.expiration.ms"),
        num_partitions=num_partitions or config.get("transaction.state.log.num.partitions"),
        transaction_version=config.get("transaction.version"),
    )


def _kill_after_prepare(transactional_id: str, meta: TransactionMetadata) -> None:
    if meta.transactional_id == transactional_id:
        log.warning("%s set: killing the broker after %s's prepare", KILL_AFTER_PREPARE_ENV, transactional_id)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclasses.dataclass(frozen=True)
class TransactionalOffsetCommit:
    """A TxnOffsetCommit's content; generation -1, an empty member id and no instance id skip
    the member checks (requests before v3 carry none)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None
    offsets: dict[TopicPartition, CommittedOffset]


class StorageTxnStore:
    """Writes the coordinator's records to ``__transaction_state``, creating it on first use."""

    def __init__(self, storage: Storage, config: BrokerConfig, num_partitions: int):
        self.storage = storage
        self.config = config
        self.num_partitions = num_partitions

    def ensure_topic(self) -> None:
        if self.storage.topic(TRANSACTION_STATE) is None:
            self.storage.ensure_internal_topic(
                TRANSACTION_STATE,
                self.num_partitions,
                {
                    "cleanup.policy": "compact",
                    # Kafka's TransactionStateManager.transactionTopicConfigs
                    "min.insync.replicas": str(self.config.get("transaction.state.log.min.isr")),
                    **segment_size_configs(int(self.config.get("transaction.state.log.segment.bytes"))),
                },
            )

    def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.ensure_topic()
        self.storage.append_as_coordinator(TRANSACTION_STATE, partition, [(key, value)])


class TransactionCoordinatorService:
    """Owns the ``TransactionCoordinator`` of a running broker."""

    name = "transaction-coordinator"

    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        clock: Clock,
        producer_ids: ProducerIdManager,
        groups: GroupCoordinatorService | None,
    ):
        self.broker_config = config
        self.storage = storage
        self.groups = groups
        existing = storage.topic(TRANSACTION_STATE)
        num_partitions = (
            existing.num_partitions if existing else config.get("transaction.state.log.num.partitions")
        )
        self.store = StorageTxnStore(storage, config, num_partitions)
        self.coordinator = TransactionCoordinator(
            clock, txn_config(config, num_partitions), self.store, self.write_marker, producer_ids.next_id
        )
        self._loader: asyncio.Task[None] | None = None
        #: Cluster mode: markers of partitions led by other nodes go there (WriteTxnMarkers).
        self.remote_markers: RemoteMarkers | None = None
        crash_id = os.environ.get(KILL_AFTER_PREPARE_ENV)
        if crash_id:
            self.coordinator.after_prepare = partial(_kill_after_prepare, crash_id)

    def write_marker(
        self,
        tp: TopicPartition,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = COORDINATOR_EPOCH,
    ) -> None:
        """End ``producer_id``'s transaction on ``tp`` with a COMMIT or ABORT marker; a commit on
        ``__consumer_offsets`` makes the transaction's offsets the group's. Raises
        UnknownTopicOrPartitionError, InvalidProducerEpochError (an older epoch) or
        TransactionCoordinatorFencedError (an older coordinator epoch)."""
        topic, partition = tp
        meta = self.storage.topic(topic)
        if meta is None or not 0 <= partition < meta.num_partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} no longer exists")
        if self.remote_markers is not None and self.remote_markers.led_elsewhere(tp):
            self.remote_markers.write(tp, commit, producer_id, producer_epoch, coordinator_epoch)
            return
        control = ControlType.COMMIT if commit else ControlType.ABORT
        self.storage.append_control_batch(
            topic, partition, control, producer_id, producer_epoch, coordinator_epoch
        )
        if topic == CONSUMER_OFFSETS and self.groups is not None:
            self.groups.complete_transaction(partition, producer_id, commit)

    # -- requests that involve the group coordinator too ---------------------------------

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> int:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        if not group_id:
            return E.INVALID_GROUP_ID
        groups = self._group_service()
        return self.coordinator.add_partitions(
            transactional_id, producer_id, epoch, [groups.offsets_partition(group_id)]
        )

    def commit_offsets(
        self, commit: TransactionalOffsetCommit, *, add_partition: bool
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: the group's ``__consumer_offsets`` partition must be in the producer's
        ongoing transaction (``add_partition``, transactions v2: it joins here, as the produce
        path's partitions do); then the group coordinator checks the member and keeps the offsets
        pending until the transaction's marker. An error code for every partition otherwise."""
        if not commit.group_id:
            return dict.fromkeys(commit.offsets, E.INVALID_GROUP_ID)
        groups = self._group_service()
        tid, pid, epoch = commit.transactional_id, commit.producer_id, commit.producer_epoch
        if add_partition:
            tp = groups.offsets_partition(commit.group_id)
            code = self.coordinator.add_partition_implicitly(tid, pid, epoch, tp)
        else:
            tp = (CONSUMER_OFFSETS, groups.coordinator.partition_for(commit.group_id))
            code = 0
        if not code:
            code = self.coordinator.verify_offset_commit(tid, pid, epoch, tp)
        if code:
            return dict.fromkeys(commit.offsets, code)
        return groups.coordinator.commit_transactional_offsets(
            commit.group_id,
            pid,
            epoch,
            commit.generation,
            commit.member_id,
            commit.group_instance_id,
            commit.offsets,
        )

    def _group_service(self) -> GroupCoordinatorService:
        if self.groups is None:
            raise RuntimeError("the transaction coordinator runs without a group coordinator")
        return self.groups

    async def start(self) -> None:
        """Load in the background (after the group coordinator has loaded); until then the
        transactional APIs answer COORDINATOR_LOAD_IN_PROGRESS."""
        if self.storage.topic(TRANSACTION_STATE) is None:
            return
        self.coordinator.loading = True
        self._loader = asyncio.create_task(self._load(), name="load __transaction_state")

    async def _load(self) -> None:
        try:
            if self.groups is not None:
                await self.groups.wait_loaded()
            for partition in range(self.coordinator.config.num_partitions):
                for _ in self._load_steps(partition):
                    await asyncio.sleep(0)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s failed", TRANSACTION_STATE)
        self.coordinator.loading = False
        self.coordinator.complete_loaded()
        log.info("transaction coordinator loaded %d transactional ids", len(self.coordinator.txns))

    def load_partition(self, partition: int) -> None:
        """Replay one partition at once (tests and tools; the broker loads in steps)."""
        for _ in self._load_steps(partition):
            pass

    def _load_steps(self, partition: int) -> Iterator[None]:
        """Replay one partition, pausing (yielding) after every ``LOAD_STEP_RECORDS`` records
        read and ids installed, so the event loop serves other clients meanwhile (the
        transactional APIs answer COORDINATOR_LOAD_IN_PROGRESS until the whole load is done)."""
        latest: dict[str, tuple[bytes, bytes | None]] = {}  # the last record of each id
        done = 0
        for batch in self.storage.read_batches(TRANSACTION_STATE, partition):
            if batch.is_control:
                continue
            for record in batch:
                if record.key is None:
                    continue
                transactional_id = records.parse_key(record.key)
                if transactional_id is not None:
                    latest.pop(transactional_id, None)  # keeps the order of last writes
                    latest[transactional_id] = (record.key, record.value)
                    done += 1
            if done >= LOAD_STEP_RECORDS:
                done = 0
                yield
        entries = list(latest.values())
        for start in range(0, len(entries), LOAD_STEP_RECORDS):
            self.coordinator.load_records(entries[start : start + LOAD_STEP_RECORDS])
            yield

    async def wait_loaded(self) -> None:
        if self._loader is not None:
            await asyncio.shield(self._loader)

    def periodic_tasks(self) -> list[PeriodicTask]:
        abort_s = self.broker_config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        expire_s = self.broker_config.get("transaction.remove.expired.transaction.cleanup.interval.ms") / 1000
        return [
            PeriodicTask(
                "abort-timed-out-transactions", abort_s, self.coordinator.abort_timed_out_transactions
            ),
            PeriodicTask("expire-transactional-ids", expire_s, self.coordinator.expire_transactional_ids),
        ]

    async def stop(self) -> None:
        if self.remote_markers is not None:
            await self.remote_markers.stop()
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
            self._loader = None
