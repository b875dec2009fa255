"""A follower's fetch loop against one leader (Kafka's ``ReplicaFetcherThread`` /
``AbstractFetcherThread``), one asyncio task per (leader, fetcher index).

Each round sends one Fetch (``replica_id`` / ``replica_state`` = this broker, sessionless) for
every partition it follows from that leader, each from the log end offset with
``last_fetched_epoch`` = the latest epoch of the local leader epoch cache and
``current_leader_epoch`` = the epoch the metadata gave. Per partition answer:

- records: appended with :meth:`PartitionLog.append_as_follower` (the leader's offsets, batches and
  epochs), then the local high watermark becomes ``min(leader's high watermark, log end)`` and
  the log start offset follows the leader's;
- ``diverging_epoch``: the local log is cut where the leader's log diverged (Kafka's
  ``truncateOnFetchResponse``: to ``min(leader's end offset of that epoch, local end offset of the
  same epoch)``; if the local cache does not know the epoch, to where its own floor epoch ends,
  and the next fetch narrows it down further);
- OFFSET_OUT_OF_RANGE: behind the leader's log start -> the local log restarts empty there; ahead
  of the leader's log -> cut back to the leader's high watermark;
- FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH / others: the partition
  waits ``replica.fetch.backoff.ms`` (new metadata moves it to another fetcher or updates it).

A failed connection or a failed request backs off ``replica.fetch.backoff.ms`` and retries; the
loop never ends on an error, only by :meth:`ReplicaFetcher.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_broker.network.peer import PeerConnectionError, PeerUnsupportedError
from sdk.protocol.errors import ErrorCode, KafkaError
from sdk.protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from reference_broker.log.partition_log import PartitionLog
    from reference_broker.network.peer import PeerChannels
    from reference_broker.replication.config import ReplicationConfig

log = logging.getLogger("reference_broker.replication")

TopicPartition = tuple[str, int]


@dataclass
class FetchState:
    """One followed partition in a fetcher."""

    log: PartitionLog
    leader_epoch: int
    topic_id: uuid.UUID
    delayed_until: float = 0.0


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, node_id: int, leader_id: int, channels: PeerChannels,
                 config: ReplicationConfig, *, broker_epoch: Callable[[], int] = lambda: -1,
                 on_high_watermark: Callable[[TopicPartition], None] | None = None) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.channels = channels
        self.config = config
        self.broker_epoch = broker_epoch
        self.on_high_watermark = on_high_watermark
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- membership ----------------------------------------------------------------------------

    def add(self, tp: TopicPartition, plog: PartitionLog, leader_epoch: int,
            topic_id: uuid.UUID) -> None:
        self.partitions[tp] = FetchState(plog, leader_epoch, topic_id)
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.fetch_backoff_ms / 1000
        while True:
            request, asked = self._build_request()
            if request is None:
                self._changed.clear()
                wait = min((s.delayed_until for s in self.partitions.values()), default=None)
                timeout = None if wait is None else max(0.0, wait - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
                continue
            try:
                response = await self.channels.send(self.leader_id, request)
            except (PeerConnectionError, PeerUnsupportedError, OSError) as exc:
                log.info("fetch from leader %d failed: %s; retrying in %.1f s",
                         self.leader_id, exc, backoff)
                await asyncio.sleep(backoff)
                continue
            assert isinstance(response, FetchResponse)
            if response.error_code:
                log.info("fetch from leader %d answered error %d", self.leader_id, response.error_code)
                await asyncio.sleep(backoff)
                continue
            self.process_response(response, asked)

    def _build_request(self) -> tuple[FetchRequest | None, dict[TopicPartition, int]]:
        now = time.monotonic()
        config = self.config
        topics: dict[str, FetchRequest.FetchTopic] = {}
        asked: dict[TopicPartition, int] = {}
        for (topic, index), state in self.partitions.items():
            if state.delayed_until > now:
                continue
            plog = state.log
            latest = plog.leader_epoch_cache.latest_epoch
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = FetchRequest.FetchTopic(
                    topic=topic, topic_id=state.topic_id, partitions=[])
            entry.partitions.append(FetchRequest.FetchPartition(
                partition=index, current_leader_epoch=state.leader_epoch,
                fetch_offset=plog.log_end_offset,
                last_fetched_epoch=-1 if latest is None else latest,
                log_start_offset=plog.log_start_offset,
                partition_max_bytes=config.fetch_max_bytes,
            ))
            asked[(topic, index)] = state.leader_epoch
        if not topics:
            return None, asked
        request = FetchRequest(
            replica_id=self.node_id,
            replica_state=FetchRequest.ReplicaState(replica_id=self.node_id,
                                                    replica_epoch=self.broker_epoch()),
            max_wait_ms=config.fetch_wait_max_ms, min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_response_max_bytes, isolation_level=0,
            session_id=0, session_epoch=-1, topics=list(topics.values()),
        )
        return request, asked

    # -- responses -----------------------------------------------------------------------------

    def process_response(self, response: FetchResponse, asked: dict[TopicPartition, int]) -> None:
        """Apply a fetch response to the partitions it answers (skipping those whose leader
        epoch changed while it was in flight)."""
        by_id = {s.topic_id: tp[0] for tp, s in self.partitions.items()}
        for topic in response.responses:
            name = topic.topic or by_id.get(topic.topic_id, "")
            for data in topic.partitions:
                tp = (name, data.partition_index)
                state = self.partitions.get(tp)
                if state is None or asked.get(tp) != state.leader_epoch:
                    continue
                try:
                    self._apply(tp, state, data)
                except KafkaError as exc:
                    log.warning("%s-%d: replicating from leader %d failed: %s",
                                tp[0], tp[1], self.leader_id, exc)
                    state.delayed_until = time.monotonic() + self.config.fetch_backoff_ms / 1000

    def _apply(self, tp: TopicPartition, state: FetchState,
               data: FetchResponse.PartitionData) -> None:
        plog = state.log
        code = data.error_code
        if code == ErrorCode.NONE:
            diverging = data.diverging_epoch
            if diverging is not None and diverging.epoch >= 0:
                plog.truncate_to(truncation_offset(plog, diverging.epoch, diverging.end_offset))
                return
            if data.records:
                plog.append_as_follower(data.records, now_ms=int(time.time() * 1000))
            self._follow_offsets(tp, plog, data.high_watermark, data.log_start_offset)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if data.log_start_offset > plog.log_end_offset:
                log.info("%s-%d: behind the leader's log start %d; restarting the log there",
                         tp[0], tp[1], data.log_start_offset)
                plog.truncate_fully_and_start_at(data.log_start_offset)
            elif data.high_watermark >= 0:
                plog.truncate_to(max(data.high_watermark, plog.log_start_offset))
        else:
            log.info("%s-%d: leader %d answered error %d; backing off",
                     tp[0], tp[1], self.leader_id, code)
            state.delayed_until = time.monotonic() + self.config.fetch_backoff_ms / 1000

    def _follow_offsets(self, tp: TopicPartition, plog: PartitionLog, leader_hw: int,
                        leader_log_start: int) -> None:
        old = plog.high_watermark
        plog.set_high_watermark(min(max(leader_hw, 0), plog.log_end_offset))
        if leader_log_start > plog.log_start_offset:
            plog.delete_records_before(min(leader_log_start, plog.high_watermark))
        if plog.high_watermark != old and self.on_high_watermark is not None:
            self.on_high_watermark(tp)


def truncation_offset(plog: PartitionLog, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log given the leader's ``(epoch, end offset)`` for the epoch it
    asked about (Kafka's ``getOffsetTruncationState``)."""
    log_end = plog.log_end_offset
    if leader_end_offset < 0:
        return min(plog.high_watermark, log_end)
    local_epoch, local_end = plog.leader_epoch_cache.end_offset_for(leader_epoch, log_end)
    if local_end < 0:
        return min(leader_end_offset, log_end)
    if local_epoch != leader_epoch:
        return min(local_end, log_end)
    return min(leader_end_offset, local_end, log_end)
