"""Fetcher: keeps one Fetch in flight per partition leader and buffers what comes back.

A background task sends a Fetch to every leader that has fetchable partitions (assigned, with a
position, not paused, at most one response buffered) and no Fetch in flight. Responses are kept
per partition as raw bytes (``PartitionRecords``) until the application takes records. A
partition with one response buffered is fetched again from where that response's data ends
(prefetch), so the next response is on its way while the application works through the current
one; the buffer holds at most two responses per partition (each bounded by
``max_partition_fetch_bytes``, a whole Fetch by ``fetch_max_bytes``). A prefetched response is
used only if it still continues the position once the one before it is consumed (a seek drops it).

Errors per partition: OFFSET_OUT_OF_RANGE resets the position per ``auto_offset_reset`` (or is
raised to the application with 'none'); leadership and unknown-topic errors refresh metadata and
retry after ``retry_backoff_ms``; anything else is raised from the next ``getmany``.

Offsets are reset with ListOffsets in the same task, so a consumer whose positions need a reset
makes progress without the application doing anything but poll.

Fetch sessions (KIP-227) are not used: every request is a full, sessionless fetch (session id 0,
epoch -1), which every broker accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterable
from typing import Any

from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.consumer.config import ConsumerConfig
from sdk.consumer.errors import NoOffsetForPartitionError, OffsetResetOutOfRangeError
from sdk.consumer.fetch_records import PartitionRecords
from sdk.consumer.records import ConsumerRecord
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import ErrorCode, KafkaError, KafkaTimeoutError, UnsupportedVersionError, make_error
from sdk.metrics.consumer import ConsumerMetrics
from sdk.protocol.messages import FetchRequest, ListOffsetsRequest

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "Fetcher"]

log = logging.getLogger(__name__)

FETCH = 1
LIST_OFFSETS = 2
#: ListOffsets timestamps meaning "the log start" and "the end" (high watermark or LSO).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: Last Fetch version that names topics (v13+ use topic ids, KIP-516).
LAST_FETCH_VERSION_WITH_NAMES = 12
#: Errors after which the partition's leader is looked up again and the request retried.
_REFRESH_AND_RETRY = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)
_FetchTopic = FetchRequest.FetchTopic
_FetchPartition = FetchRequest.FetchPartition


def _now() -> float:
    return time.monotonic()


class Fetcher:
    """Background fetching and offset resets for one consumer (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self._client = client
        #: The consumer's metrics (made here unless given): fetches per response, records and
        #: lag per partition handed out; the group and the consumer record into it too.
        self.metrics = metrics if metrics is not None else ConsumerMetrics(config.effective_client_id)
        self.metrics.bind_assigned_partitions(lambda: len(subscription.assigned_partitions()))
        #: Records ``take_one`` handed out and not yet recorded in the metrics, per partition
        #: (one record at a time is too often to record each): recorded at the next
        #: ``take_records`` or read of the metrics.
        self._taken_one: dict[TopicPartition, int] = {}
        self.metrics.registry.before_read(self._record_taken_one)
        self._subscription = subscription
        self._config = config
        self._read_committed = config.isolation == 1
        self._completed: dict[TopicPartition, PartitionRecords] = {}
        #: The response after ``_completed``'s, fetched from where that one's data ends.
        self._prefetched: dict[TopicPartition, PartitionRecords] = {}
        self._errors: dict[TopicPartition, BaseException] = {}
        self._in_flight: set[int] = set()
        self._node_backoff_until: dict[int, float] = {}
        self._resetting: asyncio.Task[None] | None = None
        self._reset_backoff_until = 0.0
        #: The refresh the client owes for topics this fetcher made it track (done when answered).
        self._topics_update: asyncio.Future[None] | None = None
        self._wake_event = asyncio.Event()
        self._data_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._max_wait_ms = int(config.fetch_max_wait_ms)
        self._request_timeout_ms = config.request_timeout_ms + config.fetch_max_wait_ms
        subscription.add_assignment_listener(self._on_assignment_change)
        client.add_listener(self.wake)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = self._loop.create_task(self._run(), name="kafka-fetcher")

    async def close(self) -> None:
        self._closed = True
        self._client.remove_listener(self.wake)
        self._subscription.remove_assignment_listener(self._on_assignment_change)
        for task in (self._task, self._resetting):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._completed.clear()
        self._prefetched.clear()
        self._data_event.set()

    def wake(self) -> None:
        """Something changed (assignment, position, pause, metadata): reconsider what to fetch."""
        self._wake_event.set()

    def _on_assignment_change(self) -> None:
        subscription = self._subscription
        for tp in [tp for tp in self._completed if not subscription.is_assigned(tp)]:
            del self._completed[tp]
        for tp in [tp for tp in self._prefetched if not subscription.is_assigned(tp)]:
            del self._prefetched[tp]
        for tp in [tp for tp in self._errors if not subscription.is_assigned(tp)]:
            del self._errors[tp]
        for tp in [tp for tp in self.metrics.partitions() if not subscription.is_assigned(tp)]:
            self.metrics.remove_partition(tp)
        topics = {tp.topic for tp in subscription.assigned_partitions()} | set(subscription.subscription)
        if not topics <= self._client.topics:
            self._topics_update = self._client.set_topics(topics | self._client.topics)
        self.wake()

    def discard(self, tp: TopicPartition) -> None:
        """Drop what is buffered or pending for ``tp`` (after a seek)."""
        self._completed.pop(tp, None)
        self._prefetched.pop(tp, None)
        self._errors.pop(tp, None)
        self.wake()

    async def ensure_topic_metadata(self) -> bool:
        """True if the metadata cache knows every assigned topic; otherwise has the client track
        the missing ones and waits (at most ``retry_backoff_max_ms``) for the refresh that asks
        for them, then answers whether they are known now.

        A topic the client did not track yet is refreshed at once (the Java client likewise
        refreshes at once for new topics, so a fresh consumer's first fetch is not delayed); one
        that is not ready yet (Apache Kafka creating it) is asked again by the client after a
        backoff, and the client's listener wakes the fetcher when it arrives.
        """
        client = self._client
        missing = self._missing_topics()
        if not missing:
            return True
        tracked = client.topics
        if not missing <= tracked:
            self._topics_update = client.set_topics(tracked | missing)
        update = self._topics_update
        if update is not None and not update.done():
            with contextlib.suppress(TimeoutError, KafkaError):
                async with asyncio.timeout(self._config.retry_backoff_max_ms / 1000):
                    await asyncio.shield(update)
        return not self._missing_topics()

    def _missing_topics(self) -> set[str]:
        known = self._client.cluster.topics
        return {tp.topic for tp in self._subscription.assigned_partitions() if tp.topic not in known}

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        wake = self._wake_event
        while not self._closed:
            wake.clear()
            try:
                self._maybe_reset_offsets()
                self._send_fetches()
            except Exception:  # never let one bad turn stop fetching for good
                log.exception("fetcher turn failed")
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)
            await wake.wait()

    def _wake_after(self, delay_s: float) -> None:
        self._loop.call_later(max(delay_s, 0.001), self.wake)

    def _send_fetches(self) -> None:
        subscription = self._subscription
        cluster = self._client.cluster
        now = _now()
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        missing_leader = False
        backoff_wait = 0.0
        for tp, state in subscription.items():
            if state.position is None or state.paused or state.revoking:
                continue
            if tp in self._errors or tp in self._prefetched:
                continue
            offset = state.position
            head = self._completed.get(tp)
            if head is not None:
                if head.end_offset is None:
                    continue
                offset = head.end_offset  # prefetch what follows the buffered data
            leader = cluster.leader_for(tp.topic, tp.partition)
            if leader < 0:
                missing_leader = True
                continue
            if leader in self._in_flight:
                continue
            until = self._node_backoff_until.get(leader, 0.0)
            if until > now:
                backoff_wait = min(backoff_wait, until - now) if backoff_wait else until - now
                continue
            by_node.setdefault(leader, []).append((tp, offset))
        if backoff_wait:
            self._wake_after(backoff_wait)
        if missing_leader:
            self._client.request_metadata_update()
        for node_id, partitions in by_node.items():
            if not self._client.ready(node_id):
                continue  # the client notifies (wakes us) when the connection is made or fails
            conn = self._client.connection(node_id)
            if conn is None:
                continue
            try:
                version, request, id_names = self._fetch_request(conn.version_for(FETCH), partitions)
                future = conn.send(request, version, timeout_ms=self._request_timeout_ms)
            except UnsupportedVersionError as exc:
                for tp, _ in partitions:
                    self._errors[tp] = exc
                self._data_event.set()
                continue
            except KafkaError as exc:
                self._fetch_failed(node_id, exc)
                continue
            assert future is not None
            self._in_flight.add(node_id)
            offsets = dict(partitions)
            done = functools.partial(self._on_fetch_done, node_id, offsets, version, id_names, _now())
            future.add_done_callback(done)

    def _fetch_request(
        self, version: int, partitions: list[tuple[TopicPartition, int]]
    ) -> tuple[int, FetchRequest, dict[Any, str]]:
        cluster = self._client.cluster
        by_topic: dict[str, list[Any]] = {}
        max_bytes = self._config.max_partition_fetch_bytes
        for tp, offset in partitions:
            by_topic.setdefault(tp.topic, []).append(
                _FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=-1,
                    fetch_offset=offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=max_bytes,
                )
            )
        id_names: dict[Any, str] = {}
        if version > LAST_FETCH_VERSION_WITH_NAMES:
            for topic in by_topic:
                meta = cluster.topic(topic)
                if meta is None or meta.topic_id is None:
                    version = LAST_FETCH_VERSION_WITH_NAMES
                    id_names = {}
                    break
                id_names[meta.topic_id] = topic
        topics = []
        for topic, parts in by_topic.items():
            topic_id = cluster.topic(topic).topic_id if id_names else None  # type: ignore[union-attr]  # known: loop above
            if topic_id is not None:
                topics.append(_FetchTopic(topic=topic, topic_id=topic_id, partitions=parts))
            else:
                topics.append(_FetchTopic(topic=topic, partitions=parts))
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=self._max_wait_ms,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=self._config.fetch_max_bytes,
            isolation_level=self._config.isolation,
            session_id=0,
            session_epoch=-1,
            topics=topics,
            forgotten_topics_data=[],
            rack_id=self._config.client_rack or "",
        )
        return version, request, id_names

    def _fetch_failed(self, node_id: int, error: BaseException) -> None:
        log.debug("fetch from node %s failed: %r", node_id, error)
        backoff = self._config.retry_backoff_ms / 1000
        self._node_backoff_until[node_id] = _now() + backoff
        self._wake_after(backoff)
        self._client.request_metadata_update()

    def _on_fetch_done(
        self,
        node_id: int,
        offsets: dict[TopicPartition, int],
        version: int,
        id_names: dict[Any, str],
        sent: float,
        future: asyncio.Future[Any],
    ) -> None:
        self._in_flight.discard(node_id)
        self.wake()
        if self._closed or future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self._fetch_failed(node_id, error)
            return
        response = future.result()
        if response.error_code:
            self._fetch_failed(node_id, make_error(response.error_code, "Fetch"))
            return
        size = 0
        for topic_data in response.responses:
            for p in topic_data.partitions:
                if p.records is not None:
                    size += len(p.records)
        now_ms = _now() * 1000
        self.metrics.record_fetch(now_ms - sent * 1000, size, now_ms)
        try:
            self._handle_fetch_response(node_id, offsets, version, id_names, response)
        except Exception as exc:  # a malformed response must not stop the loop
            log.warning("bad fetch response from node %s: %r", node_id, exc)
            self._fetch_failed(node_id, exc)

    def _handle_fetch_response(
        self,
        node_id: int,
        offsets: dict[TopicPartition, int],
        version: int,
        id_names: dict[Any, str],
        response: Any,
    ) -> None:
        subscription = self._subscription
        got_data = False
        refresh = False
        for topic_data in response.responses:
            topic = topic_data.topic if version <= LAST_FETCH_VERSION_WITH_NAMES else id_names.get(
                topic_data.topic_id
            )
            if topic is None:
                continue
            for p in topic_data.partitions:
                tp = TopicPartition(topic, p.partition_index)
                fetch_offset = offsets.get(tp)
                state = subscription.get_state(tp)
                if fetch_offset is None or state is None:
                    continue  # not asked for, or no longer assigned
                head = self._completed.get(tp)
                if head is not None:  # a prefetch: kept if it still continues the buffered data
                    if not p.error_code and head.end_offset == fetch_offset and tp not in self._prefetched:
                        self._update_watermarks(state, p)
                        if p.records is not None and len(p.records):
                            self._prefetched[tp] = self._partition_records(tp, fetch_offset, p)
                    continue  # errors show again when the position gets there
                if state.position != fetch_offset:
                    continue  # the application sought away
                code = p.error_code
                if code == ErrorCode.NONE:
                    self._update_watermarks(state, p)
                    if p.records is not None and len(p.records):
                        self._completed[tp] = self._partition_records(tp, fetch_offset, p)
                        got_data = True
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if subscription.default_reset == "none":
                        self._errors[tp] = OffsetResetOutOfRangeError(
                            f"offset {fetch_offset} of {tp.topic}-{tp.partition} is out of range and "
                            "auto_offset_reset is 'none'",
                            {tp: fetch_offset},
                        )
                        got_data = True
                    else:
                        log.info(
                            "offset %s of %s is out of range; resetting to %s",
                            fetch_offset,
                            tp,
                            subscription.default_reset,
                        )
                        subscription.request_offset_reset(tp)
                elif code in _REFRESH_AND_RETRY:
                    refresh = True
                else:
                    self._errors[tp] = make_error(code, f"Fetch {tp.topic}-{tp.partition}")
                    got_data = True
        if refresh:
            self._fetch_failed(node_id, make_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, "Fetch"))
        if got_data:
            self._data_event.set()

    @staticmethod
    def _update_watermarks(state: Any, p: Any) -> None:
        if p.high_watermark >= 0:
            state.highwater = p.high_watermark
        if p.last_stable_offset >= 0:
            state.last_stable_offset = p.last_stable_offset
        if p.log_start_offset >= 0:
            state.log_start_offset = p.log_start_offset

    def _partition_records(self, tp: TopicPartition, fetch_offset: int, p: Any) -> PartitionRecords:
        config = self._config
        aborted = None
        if self._read_committed and p.aborted_transactions:
            aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        return PartitionRecords(
            tp,
            fetch_offset,
            bytes(p.records),
            aborted=aborted,
            read_committed=self._read_committed,
            check_crcs=config.check_crcs,
            key_deserializer=config.key_deserializer,
            value_deserializer=config.value_deserializer,
        )

    # -- handing records out --------------------------------------------------------------------

    def has_buffered(self) -> bool:
        return bool(self._completed) or bool(self._errors)

    def take_records(
        self, partitions: Iterable[TopicPartition] | None, max_records: int | None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` buffered records (of ``partitions`` if given), advancing positions.

        Raises a pending partition error (out of range with 'none', corrupt data, authorization,
        ...) when no records are returned with it.
        """
        if self._taken_one:
            self._record_taken_one()
        wanted = None if not partitions else set(partitions)
        subscription = self._subscription
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records if max_records is not None else 1 << 62
        completed = self._completed
        drained = False
        for tp in list(completed):
            if remaining <= 0:
                break
            if wanted is not None and tp not in wanted:
                continue
            part = completed[tp]
            state = subscription.get_state(tp)
            if state is None or state.position != part.next_offset:
                del completed[tp]
                self._prefetched.pop(tp, None)
                drained = True
                continue
            if state.paused or state.revoking:
                continue
            try:
                records = part.take(remaining)
            except BaseException:
                del completed[tp]
                self._prefetched.pop(tp, None)
                state.position = part.next_offset
                self.wake()
                if result:
                    return result
                raise
            state.position = part.next_offset
            del completed[tp]
            if records:
                result[tp] = records
                remaining -= len(records)
                self._record_consumed(tp, state, len(records))
            if part.exhausted:
                drained = True
                following = self._prefetched.pop(tp, None)
                if following is not None and following.fetch_offset == state.position:
                    completed[tp] = following
            else:
                completed[tp] = part  # to the back: the next call starts with another partition
        if drained:
            self.wake()
        if not result and self._errors:
            for tp, error in list(self._errors.items()):
                if (wanted is None or tp in wanted) and not subscription.is_paused(tp):
                    del self._errors[tp]
                    self.wake()
                    raise error
        if not self._completed and not self._errors:
            self._data_event.clear()
        return result

    def take_one(self, partitions: list[TopicPartition] | None) -> ConsumerRecord | None:
        """The next buffered record (of ``partitions`` if given), advancing its position: the
        ``getone`` path, staying on one partition while it has records (as aiokafka's does)."""
        wanted = partitions or None
        subscription = self._subscription
        for tp, part in self._completed.items():
            if wanted is not None and tp not in wanted:
                continue
            state = subscription.get_state(tp)
            if state is None or state.position != part.next_offset or part.error is not None:
                break  # leave the unusual cases to take_records
            if state.paused or state.revoking:
                continue
            record = part.next_record()
            if record is None:
                break
            state.position = part.next_offset
            taken = self._taken_one
            taken[tp] = taken.get(tp, 0) + 1
            return record
        records = self.take_records(partitions, 1)
        for batch in records.values():
            return batch[0]
        return None

    def _record_taken_one(self) -> None:
        taken, self._taken_one = self._taken_one, {}
        for tp, count in taken.items():
            state = self._subscription.get_state(tp)
            if state is not None and state.position is not None:
                self._record_consumed(tp, state, count)
            else:
                self.metrics.record_consumed(tp, count, None, None, _now() * 1000)

    def _record_consumed(self, tp: TopicPartition, state: Any, count: int) -> None:
        """Java's ``FetchCollector``: records handed out, and the partition's lag (to the last
        stable offset under read_committed, else the high watermark) and lead (from the log
        start offset) at its new position."""
        position = state.position
        end = state.last_stable_offset if self._read_committed else state.highwater
        lag = end - position if end is not None else None
        start = state.log_start_offset
        lead = position - start if start is not None else None
        self.metrics.record_consumed(tp, count, lag, lead, _now() * 1000)

    async def wait_for_data(self, timeout_s: float) -> None:
        """Until a response brings records or an error, or ``timeout_s`` passes."""
        if timeout_s <= 0:
            return
        self._data_event.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._data_event.wait()

    def notify_waiters(self) -> None:
        """Wake ``wait_for_data`` (positions resolved, consumer stopping)."""
        self._data_event.set()

    # -- offset resets and ListOffsets ----------------------------------------------------------

    def _maybe_reset_offsets(self) -> None:
        if self._resetting is not None and not self._resetting.done():
            return
        needing = self._subscription.partitions_needing_reset()
        if not needing:
            return
        wait = self._reset_backoff_until - _now()
        if wait > 0:
            self._wake_after(wait)
            return
        self._resetting = self._loop.create_task(self._reset_offsets(needing), name="kafka-offset-reset")

    async def _reset_offsets(self, partitions: list[TopicPartition]) -> None:
        subscription = self._subscription
        strategies: dict[TopicPartition, str] = {}
        timestamps: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = subscription.get_state(tp)
            if state is None or state.reset_strategy is None:
                continue
            strategy = state.reset_strategy
            if strategy == "none":
                self._errors[tp] = make_no_offset_error([tp])
                subscription.abandon_reset(tp)
                self._data_event.set()
                continue
            strategies[tp] = strategy
            timestamps[tp] = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        if not timestamps:
            return
        try:
            found = await self.list_offsets(timestamps, self._config.request_timeout_ms)
        except asyncio.CancelledError:
            raise
        except KafkaTimeoutError as exc:
            log.debug("offset reset timed out: %r", exc)
            self._reset_backoff_until = _now() + self._config.retry_backoff_ms / 1000
            self.wake()
            return
        except KafkaError as exc:
            if exc.retriable:
                self._reset_backoff_until = _now() + self._config.retry_backoff_ms / 1000
            else:
                for tp in timestamps:
                    self._errors[tp] = exc
                    subscription.abandon_reset(tp)
                self._data_event.set()
            self.wake()
            return
        for tp, answer in found.items():
            state = subscription.get_state(tp)
            if state is None or state.reset_strategy != strategies[tp]:
                continue  # unassigned, sought or reset again meanwhile
            state.reset_strategy = None
            state.position = answer[0] if answer is not None else 0
            state.leader_epoch = -1
            log.debug("reset %s to %s (%s)", tp, state.position, strategies[tp])
        self._data_event.set()
        self.wake()

    async def list_offsets(
        self, timestamps: dict[TopicPartition, int], timeout_ms: float
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """ListOffsets for each partition's timestamp (-2 earliest, -1 latest, or a time in ms).

        Answers ``(offset, timestamp)`` per partition, None where no record is that late. Retries
        leadership errors until ``timeout_ms``, then raises ``KafkaTimeoutError``.
        """
        client = self._client
        deadline = _now() + timeout_ms / 1000
        remaining = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        result: dict[TopicPartition, tuple[int, int] | None] = {}
        for tp in remaining:
            client.add_topic(tp.topic)
        attempt = 0
        last_error: BaseException | None = None
        while remaining:
            by_node: dict[int, dict[TopicPartition, int]] = {}
            unknown = False
            for tp, ts in remaining.items():
                leader = client.cluster.leader_for(tp.topic, tp.partition)
                if leader < 0:
                    topic_error = client.cluster.topic_error(tp.topic)
                    if topic_error is not None and not topic_error.retriable:
                        raise make_error(topic_error.code, f"ListOffsets {tp.topic}-{tp.partition}")
                    unknown = True
                else:
                    by_node.setdefault(leader, {})[tp] = ts
            answers = await asyncio.gather(
                *(self._list_offsets_from(node, parts) for node, parts in by_node.items()),
                return_exceptions=True,
            )
            broker_failed = False
            for answer in answers:
                if isinstance(answer, BaseException):
                    if isinstance(answer, KafkaError) and not answer.retriable:
                        raise answer
                    last_error = answer
                    broker_failed = True
                    continue
                for tp, outcome in answer.items():
                    if isinstance(outcome, KafkaError):
                        if outcome.code in _REFRESH_AND_RETRY:
                            last_error = outcome
                            broker_failed = True
                            continue
                        raise outcome
                    result[tp] = outcome
                    remaining.pop(tp, None)
            if not remaining:
                break
            left = deadline - _now()
            if left <= 0:
                if last_error is None and unknown:
                    topic_errors = {tp.topic: client.cluster.topic_error(tp.topic) for tp in remaining}
                    last_error = next((e for e in topic_errors.values() if e is not None), None)
                raise KafkaTimeoutError(
                    f"ListOffsets for {sorted(remaining)} did not succeed within {timeout_ms} ms"
                    + (f": {last_error}" if last_error else " (no leader known)" if unknown else "")
                )
            # Wait for fresh metadata; the client paces refreshes (its retry backoff grows while
            # a topic stays unready). A broker's error is also backed off here before the retry.
            update = client.request_metadata_update()
            with contextlib.suppress(TimeoutError, KafkaError):
                async with asyncio.timeout(left):
                    await update
            if broker_failed:
                attempt += 1
                left = deadline - _now()
                await asyncio.sleep(min(client.retry_backoff.backoff_ms(attempt - 1) / 1000, max(left, 0)))
        return result

    async def _list_offsets_from(
        self, node_id: int, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | KafkaError | None]:
        conn = await self._client.get_connection(node_id)
        version = conn.version_for(LIST_OFFSETS)
        by_topic: dict[str, list[Any]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append(
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=ts
                )
            )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=self._config.isolation,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=p) for t, p in by_topic.items()],
            timeout_ms=int(self._config.request_timeout_ms),
        )
        response = await conn.request(request, version)
        out: dict[TopicPartition, tuple[int, int] | KafkaError | None] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp not in timestamps:
                    continue
                if p.error_code:
                    out[tp] = make_error(p.error_code, f"ListOffsets {tp.topic}-{tp.partition}")
                elif p.offset < 0:
                    out[tp] = None
                else:
                    out[tp] = (p.offset, p.timestamp)
        for tp in timestamps:
            if tp not in out:
                out[tp] = make_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"ListOffsets {tp} not answered")
        return out


def make_no_offset_error(partitions: list[TopicPartition]) -> KafkaError:
    """What a partition without a position raises under ``auto_offset_reset='none'``."""
    return NoOffsetForPartitionError(
        f"no position for {sorted(partitions)} and auto_offset_reset is 'none'", partitions
    )
