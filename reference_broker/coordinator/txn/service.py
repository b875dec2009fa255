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
from reference_broker.coordinator.write_errors import write_error_code
from reference_broker.log.config import segment_size_configs
from reference_broker.replication.produce import min_insync_replicas
from reference_broker.services import PeriodicTask
from reference_broker.storage import CONSUMER_OFFSETS, TRANSACTION_STATE
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.errors import KafkaError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from sdk.records import ControlType, RecordBatch

if TYPE_CHECKING:
    from reference_broker.config import BrokerConfig
    from reference_broker.coordinator.group.service import GroupCoordinatorService
    from reference_broker.coordinator.group.state import CommittedOffset
    from reference_broker.coordinator.txn.remote_verify import RemoteTxnVerifier
    from reference_broker.producer_ids import ProducerIdManager
    from reference_broker.replication.replica_manager import ReplicaManager
    from reference_broker.storage import Storage

log = logging.getLogger("reference_broker.txn_coordinator")
#: records replayed (and transactional ids installed) between two yields of the event loop at load
LOAD_STEP_RECORDS = 2000

#: Crash tests name a transactional id here: the broker SIGKILLs itself right after writing that
#: id's PrepareCommit/PrepareAbort, before any marker (a restart must then roll it forward/back).
KILL_AFTER_PREPARE_ENV = "REFERENCE_BROKER_TXN_KILL_AFTER_PREPARE"

#: Fault tests name a transactional id here: the coordinator SIGSTOPs itself just before it writes
#: the markers of that id's transaction, if it wrote its PrepareCommit/PrepareAbort itself (a
#: coordinator paused mid-commit, deposed meanwhile, then resumed), and only the node that first
#: creates the file PAUSE_TOKEN_ENV names (so one node of a cluster pauses, once).
PAUSE_BEFORE_MARKERS_ENV = "REFERENCE_BROKER_TXN_PAUSE_BEFORE_MARKERS"
PAUSE_TOKEN_ENV = "REFERENCE_BROKER_TXN_PAUSE_TOKEN"

#: Kafka's coordinator epoch is the leader epoch of the ``__transaction_state`` partition when
#: this node became its leader (``TransactionCoordinator.coordinator_epochs`` in cluster mode); a
#: single node never changes leader, its partitions stay in their first epoch, 0.
COORDINATOR_EPOCH = 0
#: How long a marker's append waits for the ISR (Kafka: ``request.timeout.ms``, default 30 s).
MARKER_TIMEOUT_S = 30.0


def txn_config(config: BrokerConfig, num_partitions: int | None = None) -> TxnConfig:
    return TxnConfig(
        max_timeout_ms=config.get("transaction.max.timeout.ms"),
        id_expiration_ms=config.get("transactional.id.expiration.ms"),
        num_partitions=num_partitions or config.get("transaction.state.log.num.partitions"),
    )


def _kill_after_prepare(transactional_id: str, meta: TransactionMetadata) -> None:
    if meta.transactional_id == transactional_id:
        log.warning("%s set: killing the broker after %s's prepare", KILL_AFTER_PREPARE_ENV, transactional_id)
        os.kill(os.getpid(), signal.SIGKILL)


