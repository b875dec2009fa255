"""The blocking Consumer: ``sdk.Consumer`` driven from the shared event-loop thread.

Every call hands a coroutine (or a plain call, for the methods that only touch local state) to
the process-wide loop thread (``sdk.sync._loop``) and waits for it, so the asyncio consumer is
only ever touched from that one thread and the facade is safe to call from any thread.
``poll`` is kafka-python's name for ``getmany``; iterating the consumer yields records one at a
time, blocking, until it is closed or, when ``consumer_timeout_ms`` is given, until no record
came for that long (kafka-python's meaning of the option).
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from sdk.client.cluster import TopicPartition
from sdk.consumer.consumer import Consumer as AsyncConsumer
from sdk.consumer.errors import ConsumerStoppedError
from sdk.consumer.records import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
)
from sdk.metrics.core import MetricName, Metrics
from sdk.sync._loop import shared_loop

__all__ = ["Consumer"]

T = TypeVar("T")


class Consumer:
    """Blocking twin of ``sdk.Consumer``: the same settings, the same methods, no ``await``::

        with Consumer("events", bootstrap_servers="localhost:9092", group_id="app") as consumer:
            for record in consumer:
                print(record.offset, record.value)

    The constructor takes exactly ``sdk.Consumer``'s arguments (``help(sdk.Consumer.__init__)``)
    and raises the same ``ConfigError``s; ``start()`` (or ``with``) connects.
    """

    def __init__(self, *topics: str, **config: Any) -> None:
        self._consumer = AsyncConsumer(*topics, **config)
        self._consumer._not_started_hint = "call start() or use 'with'"
        self.config = self._consumer.config
        #: Iteration ends after this long without a record (None: never), as kafka-python's.
        self._iteration_timeout_ms: float | None = config.get("consumer_timeout_ms")
        self._runner = shared_loop()
        self._buffer: deque[ConsumerRecord] = deque()

    __init__.__signature__ = inspect.signature(AsyncConsumer.__init__)  # type: ignore[attr-defined]  # for help()

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._runner.run(coro, timeout)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a plain method of the async consumer on the loop thread."""

        async def call() -> T:
            return fn(*args)

        return self._run(call())

    def metrics(self) -> dict[MetricName, float]:
        """See ``sdk.Consumer.metrics`` (read on the loop thread)."""
        return self._call(self._consumer.metrics)

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind ``metrics()`` (for exporters: ``sdk.metrics.opentelemetry``)."""
        return self._consumer.metrics_registry

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._run(self._consumer.start())

    def close(self) -> None:
        """Leave the group (committing first with auto-commit), stop fetching, disconnect."""
        self._run(self._consumer.stop())

    stop = close

    def __enter__(self) -> Consumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- subscription ---------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), pattern: Any = None, listener: Any = None) -> None:
        """Join the group for these topics or this pattern (see ``sdk.Consumer.subscribe``).

        A listener's callbacks run on the loop thread; they may be plain or ``async`` functions
        but must not call this facade's blocking methods.
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        self._call(self._consumer.subscribe, names, pattern, listener)

    def unsubscribe(self) -> None:
        self._call(self._consumer.unsubscribe)
        self._buffer.clear()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._consumer.assign, list(partitions))
        self._buffer.clear()

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._consumer.assignment)

    def subscription(self) -> set[str]:
        return self._call(self._consumer.subscription)

    # -- polling --------------------------------------------------------------------------------

    def getmany(
        self, *partitions: TopicPartition, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, waiting up to ``timeout_ms`` for some."""
        return self._run(self._consumer.getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records))

    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """kafka-python's name for ``getmany``."""
        return self.getmany(timeout_ms=timeout_ms, max_records=max_records)

    def getone(self, *partitions: TopicPartition, timeout_ms: float | None = None) -> ConsumerRecord | None:
        """The next record, waiting at most ``timeout_ms`` (forever if None); None on timeout."""
        if timeout_ms is None:
            return self._run(self._consumer.getone(*partitions))
        batch = self.getmany(*partitions, timeout_ms=timeout_ms, max_records=1)
        for records in batch.values():
            return records[0]
        return None

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, blocking for more, until the consumer is closed, or (when the
        constructor was given ``consumer_timeout_ms``) until no record came for that long."""
        buffer = self._buffer
        limit_ms = self._iteration_timeout_ms
        idle_since = time.monotonic()
        while True:
            while buffer:
                yield buffer.popleft()
                idle_since = time.monotonic()
            wait_ms = self.config.consumer_timeout_ms * 5
            if limit_ms is not None:
                wait_ms = limit_ms - (time.monotonic() - idle_since) * 1000
                if wait_ms <= 0:
                    return
            try:
                batch = self.getmany(timeout_ms=wait_ms)
            except ConsumerStoppedError:
                return
            for records in batch.values():
                buffer.extend(records)

    # -- positions ------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._call(self._consumer.seek, partition, offset)
        self._drop_buffered(partition)

    def _drop_buffered(self, *partitions: TopicPartition) -> None:
        if not partitions:
            self._buffer.clear()
            return
        wanted = {TopicPartition(*tp) for tp in partitions}
        self._buffer = deque(r for r in self._buffer if TopicPartition(r.topic, r.partition) not in wanted)

    def seek_to_beginning(self, *partitions: TopicPartition) -> bool:
        self._drop_buffered(*partitions)
        return self._run(self._consumer.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> bool:
        self._drop_buffered(*partitions)
        return self._run(self._consumer.seek_to_end(*partitions))

    def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        self._drop_buffered(*partitions)
        return self._run(self._consumer.seek_to_committed(*partitions))

    def position(self, partition: TopicPartition) -> int:
        return self._run(self._consumer.position(partition))

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._call(self._consumer.highwater, partition)

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        return self._call(self._consumer.last_stable_offset, partition)

    def pause(self, *partitions: TopicPartition) -> None:
        self._call(self._consumer.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._call(self._consumer.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._call(self._consumer.paused)

    # -- offsets and metadata -------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Commit ``offsets``, or what was consumed: with records still buffered by the iterator,
        a partition's commit point is its first record not yet yielded, not its fetch position."""
        if offsets is None and self._buffer:
            offsets = dict(self._call(self._consumer._subscription.all_consumed_offsets))
            for record in reversed(self._buffer):
                tp = TopicPartition(record.topic, record.partition)
                if tp in offsets:
                    offsets[tp] = OffsetAndMetadata(record.offset, "")
        self._run(self._consumer.commit(offsets))

    def committed(self, partition: TopicPartition) -> int | None:
        return self._run(self._consumer.committed(partition))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._run(self._consumer.offsets_for_times(timestamps))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._consumer.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._consumer.end_offsets(list(partitions)))

    def topics(self) -> set[str]:
        return self._run(self._consumer.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._call(self._consumer.partitions_for_topic, topic)

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._call(self._consumer.group_metadata)
