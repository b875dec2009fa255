"""Consumer interceptors (Java's ``ConsumerInterceptor``): see, and optionally change, the records
a poll returns before the application gets them, and the offsets once they are committed.

Declared like the producer's (``sdk.producer.interceptors``): ``Consumer(interceptors=[...])``,
run in order. As in Kafka's Java client an interceptor that raises is logged and skipped (the
records go on as the previous interceptor left them): interceptors are for cross-cutting concerns
such as tracing or metrics and must not be able to stop consumption.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ConsumerInterceptor", "ConsumerInterceptorChain"]

log = logging.getLogger(__name__)

#: What a poll returns: ``{TopicPartition: [ConsumerRecord, ...]}``.
PolledRecords = dict[Any, list[Any]]


class ConsumerInterceptor:
    """Base class; override what you need. Called on the consumer's event loop thread."""

    def on_consume(self, records: PolledRecords) -> PolledRecords:
        """Before ``getmany``/``getone``/iteration hands ``records`` to the application; return
        the records it gets (possibly changed or filtered). Positions are not affected: records
        dropped here are still consumed."""
        return records

    def on_commit(self, offsets: Mapping[Any, Any]) -> None:
        """After ``offsets`` (``{TopicPartition: OffsetAndMetadata}``) were committed, by the
        application or by auto-commit."""

    def close(self) -> None:
        """When the consumer stops."""


class ConsumerInterceptorChain:
    """Runs interceptors in order, isolating the consumer from their failures."""

    __slots__ = ("_interceptors",)

    def __init__(self, interceptors: Iterable[ConsumerInterceptor]):
        self._interceptors = tuple(interceptors)
        for interceptor in self._interceptors:
            if not callable(getattr(interceptor, "on_consume", None)):
                raise TypeError(f"consumer interceptor {interceptor!r} has no on_consume method")

    def __bool__(self) -> bool:
        return bool(self._interceptors)

    def on_consume(self, records: PolledRecords) -> PolledRecords:
        for interceptor in self._interceptors:
            try:
                changed = interceptor.on_consume(records)
            except Exception:
                log.warning(
                    "consumer interceptor %r failed in on_consume; records passed on unchanged",
                    interceptor,
                    exc_info=True,
                )
                continue
            if changed is not None:
                records = changed
        return records

    def on_commit(self, offsets: Mapping[Any, Any]) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.on_commit(offsets)
            except Exception:
                log.warning("consumer interceptor %r failed in on_commit", interceptor, exc_info=True)

    def close(self) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.close()
            except Exception:
                log.warning("consumer interceptor %r failed in close", interceptor, exc_info=True)
