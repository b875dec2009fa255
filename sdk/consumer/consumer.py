"""The asyncio Consumer (aiokafka's API, the Java client's semantics)."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import ConsumerPartitionAssignor, resolve_assignors
from sdk.consumer.config import AIOKAFKA_IGNORED, ConsumerConfig, warn_ignored
from sdk.consumer.errors import ConsumerStoppedError, NoGroupIdError
from sdk.consumer.fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Fetcher
from sdk.consumer.group_membership import GroupMembership, membership_for
from sdk.consumer.group_observer import GroupObserver
from sdk.consumer.interceptors import ConsumerInterceptor, ConsumerInterceptorChain
from sdk.consumer.listener import is_rebalance_listener
from sdk.consumer.positions import PositionResolver
from sdk.consumer.records import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
)
from sdk.consumer.subscription import SubscriptionState
from sdk.consumer.topic_tracking import TopicTracker
from sdk.errors import ConfigError, IllegalStateError, KafkaError, make_error
from sdk.metrics.consumer import ConsumerMetrics
from sdk.metrics.core import MetricName, Metrics

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

_NEW, _RUNNING, _CLOSED = "new", "running", "closed"


def _resolve_assignors(strategy: Any) -> list[ConsumerPartitionAssignor]:
    """The assignor objects for ``partition_assignment_strategy``; ``ConfigError`` naming the
    option for a name or object that is not an assignor."""
    try:
        return list(resolve_assignors(strategy))
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError("partition_assignment_strategy", str(exc)) from exc


def _as_tp(tp: Any) -> TopicPartition:
    if isinstance(tp, TopicPartition):
        return tp
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise TypeError(f"expected a TopicPartition, not {tp!r}") from None
    return TopicPartition(topic, partition)


class Consumer:
    """Read records from Kafka in asyncio code, aiokafka's ``AIOKafkaConsumer`` API::

        async with Consumer("events", bootstrap_servers="localhost:9092", group_id="app") as consumer:
            async for record in consumer:
                print(record.topic, record.partition, record.offset, record.value)

    Partitions come from a group (``subscribe``, or topics given to the constructor; needs a
    ``group_id``) or are chosen by hand (``assign``). Records are fetched in the background, one
    Fetch in flight per partition leader, and buffered (one response per partition) until
    ``getone``/``getmany``/``async for`` take them. Positions advance as records are handed out;
    ``commit()`` commits them (auto-commit does so every ``auto_commit_interval_ms`` in a group).

    Errors (subclasses of ``sdk.errors.KafkaError``): ``ConfigError`` (constructor, naming the
    option); ``NoBrokersAvailableError`` (``start``); ``ConsumerStoppedError`` (calls after
    ``stop``; ends ``async for``); ``IllegalStateError`` (e.g. ``seek`` on an unassigned partition,
    ``subscribe`` after ``assign``); ``NoGroupIdError`` (``commit``/``committed`` without a group);
    ``NoOffsetForPartitionError``/``OffsetResetOutOfRangeError`` (no valid position and
    ``auto_offset_reset='none'``); ``CorruptRecordInFetchError`` (CRC or format defect; the position
    stays at the bad batch); ``RecordTooLargeForFetchError``; ``CommitFailedError`` (the group
    rebalanced); broker errors such as ``TopicAuthorizationFailedError`` as their own classes.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | list[str] = "localhost:9092",
        client_id: str | None = None,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: float = 5000,
        isolation_level: str = "read_uncommitted",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: float = 500,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        max_poll_records: int | None = None,
        max_poll_interval_ms: float = 300000,
        session_timeout_ms: float = 10000,
        heartbeat_interval_ms: float = 3000,
        rebalance_timeout_ms: float | None = None,
        partition_assignment_strategy: Any = "range",
        check_crcs: bool = True,
        exclude_internal_topics: bool = True,
        allow_auto_create_topics: bool = True,
        consumer_timeout_ms: float = 200,
        client_rack: str | None = None,
        request_timeout_ms: float = 40000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        reconnect_backoff_ms: float = 50,
        reconnect_backoff_max_ms: float = 1000,
        connect_timeout_ms: float = 10000,
        metadata_max_age_ms: float = 300000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: Any = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: Any = None,
        interceptors: Iterable[ConsumerInterceptor] = (),
        **aiokafka_options: Any,
    ) -> None:
        """Settings (aiokafka's names and defaults; times in milliseconds):

        :param topics: topics to subscribe to (as ``subscribe`` before ``start``): the group's
            partitions of them with a ``group_id``, all their partitions without one.
        :param bootstrap_servers: ``"host:port,host:port"`` or a list of them.
        :param client_id: sent with every request (default ``"sdk-consumer"``).
        :param group_id: consumer group; needed by ``subscribe`` and ``commit``. None: no group.
        :param group_instance_id: static membership id (KIP-345); needs ``group_id``.
        :param group_protocol: "classic" (JoinGroup/SyncGroup, assignors in the client) or
            "consumer" (KIP-848, the Java client's ``group.protocol=consumer``: the broker assigns,
            partitions move incrementally; needs Kafka 4.0+ or a broker serving
            ConsumerGroupHeartbeat). With "consumer", ``partition_assignment_strategy``,
            ``session_timeout_ms`` and ``heartbeat_interval_ms`` are the broker's and setting them
            is a ``ConfigError``.
        :param group_remote_assignor: with ``group_protocol="consumer"``: the broker's assignor
            ("uniform" or "range"; None: the broker's default).
        :param key_deserializer: callable applied to each record's key bytes (or None).
        :param value_deserializer: callable applied to each record's value bytes (or None).
        :param auto_offset_reset: where to start without a valid position: 'earliest', 'latest'
            or 'none' (raise ``NoOffsetForPartitionError``/``OffsetResetOutOfRangeError``).
        :param enable_auto_commit: commit positions in the background (group only).
        :param auto_commit_interval_ms: how often auto-commit commits.
        :param isolation_level: 'read_uncommitted', or 'read_committed' to read up to the last
            stable offset and drop records of aborted transactions.
        :param fetch_min_bytes: the broker waits for this much data (or ``fetch_max_wait_ms``).
        :param fetch_max_wait_ms: longest the broker holds a Fetch waiting for data.
        :param fetch_max_bytes: bound of one Fetch response.
        :param max_partition_fetch_bytes: bound of one partition's data in a Fetch response.
        :param max_poll_records: most records one ``getmany`` returns (None: no bound).
        :param max_poll_interval_ms: longest gap between polls before the group drops the member.
        :param session_timeout_ms: the group drops a member not heard from for this long.
        :param heartbeat_interval_ms: how often the member heartbeats (below the session timeout).
        :param rebalance_timeout_ms: how long a rebalance waits for members (default: the session
            timeout, as aiokafka).
        :param partition_assignment_strategy: "range", "roundrobin", "sticky",
            "cooperative-sticky" (comma-separated or a list), assignor objects or classes.
        :param check_crcs: verify each batch's CRC-32C.
        :param exclude_internal_topics: patterns never match internal topics.
        :param allow_auto_create_topics: a Metadata request may create missing topics (broker
            permitting), as the Java consumer's ``allow.auto.create.topics``.
        :param consumer_timeout_ms: accepted for aiokafka compatibility; polls wait on events.
            (``sdk.sync.Consumer``: iterating stops after this long without a record, when given.)
        :param client_rack: this consumer's rack (KIP-392), sent in every Fetch as its rack id;
            fetches go to the partition leader (no follower fetching).
        :param request_timeout_ms: a request unanswered this long fails and closes its connection.
        :param retry_backoff_ms: wait before retrying a failed request (grows to the max).
        :param retry_backoff_max_ms: cap of that wait.
        :param reconnect_backoff_ms: wait before reconnecting to a broker (grows to the max).
        :param reconnect_backoff_max_ms: cap of that wait.
        :param connect_timeout_ms: bound of making one connection.
        :param metadata_max_age_ms: metadata is refreshed at least this often.
        :param security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        :param ssl_context: ``ssl.SSLContext`` for SSL/SASL_SSL.
        :param sasl_mechanism: 'PLAIN' or a ``SaslMechanism``.
        :param sasl_plain_username: PLAIN user name.
        :param sasl_plain_password: PLAIN password.
        :param sasl_oauth_token_provider: OAUTHBEARER's token provider (a ``token()`` coroutine).
        :param interceptors: ``ConsumerInterceptor`` instances (``on_consume`` sees and may change
            what each poll returns, ``on_commit`` sees committed offsets), as the producer's.
        :param aiokafka_options: aiokafka's options without a meaning here (``api_version``,
            ``loop``, ``connections_max_idle_ms``, ``sasl_kerberos_*``),
            accepted with a warning; any other name is a ``ConfigError``.
        """
        for option, value in aiokafka_options.items():
            if option not in AIOKAFKA_IGNORED:
                raise ConfigError(option, "unknown consumer option")
            warn_ignored(option, value)
        self.config = ConsumerConfig(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            group_id=group_id,
            group_instance_id=group_instance_id,
            group_protocol=group_protocol,
            group_remote_assignor=group_remote_assignor,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            auto_offset_reset=auto_offset_reset,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            isolation_level=isolation_level,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_poll_records=max_poll_records,
            max_poll_interval_ms=max_poll_interval_ms,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            partition_assignment_strategy=partition_assignment_strategy,
            check_crcs=check_crcs,
            exclude_internal_topics=exclude_internal_topics,
            allow_auto_create_topics=allow_auto_create_topics,
            consumer_timeout_ms=consumer_timeout_ms,
            client_rack=client_rack,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            reconnect_backoff_ms=reconnect_backoff_ms,
            reconnect_backoff_max_ms=reconnect_backoff_max_ms,
            connect_timeout_ms=connect_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            security_protocol=security_protocol,
            ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism,
            sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password,
            sasl_oauth_token_provider=sasl_oauth_token_provider,
            interceptors=interceptors,
        )
        self.config.validate()
        self._interceptors = (
            ConsumerInterceptorChain(self.config.interceptors) if self.config.interceptors else None
        )
        #: Java's consumer metrics: the fetcher, the group membership and the polls record here.
        self._metrics = ConsumerMetrics(self.config.effective_client_id)
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise ConfigError("topics", f"topic names must be non-empty strings, not {topic!r}")
        self._assignors = _resolve_assignors(partition_assignment_strategy)
        self._state = _NEW
        self._client: KafkaClient | None = None
        self._fetcher: Fetcher | None = None
        #: The group membership (None without a ``group_id``).
        self._coordinator: GroupMembership | None = None
        self._positions: PositionResolver | None = None
        self._subscription = SubscriptionState(self.config.auto_offset_reset)
        if topics:
            self._subscription.subscribe(topics=list(topics))
        self._topics = TopicTracker(
            self._subscription, self.config, lambda: self._running()[0], self._wake_membership
        )
        #: (assignment_version, positions_epoch) when every partition last had a position.
        self._prepared: tuple[int, int] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        #: Epoch seconds of the last poll (0 before one).
        self._last_poll = 0.0

    #: How the "not started" error tells the user to start (the blocking facade says its own).
    _not_started_hint = "call start() or use 'async with'"

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect; then, as aiokafka, join the group when topics were given (to the constructor
        or to ``subscribe`` before ``start``), so ``assignment()`` is the group's once it returns;
        without a ``group_id`` every partition of those topics is assigned. Raises
        ``NoBrokersAvailableError``, and a join's non-retriable error."""
        if self._state != _NEW:
            raise IllegalStateError(f"consumer already {self._state}")
        cfg = self.config
        client = KafkaClient.from_config(cfg, allow_auto_topic_creation=cfg.allow_auto_create_topics)
        await client.start()
        self._client = client
        try:
            self._fetcher = Fetcher(client, self._subscription, cfg, self._metrics)
            self._fetcher.start()
            if cfg.group_id is not None:
                self._coordinator = membership_for(client, self._subscription, cfg, self._assignors)
                self._coordinator.observer = GroupObserver(self._metrics, self._interceptors)
                await self._coordinator.start(join_in_background=True)
            self._positions = PositionResolver(
                self._subscription,
                self._fetcher,
                self._fetch_committed if cfg.group_id is not None else None,
                cfg.request_timeout_ms,
                self._running,
            )
            self._state = _RUNNING
            self._apply_subscription()
            await self._first_assignment()
            await self._first_positions()
        except BaseException:
            await self._close_parts()
            raise

    async def _first_assignment(self) -> None:
        """At ``start``, for a subscription made before it: the group's first assignment (aiokafka
        waits for it too), or every partition of the topics without a group."""
        subscription = self._subscription
        if not subscription.partitions_auto_assigned():
            return
        if subscription.pattern is not None:
            await self._topics.refresh_pattern_topics()
        if self._coordinator is not None:
            await self._coordinator.ensure_active_group()
        else:
            await self._topics.assign_all_partitions(wait_ms=self.config.request_timeout_ms)

    async def _first_positions(self) -> None:
        """At ``start``: look up the assigned partitions' positions (committed offsets, or the
        ``auto_offset_reset`` lookups), so fetching starts before the first poll, as aiokafka's
        fetcher does. A failure here is left to the first poll, which looks again and raises it
        (e.g. ``NoOffsetForPartitionError`` with ``auto_offset_reset='none'``)."""
        if not self._subscription.assigned_partitions():
            return
        try:
            await self._update_fetch_positions()
        except KafkaError as exc:
            log.debug("positions at start: %r (the first poll looks again)", exc)

    async def stop(self) -> None:
        """Leave the group (committing consumed offsets first when auto-commit is on), stop
        fetching, close connections. Safe to call twice; pending polls raise ``ConsumerStoppedError``."""
        if self._state == _CLOSED:
            return
        if self._state == _NEW:
            self._state = _CLOSED
            return
        self._state = _CLOSED
        await self._close_parts()

    close = stop

    async def _close_parts(self) -> None:
        self._state = _CLOSED
        try:
            await self._topics.close()
            if self._background:
                await asyncio.gather(*self._background, return_exceptions=True)
            if self._coordinator is not None:
                try:
                    await self._coordinator.close()
                except KafkaError:
                    pass
        finally:
            if self._fetcher is not None:
                await self._fetcher.close()
            if self._client is not None:
                await self._client.close()
            if self._interceptors is not None:
                self._interceptors.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _running(self) -> tuple[KafkaClient, Fetcher]:
        if self._state != _RUNNING:
            if self._state == _NEW:
                raise IllegalStateError(f"consumer not started: {self._not_started_hint}")
            raise ConsumerStoppedError("consumer is stopped")
        assert self._client is not None and self._fetcher is not None
        return self._client, self._fetcher

    # -- subscription and assignment ------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Read these topics (or the topics matching ``pattern``); replaces an earlier subscription.

        With a ``group_id`` the group assigns partitions: the member joins in the background
        (at ``start`` when called before it, which then waits for the first assignment), and
        ``listener`` is told of each rebalance. Without one, every partition of the topics is
        assigned (new partitions and matching topics too, at the next poll), as in aiokafka.
        ``listener``: any object with ``on_partitions_revoked``/``on_partitions_assigned`` (plain or
        ``async``), usually a ``ConsumerRebalanceListener`` subclass. May be called before ``start``."""
        if self._state == _CLOSED:
            raise ConsumerStoppedError("consumer is stopped")
        if listener is not None and not is_rebalance_listener(listener):
            raise TypeError(
                "listener must have on_partitions_revoked and on_partitions_assigned methods "
                f"(a ConsumerRebalanceListener), not {type(listener).__name__}"
            )
        topics = [topics] if isinstance(topics, str) else list(topics)
        if pattern is not None:
            if topics:
                raise ValueError("subscribe() takes topics or a pattern, not both")
            self._subscription.subscribe(pattern=pattern, listener=listener)
        else:
            if not topics:
                raise ValueError("subscribe() needs topics or a pattern")
            self._subscription.subscribe(topics=topics, listener=listener)
        self._topics.subscription_changed()
        if self._state == _RUNNING:
            self._apply_subscription()

    def _apply_subscription(self) -> None:
        """Track the subscribed or assigned topics' metadata and wake the parts that act on it."""
        client, fetcher = self._running()
        self._topics.apply(client)
        self._wake_membership()
        fetcher.wake()

    def _wake_membership(self) -> None:
        if self._coordinator is not None:
            self._coordinator.wake_join()

    async def _list_topics(self) -> set[str]:
        return await self._topics.list_topics()

    def unsubscribe(self) -> None:
        """Give up the subscription or the manual assignment (and the positions); a group member
        leaves the group (LeaveGroup, sent in the background as aiokafka does)."""
        self._running()
        was_member = self._subscription.partitions_auto_assigned()
        self._subscription.unsubscribe()
        if was_member and self._coordinator is not None:
            leaving = self._coordinator.maybe_leave_group("the consumer unsubscribed")
            task = asyncio.get_running_loop().create_task(leaving)
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group membership). Replaces an earlier assignment.
        May be called before ``start``."""
        if self._state == _CLOSED:
            raise ConsumerStoppedError("consumer is stopped")
        self._subscription.assign_from_user([_as_tp(tp) for tp in partitions])
        if self._state == _RUNNING:
            self._apply_subscription()

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now (by ``assign`` or by the group)."""
        return self._subscription.assigned_partitions()

    def subscription(self) -> set[str]:
        """The subscribed topics (for a pattern: those it matches now)."""
        return set(self._subscription.subscription)

    # -- polling --------------------------------------------------------------------------------

    async def _poll_prepare(self) -> None:
        topics = self._topics
        topics.raise_topic_errors(self._client)
        coordinator = self._coordinator
        if coordinator is None and self._subscription.partitions_auto_assigned():
            if self._subscription.pattern is not None and not topics.pattern_matched:
                await topics.refresh_pattern_topics()
            await topics.assign_all_partitions()
        elif coordinator is not None and self._subscription.partitions_auto_assigned():
            if self._subscription.pattern is not None and not topics.pattern_matched:
                await topics.refresh_pattern_topics()  # join with the matching topics, not none
            await coordinator.ensure_active_group()
            coordinator.record_poll()
        elif coordinator is not None:
            coordinator.record_poll()
        self._last_poll = time.time()
        subscription = self._subscription
        key = (subscription.assignment_version, subscription.positions_epoch)
        if key == self._prepared:
            return  # nothing can have lost its position or its topic's metadata since
        assert self._fetcher is not None
        known = await self._fetcher.ensure_topic_metadata()
        await self._update_fetch_positions()
        if known and not subscription.missing_positions():
            self._prepared = key

    async def _update_fetch_positions(self, only: Iterable[TopicPartition] | None = None) -> None:
        assert self._positions is not None
        await self._positions.update(only)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition: what is buffered now, else what arrives within ``timeout_ms``.

        ``partitions`` limits the result to those (they must be assigned); ``max_records`` (default
        ``max_poll_records``) bounds the total.
        """
        _, fetcher = self._running()
        wanted = [_as_tp(tp) for tp in partitions]
        for tp in wanted:
            if not self._subscription.is_assigned(tp):
                raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        if max_records is None:
            max_records = self.config.max_poll_records
        elif isinstance(max_records, bool) or not isinstance(max_records, int) or max_records <= 0:
            raise ValueError(f"max_records must be a positive integer, not {max_records!r}")
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        self._metrics.record_poll()
        while True:
            await self._poll_prepare()
            records = fetcher.take_records(wanted, max_records)
            if records:
                if self._interceptors is not None:
                    records = self._interceptors.on_consume(records)
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            await fetcher.wait_for_data(min(remaining, self._wait_slice()))
            self._running()

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions`` if given), waiting as long as it takes."""
        _, fetcher = self._running()
        wanted = [_as_tp(tp) for tp in partitions]
        for tp in wanted:
            if not self._subscription.is_assigned(tp):
                raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        self._metrics.record_poll()
        while True:
            await self._poll_prepare()
            record = fetcher.take_one(wanted)
            if record is not None:
                if self._interceptors is None:
                    return record
                tp = TopicPartition(record.topic, record.partition)
                for kept in self._interceptors.on_consume({tp: [record]}).values():
                    if kept:
                        return kept[0]
                continue  # the interceptors dropped it: the next one
            await fetcher.wait_for_data(self._wait_slice())
            self._running()

    def _wait_slice(self) -> float:
        """How long one wait for data may last: in a group at most 200 ms, so a rebalance the
        background heartbeat noticed is joined by the waiting poll without much delay."""
        if self._coordinator is not None and self._subscription.partitions_auto_assigned():
            return min(self.config.heartbeat_interval_ms / 1000, 0.2)
        return self.config.max_poll_interval_ms / 2000

    def metrics(self) -> dict[MetricName, float]:
        """The consumer's metrics now, ``{MetricName: value}`` with Java's names and groups
        (``consumer-fetch-manager-metrics``: ``records-lag`` per partition, ``records-lag-max``,
        ``fetch-rate``, ...; ``consumer-coordinator-metrics``: ``commit-latency-avg``,
        ``rebalance-total``, ...; ``consumer-metrics``: ``last-poll-seconds-ago``), tagged
        ``client-id``. Available before ``start()``."""
        return self._metrics.registry.metrics()

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._metrics.registry

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # -- positions ------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll (records buffered for it are dropped)."""
        _, fetcher = self._running()
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, not {offset!r}")
        tp = _as_tp(partition)
        self._subscription.seek(tp, offset)
        fetcher.discard(tp)

    async def _seek_to(self, partitions: tuple[TopicPartition, ...], strategy: str) -> bool:
        _, fetcher = self._running()
        tps = [_as_tp(tp) for tp in partitions] or sorted(self._subscription.assigned_partitions())
        for tp in tps:
            self._subscription.state(tp)  # raises for an unassigned partition
        for tp in tps:
            self._subscription.request_offset_reset(tp, strategy)
            fetcher.discard(tp)
        await self._wait_for_positions(tps)
        return True

    async def seek_to_beginning(self, *partitions: TopicPartition) -> bool:
        """Move to the first offset still in the log (all assigned partitions if none given)."""
        return await self._seek_to(partitions, "earliest")

    async def seek_to_end(self, *partitions: TopicPartition) -> bool:
        """Move to the end (the high watermark, or the last stable offset with read_committed)."""
        return await self._seek_to(partitions, "latest")

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        """Move to the committed offsets; answers them (None where nothing is committed)."""
        self._running()
        tps = [_as_tp(tp) for tp in partitions] or sorted(self._subscription.assigned_partitions())
        committed = await self._fetch_committed(tps)
        result: dict[TopicPartition, int | None] = {}
        for tp in tps:
            found = committed.get(tp)
            result[tp] = offset = found.offset if found is not None and found.offset >= 0 else None
            if offset is not None:
                self.seek(tp, offset)
        return result

    async def _wait_for_positions(self, tps: list[TopicPartition]) -> None:
        self._running()
        assert self._positions is not None
        await self._positions.wait_for(tps)

    async def position(self, partition: TopicPartition) -> int:
        """Offset of the next record ``getmany`` returns for ``partition`` (looked up if unknown)."""
        self._running()
        tp = _as_tp(partition)
        self._subscription.state(tp)
        await self._wait_for_positions([tp])
        position = self._subscription.position(tp)
        assert position is not None
        return position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as of the last fetch response (None before one)."""
        return self._subscription.state(_as_tp(partition)).highwater

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The last stable offset as of the last fetch response (None before one)."""
        return self._subscription.state(_as_tp(partition)).last_stable_offset

    def last_poll_timestamp(self, partition: TopicPartition) -> int:
        """Milliseconds since the epoch of the last poll (0 before one), comparable with
        ``time.time() * 1000`` as in aiokafka's documentation."""
        self._subscription.state(_as_tp(partition))
        return int(self._last_poll * 1000)

    # -- pause / resume -------------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until ``resume``."""
        _, fetcher = self._running()
        self._subscription.pause(*[_as_tp(tp) for tp in partitions])
        fetcher.wake()

    def resume(self, *partitions: TopicPartition) -> None:
        _, fetcher = self._running()
        self._subscription.resume(*[_as_tp(tp) for tp in partitions])
        fetcher.wake()

    def paused(self) -> set[TopicPartition]:
        return self._subscription.paused()

    # -- offsets --------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Commit ``offsets`` (partition -> offset, ``(offset, metadata)`` or ``OffsetAndMetadata``),
        or the current positions of all assigned partitions. Needs a ``group_id``."""
        self._running()
        if self.config.group_id is None:
            raise NoGroupIdError("commit() needs a group_id")
        if offsets is None:
            to_commit = self._subscription.all_consumed_offsets()
        else:
            to_commit = {}
            for tp, value in offsets.items():
                tp = _as_tp(tp)
                if isinstance(value, OffsetAndMetadata):
                    entry = value
                elif isinstance(value, int) and not isinstance(value, bool):
                    entry = OffsetAndMetadata(value, "")
                elif isinstance(value, tuple) and len(value) == 2:
                    entry = OffsetAndMetadata(int(value[0]), value[1] or "")
                else:
                    raise ValueError(f"bad offset for {tp}: {value!r}")
                if entry.offset < 0:
                    raise ValueError(f"bad offset for {tp}: {entry.offset}")
                if self._subscription.partitions_auto_assigned() and not self._subscription.is_assigned(tp):
                    raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
                to_commit[tp] = entry
        if not to_commit:
            return
        await self._commit_offsets(to_commit)

    async def _commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        assert self._coordinator is not None  # there is one whenever group_id is set
        await self._coordinator.commit_offsets(offsets)

    async def _fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if self.config.group_id is None:
            raise NoGroupIdError("committed offsets need a group_id")
        tps = list(partitions)
        if not tps:
            return {}
        assert self._coordinator is not None  # there is one whenever group_id is set
        return dict(await self._coordinator.fetch_committed_offsets(tps))

    async def committed(self, partition: TopicPartition) -> int | None:
        """The committed offset of ``partition`` for ``group_id`` (None if nothing is committed)."""
        self._running()
        tp = _as_tp(partition)
        found = (await self._fetch_committed([tp])).get(tp)
        return found.offset if found is not None and found.offset >= 0 else None

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (ms), or None."""
        _, fetcher = self._running()
        query = {}
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be an integer >= 0, not {ts!r}")
            query[_as_tp(tp)] = ts
        found = await fetcher.list_offsets(query, self.config.request_timeout_ms)
        result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp in query:
            answer = found.get(tp)
            result[tp] = OffsetAndTimestamp(*answer) if answer is not None else None
        return result

    async def _end_offsets(
        self, partitions: tuple[TopicPartition, ...], timestamp: int
    ) -> dict[TopicPartition, int]:
        _, fetcher = self._running()
        query = {_as_tp(tp): timestamp for tp in partitions}
        found = await fetcher.list_offsets(query, self.config.request_timeout_ms)
        return {tp: (found[tp][0] if found.get(tp) else 0) for tp in query}  # type: ignore[index]  # get() checked it

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset still in each partition's log."""
        return await self._end_offsets(tuple(partitions), EARLIEST_TIMESTAMP)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record (the last stable offset with read_committed)."""
        return await self._end_offsets(tuple(partitions), LATEST_TIMESTAMP)

    # -- metadata -------------------------------------------------------------------------------

    async def topics(self) -> set[str]:
        """Every topic in the cluster (internal ones unless ``exclude_internal_topics``)."""
        return await self._list_topics()

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partition ids of ``topic`` from cached metadata (None while unknown; it is then looked
        up, and looked up again after a backoff for as long as it is not ready, so a topic being
        created is found soon after it exists). Raises the topic's error when it is not retriable
        (INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED)."""
        client, _ = self._running()
        partitions = client.cluster.partitions_for(topic)
        if partitions is None:
            if client.add_topic(topic) is None:
                client.request_metadata_update()
            error = client.cluster.topic_error(topic)
            if error is not None and not error.retriable:
                raise make_error(error.code, f"topic {topic!r}")
            return None
        return set(partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group identity a transactional producer needs (``send_offsets_to_transaction``)."""
        if self.config.group_id is None:
            raise NoGroupIdError("group_metadata() needs a group_id")
        if self._coordinator is None:  # not started
            return ConsumerGroupMetadata(self.config.group_id, -1, "", self.config.group_instance_id)
        return self._coordinator.group_metadata()