class _PauseBeforeMarkers:
    """SIGSTOPs this process before the markers of ``transactional_id``'s transaction this process
    prepared, if it is the first to create ``token`` (the fault point of PAUSE_BEFORE_MARKERS_ENV)."""

    def __init__(self, transactional_id: str, token: str) -> None:
        self.transactional_id = transactional_id
        self.token = token
        self.prepared_here = False

    def after_prepare(self, meta: TransactionMetadata) -> None:
        if meta.transactional_id == self.transactional_id:
            self.prepared_here = True

    def before_markers(self, meta: TransactionMetadata) -> None:
        if not self.prepared_here or meta.transactional_id != self.transactional_id:
            return
        self.prepared_here = False
        try:
            os.close(os.open(self.token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another node paused already
        log.warning("%s set: pausing the broker before %s's markers", PAUSE_BEFORE_MARKERS_ENV,
                    self.transactional_id)
        os.kill(os.getpid(), signal.SIGSTOP)


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
        #: Cluster mode: the controller creates the topic (replicated); writes go to partitions
        #: this node leads only.
        self.replica_manager: ReplicaManager | None = None

    def ensure_topic(self) -> None:
        if self.replica_manager is None and self.storage.topic(TRANSACTION_STATE) is None:
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

    def write(self, partition: int, key: bytes, value: bytes | None) -> int | None:
        """Append one record. Cluster mode, as Kafka's acks=all append: refused with
        NOT_ENOUGH_REPLICAS (nothing written) while the ISR is below ``min.insync.replicas``;
        returns the offset the high watermark must reach for the record to be replicated."""
        self.ensure_topic()
        if self.replica_manager is None:
            self.storage.append_as_coordinator(TRANSACTION_STATE, partition, [(key, value)])
            return None
        replica = self.replica_manager.partition(TRANSACTION_STATE, partition)
        if replica is None or not replica.is_leader:
            raise NotLeaderOrFollowerError(f"{TRANSACTION_STATE}-{partition} is not led here")
        replica.check_enough_replicas(min_insync_replicas(self.replica_manager, replica))
        self.storage.append_as_coordinator(TRANSACTION_STATE, partition, [(key, value)])
        return int(replica.log.log_end_offset)


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
        # A single node's setting; the broker points this at its finalized features
        # (``reference_broker.features``), which a cluster changes with UpdateFeatures.
        self.coordinator.transaction_version = partial(config.get, "transaction.version")
        self._loader: asyncio.Task[None] | None = None
        #: Cluster mode: markers of partitions led by other nodes go there (WriteTxnMarkers).
        self.remote_markers: RemoteMarkers | None = None
        #: Cluster mode: asks the node coordinating a transactional id (produce, TxnOffsetCommit).
        self.remote_verifier: RemoteTxnVerifier | None = None
        self._partition_loaders: dict[int, asyncio.Task[None]] = {}
        #: Cluster mode: per transactional id, the outcome (an error code, 0) of its change the ISR
        #: does not hold yet; requests that made it are answered with it.
        self._replications: dict[str, asyncio.Future[int]] = {}
        self._replication_tasks: set[asyncio.Task[None]] = set()
        crash_id = os.environ.get(KILL_AFTER_PREPARE_ENV)
        if crash_id:
            self.coordinator.after_prepare = partial(_kill_after_prepare, crash_id)
        pause_id = os.environ.get(PAUSE_BEFORE_MARKERS_ENV)
        if pause_id:
            pause = _PauseBeforeMarkers(pause_id, os.environ[PAUSE_TOKEN_ENV])
            self.coordinator.after_prepare = pause.after_prepare
            self.coordinator.before_markers = pause.before_markers

    def write_marker(
        self,
        tp: TopicPartition,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = COORDINATOR_EPOCH,
    ) -> None:
        """The coordinator's marker: end ``producer_id``'s transaction on ``tp`` with a COMMIT or
        ABORT marker. On a single node it is appended here and done on return. In a cluster every
        marker (also for a partition this node leads) goes through ``remote_markers``, as Kafka's
        coordinator sends each through its marker channel: done only once the partition's ISR
        holds it (MarkerInFlightError until then), since an unreplicated marker dies with a
        leader that loses its leadership. Raises UnknownTopicOrPartitionError,
        InvalidProducerEpochError (an older epoch) or TransactionCoordinatorFencedError (an older
        coordinator epoch)."""
        if self.remote_markers is not None:
            self.remote_markers.write(tp, commit, producer_id, producer_epoch, coordinator_epoch)
            return
        self.append_marker(tp, commit, producer_id, producer_epoch, coordinator_epoch)

    def append_marker(
        self, tp: TopicPartition, commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> int:
        """Append the marker to this node's log of ``tp`` (a commit on ``__consumer_offsets`` makes
        the transaction's offsets the group's); the offset one past it. In a cluster only the
        partition's leader appends (NotLeaderOrFollowerError elsewhere)."""
        topic, partition = tp
        meta = self.storage.topic(topic)
        if meta is None or not 0 <= partition < meta.num_partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} no longer exists")
        replicas = self.store.replica_manager
        if replicas is not None:
            led = replicas.partition(topic, partition)
            if led is None or not led.is_leader:
                raise NotLeaderOrFollowerError(f"{topic}-{partition} is not led by this node")
        control = ControlType.COMMIT if commit else ControlType.ABORT
        appended = self.storage.append_control_batch(
            topic, partition, control, producer_id, producer_epoch, coordinator_epoch
        )
        if topic == CONSUMER_OFFSETS and self.groups is not None:
            self.groups.complete_transaction(partition, producer_id, commit)
        return appended.last_offset + 1

    async def write_replicated_marker(
        self,
        tp: TopicPartition,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timeout_s: float = MARKER_TIMEOUT_S,
    ) -> None:
        """WriteTxnMarkers for one partition, as Kafka appends it (acks=-1): appended by the
        partition's leader and returned once the ISR holds it. Raises what ``append_marker``
        raises, and NotLeaderOrFollowerError (leadership lost meanwhile),
        NotEnoughReplicasAfterAppendError or RequestTimedOutError, after which the coordinator
        sends the marker again (a second marker for a transaction already ended is harmless)."""
        end = self.append_marker(tp, commit, producer_id, producer_epoch, coordinator_epoch)
        replicas = self.store.replica_manager
        if replicas is None:
            return
        partition = replicas.partition(*tp)
        if partition is None:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is not led by this node")
        await partition.wait_for_high_watermark(end, min_insync_replicas(replicas, partition), timeout_s)

    # -- cluster mode ----------------------------------------------------------------------

    def use_replicated_topic(self, replica_manager: ReplicaManager) -> None:
        """Cluster mode: ``__transaction_state`` is a replicated topic the controller creates; this
        node coordinates the ids of the partitions it leads, each loaded when it becomes their
        leader (``on_leadership``), and answers NOT_COORDINATOR for the others."""
        self.store.replica_manager = replica_manager
        self.coordinator.owned = set()
        self.coordinator.await_replication = self._await_replication

    def on_leadership(self, partition: int, leads: bool, num_partitions: int, leader_epoch: int = 0) -> None:
        """The metadata moved ``__transaction_state`` partition ``partition``'s leadership: when it
        comes here (or comes back in a newer leader epoch) its ids load from the local replica in
        the background (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and its prepared transactions are
        completed, with ``leader_epoch`` as the coordinator epoch of its markers (Kafka's
        ``onElection``); when it goes away they are dropped (``onResignation``)."""
        coordinator = self.coordinator
        owned = coordinator.owned
        if owned is None:
            return
        epoch_now = coordinator.coordinator_epochs.get(partition)
        reelected = leads and partition in owned and epoch_now != leader_epoch
        if not reelected and leads == (partition in owned):
            return
        if num_partitions != coordinator.config.num_partitions:
            coordinator.config = dataclasses.replace(coordinator.config, num_partitions=num_partitions)
            self.store.num_partitions = num_partitions
        loader = self._partition_loaders.pop(partition, None)
        if loader is not None:
            loader.cancel()
        if leads:
            if reelected:  # whatever was in memory may predate the epochs in between
                coordinator.unload_partition(partition)
            owned.add(partition)
            coordinator.coordinator_epochs[partition] = leader_epoch
            log.info("elected the transaction coordinator of %s-%d at epoch %d",
                     TRANSACTION_STATE, partition, leader_epoch)
            coordinator.loading_partitions.add(partition)
            self._partition_loaders[partition] = asyncio.get_running_loop().create_task(
                self._load_elected(partition), name=f"load {TRANSACTION_STATE}-{partition}")
            return
        owned.discard(partition)
        coordinator.loading_partitions.discard(partition)
        coordinator.unload_partition(partition)
        log.info("no longer the transaction coordinator of %s-%d", TRANSACTION_STATE, partition)

    async def _load_elected(self, partition: int) -> None:
        try:
            for _ in self._load_steps(partition):
                await asyncio.sleep(0)
            self.coordinator.loading_partitions.discard(partition)
            self.coordinator.complete_loaded_partition(partition)
            log.info("transaction coordinator of %s-%d loaded (to offset %d)", TRANSACTION_STATE, partition,
                     self.storage.manager.get_log(TRANSACTION_STATE, partition).log_end_offset)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE, partition)
        finally:
            self.coordinator.loading_partitions.discard(partition)
            if self._partition_loaders.get(partition) is asyncio.current_task():
                del self._partition_loaders[partition]

    def _await_replication(self, transactional_id: str, partition: int, offset: int) -> None:
        """Cluster mode: wait in the background until the ISR holds ``transactional_id``'s write
        ending at ``offset`` (Kafka's acks=all append, which waits up to the transaction's
        timeout), then tell the coordinator, which keeps or undoes the change."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._replications[transactional_id] = future
        meta = self.coordinator.txns.get(transactional_id)
        timeout_ms = min(meta.timeout_ms if meta is not None else 0, self.coordinator.config.max_timeout_ms)
        task = asyncio.get_running_loop().create_task(
            self._replicate(transactional_id, partition, offset, max(timeout_ms, 1000) / 1000, future),
            name=f"replicate {transactional_id}")
        self._replication_tasks.add(task)
        task.add_done_callback(self._replication_tasks.discard)

    async def _replicate(
        self, transactional_id: str, index: int, offset: int, timeout_s: float, future: asyncio.Future[int]
    ) -> None:
        code = 0
        replicas = self.store.replica_manager
        partition = replicas.partition(TRANSACTION_STATE, index) if replicas is not None else None
        try:
            if replicas is None or partition is None or not partition.is_leader:
                raise NotLeaderOrFollowerError(f"{TRANSACTION_STATE}-{index} is not led here")
            min_isr = min_insync_replicas(replicas, partition)
            await partition.wait_for_high_watermark(offset, min_isr, timeout_s)
        except KafkaError as exc:
            code = write_error_code(exc)
        except asyncio.CancelledError:
            code = E.NOT_COORDINATOR
            raise
        finally:
            try:
                self.coordinator.replication_done(transactional_id, offset, code)
            finally:
                if not future.done():
                    future.set_result(code)
                if self._replications.get(transactional_id) is future:
                    del self._replications[transactional_id]

    async def wait_replicated(self, transactional_id: str, timeout_s: float | None = None) -> int:
        """Cluster mode: the outcome of ``transactional_id``'s change still replicating (0 once
        the ISR holds it, else the error Kafka's ``appendTransactionToLog`` maps the failure to);
        0 when none is (at once on a single node). ``timeout_s`` is unused: the write's own
        timeout applies."""
        future = self._replications.get(transactional_id)
        if future is None:
            return 0
        return await asyncio.shield(future)

    async def check_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
        *, add: bool,
    ) -> dict[TopicPartition, int]:
        """Whether ``partitions`` are in the producer's ongoing transaction (``add``: transactions
        v2, they join it), asked of the node coordinating ``transactional_id`` (this one or, in
        cluster mode, another). Error codes as ``add_partition_implicitly`` / ``verify_produce``."""
        coordinator = self.coordinator
        if self.remote_verifier is None or coordinator.owns(transactional_id):
            if add:
                added = {tp: coordinator.add_partition_implicitly(transactional_id, producer_id, epoch, tp)
                         for tp in partitions}
                if code := await self.wait_replicated(transactional_id):  # joined once the ISR holds it
                    added = {tp: c or code for tp, c in added.items()}
                return added
            return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        return await self.remote_verifier.check(transactional_id, producer_id, epoch, partitions, add=add)

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

    async def commit_offsets_in_cluster(
        self, commit: TransactionalOffsetCommit, *, add_partition: bool
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit at the group's coordinator in cluster mode: the transaction is checked
        with (for transactions v2, the group's partition added by) the node coordinating the
        transactional id, possibly another one; the group coordinator then keeps the offsets
        pending, answered once the ISR holds them."""
        if not commit.group_id or self.coordinator.owns(commit.transactional_id):
            result = self.commit_offsets(commit, add_partition=add_partition)
            if add_partition and (code := await self.wait_replicated(commit.transactional_id)):
                result = {tp: code if c == E.NONE else c for tp, c in result.items()}
        else:
            groups = self._group_service()
            tp = (CONSUMER_OFFSETS, groups.coordinator.partition_for(commit.group_id))
            checked = await self.check_transaction(
                commit.transactional_id, commit.producer_id, commit.producer_epoch, [tp], add=add_partition
            )
            code = checked[tp]
            if code == E.PRODUCER_FENCED:
                code = E.INVALID_PRODUCER_EPOCH
            if code:
                return dict.fromkeys(commit.offsets, code)
            result = groups.coordinator.commit_transactional_offsets(
                commit.group_id, commit.producer_id, commit.producer_epoch, commit.generation,
                commit.member_id, commit.group_instance_id, commit.offsets,
            )
        if self.groups is not None and any(code == E.NONE for code in result.values()):
            code = await self.groups.wait_replicated(commit.group_id, 5.0)
            if code:
                result = {tp: code if c == E.NONE else c for tp, c in result.items()}
        return result

    def _group_service(self) -> GroupCoordinatorService:
        if self.groups is None:
            raise RuntimeError("the transaction coordinator runs without a group coordinator")
        return self.groups

    async def start(self) -> None:
        """Load in the background (after the group coordinator has loaded); until then the
        transactional APIs answer COORDINATOR_LOAD_IN_PROGRESS. In cluster mode partitions load
        when this node becomes their leader (``on_leadership``)."""
        if self.coordinator.owned is not None or self.storage.topic(TRANSACTION_STATE) is None:
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
        for batch in self._read_partition(partition):
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

    def _read_partition(self, partition: int) -> Iterator[RecordBatch]:
        """The partition's batches to load: in cluster mode up to its log end (see
        ``Storage.read_batches``)."""
        return self.storage.read_batches(
            TRANSACTION_STATE, partition, to_log_end=self.store.replica_manager is not None
        )

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
        for task in list(self._replication_tasks):
            task.cancel()
        for loader in self._partition_loaders.values():
            loader.cancel()
        self._partition_loaders.clear()
        if self.remote_verifier is not None:
            await self.remote_verifier.stop()
        if self.remote_markers is not None:
            await self.remote_markers.stop()
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
            self._loader = None
