"""The replicas this broker holds and the transitions the metadata publisher drives (Kafka's
``ReplicaManager.applyDelta``): ``become_leader``, ``become_follower``, ``stop_replica``.

- ``become_leader``: the partition stops fetching and leads in the new epoch (its epoch start is
  recorded in the leader epoch cache, followers' states reset, see ``Partition.make_leader``).
- ``become_follower``: appends waiting as leader fail with NOT_LEADER_OR_FOLLOWER, and the
  partition moves to the fetcher for the new leader (``num.replica.fetchers`` fetchers per
  leader, a partition's by a hash of its name), fetching from its log end offset; the first fetch
  carries ``last_fetched_epoch``, so a diverged suffix is cut before anything is appended.
- ``stop_replica``: fetching stops, waiting appends fail; with ``delete`` the log goes too.

A periodic task proposes ISR shrinks every ``replica.lag.time.max.ms / 2`` (Kafka's
``isr-expiration`` task). Transitions that are stale (an older leader epoch than the partition
has) are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, cast

from reference_broker.replication.config import ReplicationConfig
from reference_broker.replication.fetcher import ReplicaFetcher
from reference_broker.replication.partition import (
    AlterPartitionSender,
    Partition,
    RegistrationLookup,
    TopicPartition,
)
from sdk.protocol.errors import ErrorCode, NotLeaderOrFollowerError

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog
    from reference_broker.network.peer import PeerChannels

log = logging.getLogger("reference_broker.replication")


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    """Every replicated partition of this broker, by ``(topic, partition)``."""

    def __init__(
        self,
        node_id: int,
        *,
        get_log: Callable[[TopicPartition], PartitionLog],
        channels: PeerChannels,
        config: ReplicationConfig | None = None,
        alter_partition: AlterPartitionSender | None = None,
        topic_id: Callable[[str], uuid.UUID] = lambda _name: uuid.UUID(int=0),
        delete_log: Callable[[TopicPartition], None] | None = None,
        notify: Callable[[TopicPartition], None] | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
        known_partition: Callable[[str, int], bool] | None = None,
        rack_of: Callable[[int], str | None] = lambda _node: None,
        registration: RegistrationLookup | None = None,
    ) -> None:
        self.node_id = node_id
        self.get_log = get_log
        self.channels = channels
        self.config = config or ReplicationConfig()
        self.alter_partition = alter_partition
        self.topic_id = topic_id
        self.delete_log = delete_log
        self.notify = notify
        self.broker_epoch = broker_epoch
        self.known_partition = known_partition
        #: a broker's ``broker.rack`` (None: none), for fetch from the closest replica
        self.rack_of = rack_of
        #: brokers' registrations in the metadata, for the ISR eligibility of followers
        self.registration = registration
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._isr_task: asyncio.Task[None] | None = None

    # -- lookups -------------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def knows_partition(self, topic: str, index: int) -> bool:
        """Whether the cluster has the partition (for NOT_LEADER_OR_FOLLOWER vs UNKNOWN_TOPIC)."""
        if (topic, index) in self.partitions:
            return True
        return self.known_partition is not None and self.known_partition(topic, index)

    def _partition_for(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is None:
            part = Partition(tp[0], tp[1], self.node_id, self.get_log(tp),
                             alter_partition=self.alter_partition,
                             replica_lag_time_max_ms=self.config.lag_time_max_ms,
                             notify=self.notify, registration=self.registration,
                             local_broker_epoch=self.broker_epoch)
            self.partitions[tp] = part
        return part

    def on_append(self, key: Hashable) -> None:
        """A leader's log grew (a produce, a coordinator's write, a transaction marker; ``key`` is
        the storage's ``(topic, partition)``): with the leader alone in the ISR that commits it at
        once."""
        part = self.partitions.get(cast(TopicPartition, key))
        if part is not None and part.is_leader:
            part.maybe_increment_high_watermark()

    # -- transitions ---------------------------------------------------------------------------

    def become_leader(self, tp: TopicPartition, leader_epoch: int, partition_epoch: int,
                      replicas: list[int], isr: list[int]) -> bool:
        """Lead ``tp`` (see the module docstring); False when the transition is stale."""
        part = self._partition_for(tp)
        if part.leader_id is not None and leader_epoch < part.leader_epoch:
            return False
        self._stop_fetching(tp)
        changed = part.make_leader(leader_epoch, partition_epoch, replicas, isr, _now_ms())
        if changed:
            log.info("%s-%d: leader in epoch %d, replicas %s, ISR %s", tp[0], tp[1],
                     leader_epoch, replicas, isr)
        return changed

    def become_follower(self, tp: TopicPartition, leader_id: int, leader_epoch: int,
                        partition_epoch: int, replicas: list[int]) -> bool:
        """Follow ``leader_id`` for ``tp``; False when the transition is stale."""
        part = self._partition_for(tp)
        if not part.make_follower(leader_id, leader_epoch, partition_epoch, replicas):
            return False
        self._stop_fetching(tp)
        fetcher = self._fetcher_for(leader_id, tp)
        fetcher.add(tp, part.log, leader_epoch, self.topic_id(tp[0]))
        log.info("%s-%d: following %d in epoch %d from offset %d", tp[0], tp[1], leader_id,
                 leader_epoch, part.log.log_end_offset)
        return True

    def stop_replica(self, tp: TopicPartition, delete: bool) -> None:
        """Stop replicating ``tp`` here; with ``delete`` remove its log."""
        self._stop_fetching(tp)
        part = self.partitions.pop(tp, None)
        if part is not None:
            part.fail_waiters(NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: replica stopped"))
        if delete and self.delete_log is not None:
            self.delete_log(tp)

    def _fetcher_for(self, leader_id: int, tp: TopicPartition) -> ReplicaFetcher:
        index = zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % max(1, self.config.num_fetchers)
        fetcher = self.fetchers.get((leader_id, index))
        if fetcher is None:
            fetcher = ReplicaFetcher(self.node_id, leader_id, self.channels, self.config,
                                     broker_epoch=self.broker_epoch,
                                     on_high_watermark=self.notify)
            self.fetchers[(leader_id, index)] = fetcher
            with contextlib.suppress(RuntimeError):  # no running loop: started by start()
                fetcher.start()
        return fetcher

    def _stop_fetching(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.start()
        if self._isr_task is None:
            self._isr_task = asyncio.get_running_loop().create_task(
                self._expire_isr(), name="isr-expiration")

    async def stop(self) -> None:
        task, self._isr_task = self._isr_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for part in self.partitions.values():
            part.fail_waiters(NotLeaderOrFollowerError(f"{part.topic}-{part.index}: broker stopping"))

    async def _expire_isr(self) -> None:
        period = max(0.01, self.config.lag_time_max_ms / 2000)
        while True:
            await asyncio.sleep(period)
            now = _now_ms()
            for part in list(self.partitions.values()):
                if part.is_leader:
                    part.maybe_shrink_isr(now)


def client_read_error(manager: ReplicaManager, topic: str, index: int, current_leader_epoch: int,
                      *, follower_may_serve: bool = False) -> int:
    """A consumer's Fetch or ListOffsets of ``topic``-``index`` in cluster mode: the leader serves
    it (NOT_LEADER_OR_FOLLOWER elsewhere), and so does a follower when ``follower_may_serve`` (a
    Fetch v11+, which carries the client's rack: KIP-392; a follower reads up to its own high
    watermark), in the epoch the client knows, if it says one (FENCED_LEADER_EPOCH /
    UNKNOWN_LEADER_EPOCH); 0 when it may be served."""
    from reference_broker.handlers.offset_for_leader_epoch import epoch_error

    partition = manager.partition(topic, index)
    if partition is None or partition.leader_id is None or not (
            partition.is_leader or follower_may_serve):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return epoch_error(current_leader_epoch, partition.leader_epoch)


def preferred_read_replica(manager: ReplicaManager, topic: str, index: int, client_rack: str,
                           fetch_offset: int) -> int:
    """The replica a leader sends a consumer in ``client_rack`` to (KIP-392), or -1 to serve it
    here: always -1 unless ``replica.selector.class`` is set."""
    if not manager.config.select_closest_replica or not client_rack:
        return -1
    partition = manager.partition(topic, index)
    if partition is None or not partition.is_leader:
        return -1
    return partition.preferred_read_replica(client_rack, fetch_offset, _now_ms(), manager.rack_of)
