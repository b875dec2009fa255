"""The group coordinator as a broker service: its ``__consumer_offsets`` topic, loading at start-up,
offset retention as periodic work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from reference_broker.clock import Clock
from reference_broker.config import ConfigError
from reference_broker.coordinator.group.classic_members import MigrationPolicy
from reference_broker.coordinator.group.committed_writes import WRITE_TIMEOUT_S, CommittedWrites
from reference_broker.coordinator.group.consumer_coordinator import ConsumerGroupConfig
from reference_broker.coordinator.group.consumer_group import TopicInfo
from reference_broker.coordinator.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    OffsetsReplay,
    Record,
)
from reference_broker.coordinator.group.server_assignors import ASSIGNORS
from reference_broker.log.config import segment_size_configs
from reference_broker.services import PeriodicTask
from reference_broker.storage import CONSUMER_OFFSETS, is_internal
from sdk.records import ControlType

if TYPE_CHECKING:
    from reference_broker.config import BrokerConfig
    from reference_broker.replication.replica_manager import ReplicaManager
    from reference_broker.storage import Storage

log = logging.getLogger("reference_broker.group_coordinator")
#: records replayed between two yields of the event loop while loading (a few milliseconds)
LOAD_STEP_RECORDS = 2000


def group_config(config: BrokerConfig, num_partitions: int | None = None) -> GroupConfig:
    """The coordinator's settings from the broker keys (Kafka's names)."""
    return GroupConfig(
        min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
        initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
        max_group_size=config.get("group.max.size"),
        offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
        offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
        num_partitions=num_partitions or config.get("offsets.topic.num.partitions"),
    )


def consumer_group_config(config: BrokerConfig) -> ConsumerGroupConfig:
    """The KIP-848 coordinator's settings (``group.consumer.*``), checked against their bounds
    as Kafka checks them at start-up."""
    for name in ("session.timeout.ms", "heartbeat.interval.ms"):
        value = config.get(f"group.consumer.{name}")
        low, high = config.get(f"group.consumer.min.{name}"), config.get(f"group.consumer.max.{name}")
        if not low <= value <= high:
            raise ConfigError(
                f"group.consumer.{name}: {value} is outside group.consumer.min.{name} ({low})"
                f" .. group.consumer.max.{name} ({high})"
            )
    if config.get("group.consumer.heartbeat.interval.ms") >= config.get("group.consumer.session.timeout.ms"):
        raise ConfigError(
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"
        )
    protocols = config.get("group.coordinator.rebalance.protocols")
    if "classic" not in protocols or not set(protocols) <= {"classic", "consumer"}:
        raise ConfigError(
            f"group.coordinator.rebalance.protocols: {','.join(protocols)}: this broker serves"
            " 'classic' (always) and 'consumer'"
        )
    unknown = [name for name in config.get("group.consumer.assignors") if name not in ASSIGNORS]
    if unknown or not config.get("group.consumer.assignors"):
        raise ConfigError(
            f"group.consumer.assignors: {unknown or 'empty'}: the server assignors are {', '.join(ASSIGNORS)}"
        )
    return ConsumerGroupConfig(
        heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
        session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
        assignors=tuple(config.get("group.consumer.assignors")),
        max_size=config.get("group.consumer.max.size"),
    )


class StorageGroupStore:
    """Writes the coordinator's records to ``__consumer_offsets`` through the storage adapter,
    creating the topic on first use (as Kafka does: a broker that never sees a group has none)."""

    def __init__(self, storage: Storage, config: BrokerConfig, num_partitions: int):
        self.storage = storage
        self.config = config
        self.num_partitions = num_partitions
        #: Cluster mode: the controller creates the topic (replicated), never this node alone.
        self.replicated = False
        #: Cluster mode: refuses a write this node could not get committed (not the leader in
        #: the loaded epoch, or the ISR below ``min.insync.replicas``) before appending it.
        self.writes: CommittedWrites | None = None

    def ensure_topic(self) -> None:
        if not self.replicated and self.storage.topic(CONSUMER_OFFSETS) is None:
            self.storage.ensure_internal_topic(
                CONSUMER_OFFSETS,
                self.num_partitions,
                {
                    "cleanup.policy": "compact",
                    **segment_size_configs(int(self.config.get("offsets.topic.segment.bytes"))),
                },
            )

    def write(self, partition: int, batch: list[Record]) -> None:
        self.ensure_topic()
        if self.writes is not None:
            self.writes.check_writable(partition)
        self.storage.append_as_coordinator(CONSUMER_OFFSETS, partition, batch)

    def write_transactional(
        self, partition: int, batch: list[Record], producer_id: int, producer_epoch: int
    ) -> None:
        """A TxnOffsetCommit's records: one transactional batch of the producer."""
        self.ensure_topic()
        if self.writes is not None:
            self.writes.check_writable(partition)
        self.storage.append_as_coordinator(
            CONSUMER_OFFSETS, partition, batch, producer_id=producer_id, producer_epoch=producer_epoch
        )


