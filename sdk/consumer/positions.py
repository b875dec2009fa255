"""Where each assigned partition is read from: the committed offset, else a reset.

Kafka's Java consumer does this in ``OffsetFetcherUtils``/``updateFetchPositions``: an assigned
partition without a position takes the group's committed offset (with its leader epoch), and
without one the ``auto_offset_reset`` lookup (ListOffsets, done by the fetcher); with
``auto_offset_reset='none'`` it is an error naming the partitions.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from sdk.client.cluster import TopicPartition
from sdk.consumer.errors import NoOffsetForPartitionError
from sdk.consumer.fetcher import Fetcher
from sdk.consumer.records import OffsetAndMetadata
from sdk.consumer.subscription import SubscriptionState
from sdk.errors import KafkaTimeoutError

__all__ = ["FetchCommitted", "PositionResolver"]

FetchCommitted = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, OffsetAndMetadata | None]]]


class PositionResolver:
    """Positions for the assigned partitions of ``subscription``. ``fetch_committed`` is the
    group's committed offsets (None without a group); ``check_running`` raises once the consumer
    stopped."""

    def __init__(
        self,
        subscription: SubscriptionState,
        fetcher: Fetcher,
        fetch_committed: FetchCommitted | None,
        request_timeout_ms: float,
        check_running: Callable[[], object],
    ) -> None:
        self._subscription = subscription
        self._fetcher = fetcher
        self._fetch_committed = fetch_committed
        self._request_timeout_ms = request_timeout_ms
        self._check_running = check_running

    async def update(self, only: Iterable[TopicPartition] | None = None) -> None:
        """Give every assigned partition without a position (of ``only``, when given) one: its
        committed offset (in a group), else a reset per ``auto_offset_reset`` (done by the
        fetcher with ListOffsets)."""
        subscription = self._subscription
        missing = subscription.missing_positions()
        if only is not None:
            wanted = set(only)
            missing = [tp for tp in missing if tp in wanted]
        if not missing:
            return
        committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
        if self._fetch_committed is not None:
            committed = await self._fetch_committed(missing)
        no_offset = []
        for tp in missing:
            state = subscription.get_state(tp)
            if state is None or state.position is not None or state.reset_strategy is not None:
                continue
            found = committed.get(tp)
            if found is not None and found.offset >= 0:
                subscription.seek(tp, found.offset, found.leader_epoch)
            elif subscription.default_reset == "none":
                no_offset.append(tp)
            else:
                subscription.request_offset_reset(tp)
        self._fetcher.wake()
        if no_offset:
            raise NoOffsetForPartitionError(
                f"no committed offset for {sorted(no_offset)} and auto_offset_reset is 'none'", no_offset
            )

    async def wait_for(self, tps: list[TopicPartition]) -> None:
        """Until every one of ``tps`` still assigned has a position; ``KafkaTimeoutError`` after
        ``request_timeout_ms``."""
        deadline = time.monotonic() + self._request_timeout_ms / 1000
        while True:
            await self.update(only=tps)
            subscription = self._subscription
            pending = [tp for tp in tps if subscription.is_assigned(tp) and subscription.position(tp) is None]
            if not pending:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"no position for {pending} within {self._request_timeout_ms} ms")
            await self._fetcher.wait_for_data(min(remaining, 0.1))
            self._check_running()
