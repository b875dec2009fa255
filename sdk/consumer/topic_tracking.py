"""Which topics and partitions a subscription stands for, kept current from the cluster's metadata.

Kafka's Java consumer does this in its ``ConsumerMetadata`` and the coordinator's metadata
listener: a pattern subscription is matched against the cluster's topic listing every
``metadata_max_age_ms`` (and when woken), and a member without a group is assigned every
partition of its topics, again whenever the metadata changed. The group membership is woken when
the matched topics change, so it joins (or heartbeats) with the new subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from sdk.client.client import KafkaClient
from sdk.client.cluster import STALE_METADATA_ERRORS, TopicPartition
from sdk.consumer.config import ConsumerConfig
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import ErrorCode, IllegalStateError, KafkaError, KafkaTimeoutError, make_error
from sdk.protocol.messages import MetadataRequest

__all__ = ["TopicTracker"]

#: Errors of a topic a full listing names that exists but is not usable yet (being created).
_BEING_CREATED = STALE_METADATA_ERRORS - {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


class TopicTracker:
    """The subscription's topics against the cluster (see the module docstring).

    ``running()`` answers the client while the consumer runs and raises (``ConsumerStoppedError``)
    otherwise; ``wake_membership()`` tells the group membership the subscribed topics changed."""

    def __init__(
        self,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        running: Callable[[], KafkaClient],
        wake_membership: Callable[[], None],
    ) -> None:
        self._subscription = subscription
        self._config = config
        self._running = running
        self._wake_membership = wake_membership
        self._pattern_task: asyncio.Task[None] | None = None
        self._pattern_wake: asyncio.Event | None = None
        #: Whether the pattern was matched against a listing since it was set.
        self.pattern_matched = False
        #: Metadata version the no-group assignment (every partition of the topics) was made at.
        self._all_partitions_version = -1
        #: Metadata version whose non-retriable topic errors a poll has raised already.
        self._topic_errors_raised_version = -1

    def subscription_changed(self) -> None:
        """A new subscription: match a pattern afresh, recompute a group-less assignment."""
        self.pattern_matched = False
        self._all_partitions_version = -1

    def apply(self, client: KafkaClient) -> None:
        """Track the subscribed or assigned topics' metadata (start matching a pattern)."""
        subscription = self._subscription
        if subscription.pattern is not None:
            self._start_pattern_matching()
        elif subscription.has_subscription:
            topics = set(subscription.subscription) | {tp.topic for tp in subscription.assigned_partitions()}
            client.set_topics(topics | (client.topics if subscription.user_assigned else set()))

    async def close(self) -> None:
        if self._pattern_task is not None:
            self._pattern_task.cancel()
            await asyncio.gather(self._pattern_task, return_exceptions=True)

    # -- no group: every partition --------------------------------------------------------------

    async def assign_all_partitions(self, wait_ms: float = 0) -> None:
        """Without a group: assign every partition of the subscribed topics (those the metadata
        knows; a topic not known yet is asked for, waiting at most ``wait_ms``)."""
        client = self._running()
        topics = set(self._subscription.subscription)
        missing = {t for t in topics if client.cluster.partitions_for(t) is None}
        if missing:
            client.set_topics(client.topics | topics)
            deadline = time.monotonic() + wait_ms / 1000
            while missing and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError, KafkaError):
                    async with asyncio.timeout(min(deadline - time.monotonic(), 1.0)):
                        await asyncio.shield(client.request_metadata_update())
                missing = {t for t in topics if client.cluster.partitions_for(t) is None}
                if missing:
                    await asyncio.sleep(self._config.retry_backoff_ms / 1000)
        elif self._all_partitions_version == client.cluster.version:
            return
        self._all_partitions_version = client.cluster.version
        wanted = {
            TopicPartition(topic, partition)
            for topic in topics
            for partition in client.cluster.partitions_for(topic) or ()
        }
        if wanted != self._subscription.assigned_partitions():
            self._subscription.assign_from_subscribed(sorted(wanted))

    # -- patterns -------------------------------------------------------------------------------

    def _start_pattern_matching(self) -> None:
        if self._pattern_task is None or self._pattern_task.done():
            self._pattern_wake = asyncio.Event()
            self._pattern_task = asyncio.get_running_loop().create_task(
                self._match_pattern_loop(), name="kafka-consumer-pattern"
            )
        elif self._pattern_wake is not None:
            self._pattern_wake.set()

    async def _match_pattern_loop(self) -> None:
        """Every ``metadata_max_age_ms``: list the cluster's topics and re-match the pattern."""
        assert self._pattern_wake is not None
        while self._subscription.pattern is not None:
            try:
                self._running()
            except IllegalStateError:
                return  # the consumer stopped
            try:
                await self.refresh_pattern_topics()
            except (KafkaError, OSError):
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)
                continue
            self._pattern_wake.clear()
            try:
                async with asyncio.timeout(self._config.metadata_max_age_ms / 1000):
                    await self._pattern_wake.wait()
            except TimeoutError:
                pass

    async def refresh_pattern_topics(self) -> None:
        """List the cluster's topics and match the pattern against them now."""
        names = await self.list_topics()
        subscription = self._subscription
        if subscription.match_pattern(names):
            client = self._running()
            client.set_topics(set(subscription.subscription) | client.topics)
            self._all_partitions_version = -1
            self._wake_membership()
        self.pattern_matched = True

    async def list_topics(self) -> set[str]:
        """The cluster's topic names. A topic the cluster is still creating (listed with
        LEADER_NOT_AVAILABLE) makes the listing be asked again after a backoff, up to
        ``request_timeout_ms``, as the Java consumer's ``listTopics`` does, so a pattern
        subscription or a caller looking for that topic sees it as soon as it is usable."""
        client = self._running()
        config = self._config
        deadline = time.monotonic() + config.request_timeout_ms / 1000
        attempt = 0
        while True:
            response = await client.send_to_any(MetadataRequest(topics=None, allow_auto_topic_creation=False))
            names = set()
            not_ready = []
            for t in response.topics:
                if t.name is None:
                    continue
                if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise make_error(t.error_code, f"topic {t.name!r}")
                if t.error_code in _BEING_CREATED:
                    not_ready.append(t.name)
                    continue
                if t.error_code:
                    continue
                if config.exclude_internal_topics and t.is_internal:
                    continue
                names.add(t.name)
            if not not_ready:
                return names
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"topics {sorted(not_ready)} were still not ready after "
                    f"{config.request_timeout_ms:.0f} ms"
                )
            await asyncio.sleep(min(remaining, client.retry_backoff.backoff_ms(attempt) / 1000))
            attempt += 1
            self._running()

    # -- errors ---------------------------------------------------------------------------------

    def raise_topic_errors(self, client: KafkaClient | None) -> None:
        """Raise a non-retriable metadata error (INVALID_TOPIC_EXCEPTION,
        TOPIC_AUTHORIZATION_FAILED, ...) of a subscribed or assigned topic, once per metadata
        update that reported it, as the Java consumer's poll does. Retriable ones (a topic
        being created) are retried by the client."""
        if client is None or client.cluster.version == self._topic_errors_raised_version:
            return
        cluster = client.cluster
        self._topic_errors_raised_version = cluster.version
        subscription = self._subscription
        topics = set(subscription.subscription) | {tp.topic for tp in subscription.assigned_partitions()}
        for topic in sorted(topics):
            error = cluster.topic_error(topic)
            if error is not None and not error.retriable:
                raise make_error(error.code, f"topic {topic!r}")