class GroupCoordinatorService:
    """Owns the ``GroupCoordinator`` of a running broker."""

    name = "group-coordinator"

    def __init__(self, config: BrokerConfig, storage: Storage, clock: Clock):
        self.broker_config = config
        self.storage = storage
        existing = storage.topic(CONSUMER_OFFSETS)
        num_partitions = existing.num_partitions if existing else config.get("offsets.topic.num.partitions")
        self.store = StorageGroupStore(storage, config, num_partitions)
        self.coordinator = GroupCoordinator(
            clock, group_config(config, num_partitions), self.store, topic_exists=self._topic_exists
        )
        self.coordinator.consumer.configure(
            consumer_group_config(config), self._topic_info, self._topic_names
        )
        self.coordinator.consumer.migration_policy = MigrationPolicy(
            str(config.get("group.consumer.migration.policy")).lower()
        )
        self._loader: asyncio.Task[None] | None = None
        self._partition_loaders: dict[int, asyncio.Task[None]] = {}
        #: Cluster mode: the replicas of this node, whose high watermark acknowledges a write.
        self.replica_manager: ReplicaManager | None = None
        #: Cluster mode: the writes of the led partitions until the ISR holds them.
        self.writes: CommittedWrites | None = None

    def use_replicated_topic(self, replica_manager: ReplicaManager) -> None:
        """Cluster mode: ``__consumer_offsets`` is a replicated topic the controller creates; this
        node coordinates the groups of the partitions it leads, loading each one when it becomes
        its leader (``on_leadership``), and answers NOT_COORDINATOR for the others."""
        self.replica_manager = replica_manager
        self.store.replicated = True
        self.coordinator.owned = set()
        self.writes = self.store.writes = CommittedWrites(replica_manager)
        writes = self.writes

        def when_committed(partition: int, apply: Callable[[], None], up_to: int | None) -> None:
            writes.after_commit(partition, apply, up_to=up_to)

        self.coordinator.apply_when_committed = when_committed

        def outcome(partition: int, committed: Callable[[], None], failed: Callable[[int], None]) -> None:
            writes.after_commit(partition, committed, failed, WRITE_TIMEOUT_S)

        self.coordinator.outcome_when_committed = outcome

        def until_committed(partition: int) -> Awaitable[int]:
            return writes.wait(partition, WRITE_TIMEOUT_S)

        self.coordinator.until_committed = until_committed

    def on_leadership(self, partition: int, leads: bool) -> None:
        """The metadata moved ``__consumer_offsets`` partition ``partition``'s leadership: when it
        comes here the partition's groups load from the local replica in the background
        (COORDINATOR_LOAD_IN_PROGRESS meanwhile, Kafka's ``onElection``); when it goes away they
        are dropped (``onResignation``).

        The groups are loaded in the partition's leader epoch (Kafka's coordinator epoch): writes
        are refused once the partition is led in another epoch, and a leadership that comes back
        in a newer epoch than the loaded one (lost and regained between two metadata updates
        this node saw, the log possibly truncated meanwhile) drops the groups and loads them
        again; the same or an older epoch changes nothing."""
        owned = self.coordinator.owned
        writes = self.writes
        if owned is None or writes is None:
            return
        epoch = writes.leader_epoch(partition)
        if leads and partition in owned:
            if epoch <= writes.epochs.get(partition, -1):
                return
            log.info("%s-%d is led here again in epoch %d: its groups load again",
                     CONSUMER_OFFSETS, partition, epoch)
            self._resign(partition)
        if not leads and partition not in owned:
            return
        if leads:
            writes.elected(partition, epoch)
            owned.add(partition)
            self.coordinator.loading.add(partition)
            self._partition_loaders[partition] = asyncio.get_running_loop().create_task(
                self._load_elected(partition), name=f"load {CONSUMER_OFFSETS}-{partition}")
            return
        self._resign(partition)
        log.info("no longer the group coordinator of %s-%d", CONSUMER_OFFSETS, partition)

    def _resign(self, partition: int) -> None:
        """Drop partition ``partition``'s groups and the changes still waiting for the ISR."""
        assert self.coordinator.owned is not None and self.writes is not None
        self.coordinator.owned.discard(partition)
        self.writes.forget(partition)
        self.coordinator.loading.discard(partition)
        loader = self._partition_loaders.pop(partition, None)
        if loader is not None:
            loader.cancel()
        self.coordinator.unload_partition(partition)

    async def _load_elected(self, partition: int) -> None:
        try:
            await self.load_partition_in_steps(partition)
            log.info("group coordinator of %s-%d loaded", CONSUMER_OFFSETS, partition)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", CONSUMER_OFFSETS, partition)
        finally:
            self.coordinator.loading.discard(partition)
            if self._partition_loaders.get(partition) is asyncio.current_task():
                del self._partition_loaders[partition]

    async def wait_replicated(self, group_id: str, timeout_s: float) -> int:
        """Cluster mode: wait until everything written to ``group_id``'s partition is committed
        (``CommittedWrites.wait``: Kafka answers a coordinator write once the high watermark
        passes it); 0 then (always at once on a single node), else the client's error code:
        NOT_COORDINATOR (the leadership moved), COORDINATOR_NOT_AVAILABLE (not committed in
        ``timeout_s``)."""
        if self.writes is None:
            return 0
        return await self.writes.wait(self.coordinator.partition_for(group_id), timeout_s)

    def _topic_info(self, name: str) -> TopicInfo | None:
        meta = self.storage.topic(name)
        return None if meta is None else TopicInfo(meta.topic_id, meta.name, meta.num_partitions)

    def _topic_names(self) -> list[str]:
        """What a regex subscription may match: every topic but the internal ones (as Kafka)."""
        return [t.name for t in self.storage.topics() if not is_internal(t.name)]

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` if this broker has none yet: Kafka does when a client
        looks a group up (FindCoordinator) or sends its offsets to a transaction."""
        self.store.ensure_topic()

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition of ``group_id``, the topic created first if needed."""
        self.ensure_offsets_topic()
        return CONSUMER_OFFSETS, self.coordinator.partition_for(group_id)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker written to ``__consumer_offsets`` partition ``partition``: the
        producer's pending transactional offsets there are published or dropped (Kafka's
        ``GroupCoordinator.completeTransaction``)."""
        self.coordinator.complete_transactional_offsets(partition, producer_id, commit)

    def _topic_exists(self, topic: str, partition: int) -> bool:
        meta = self.storage.topic(topic)
        return meta is not None and 0 <= partition < meta.num_partitions

    async def start(self) -> None:
        """Start loading every partition in the background; until a partition is read, its
        groups answer COORDINATOR_LOAD_IN_PROGRESS."""
        if self.coordinator.owned is not None or self.storage.topic(CONSUMER_OFFSETS) is None:
            return
        self.coordinator.loading = set(range(self.coordinator.config.num_partitions))
        self._loader = asyncio.create_task(self._load_all(), name="load __consumer_offsets")

    async def _load_all(self) -> None:
        for partition in sorted(self.coordinator.loading):
            try:
                await self.load_partition_in_steps(partition)
            except Exception:
                log.exception("loading %s-%d failed", CONSUMER_OFFSETS, partition)
            self.coordinator.loading.discard(partition)
            await asyncio.sleep(0)
        log.info("group coordinator loaded %d groups", len(self.coordinator.groups))

    def load_partition(self, partition: int) -> None:
        """Replay one partition at once (tests and tools; the broker loads in steps)."""
        replay = OffsetsReplay()
        pending: dict[int, list[Record]] = {}
        for _ in self._replay_steps(partition, replay, pending):
            pass
        self.coordinator.finish_load(replay, partition)
        self.coordinator.load_transactional_offsets(pending)

    async def load_partition_in_steps(self, partition: int) -> None:
        """Replay one partition, yielding the event loop after every ``LOAD_STEP_RECORDS``
        records, so a large ``__consumer_offsets`` never holds other clients up; its groups
        answer COORDINATOR_LOAD_IN_PROGRESS until the end."""
        replay = OffsetsReplay()
        pending: dict[int, list[Record]] = {}
        for _ in self._replay_steps(partition, replay, pending):
            await asyncio.sleep(0)
        self.coordinator.finish_load(replay, partition)
        self.coordinator.load_transactional_offsets(pending)

    def _replay_steps(
        self, partition: int, replay: OffsetsReplay, pending: dict[int, list[Record]]
    ) -> Iterator[None]:
        """Feed the partition's records to ``replay``, pausing (yielding) between steps.

        Transactional offset commits count from their producer's COMMIT marker on; those whose
        transaction is still open end in ``pending`` (the transaction coordinator ends them).
        A newly elected leader reads to the log end; the records past the high watermark as the
        load began are marked with the end of their batch (``OffsetsReplay.add``'s
        ``commits_at``), the offset the high watermark must pass for them to be committed."""
        done = 0
        to_log_end = self.replica_manager is not None  # a newly elected leader: see read_batches
        committed_end = self._high_watermark(partition) if to_log_end else None
        for batch in self.storage.read_batches(CONSUMER_OFFSETS, partition, to_log_end=to_log_end):
            if batch.is_control:
                ended = pending.pop(batch.producer_id, [])
                if batch.control_record().type == ControlType.COMMIT:
                    for key, value in ended:
                        replay.add(key, value)
                continue
            target = pending.setdefault(batch.producer_id, []) if batch.is_transactional else None
            for record in batch:
                if record.key is None:
                    continue
                if target is not None:
                    target.append((record.key, record.value))
                elif committed_end is None or record.offset < committed_end:
                    replay.add(record.key, record.value)
                else:
                    replay.add(record.key, record.value, commits_at=batch.next_offset)
                done += 1
            if done >= LOAD_STEP_RECORDS:
                done = 0
                yield

    def _high_watermark(self, partition: int) -> int:
        """The high watermark of this node's replica of ``__consumer_offsets`` partition ``partition``."""
        assert self.replica_manager is not None
        part = self.replica_manager.partition(CONSUMER_OFFSETS, partition)
        return part.log.high_watermark if part is not None else 0

    async def wait_loaded(self) -> None:
        if self._loader is not None:
            await asyncio.shield(self._loader)

    def periodic_tasks(self) -> list[PeriodicTask]:
        interval_s = self.broker_config.get("offsets.retention.check.interval.ms") / 1000
        return [PeriodicTask("offset-expiry", interval_s, self.coordinator.expire_offsets)]

    async def stop(self) -> None:
        self.coordinator.shutdown()
        if self.writes is not None:
            await self.writes.close()
        for loader in self._partition_loaders.values():
            loader.cancel()
        self._partition_loaders.clear()
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
            self._loader = None
