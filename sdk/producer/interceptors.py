"""Producer interceptors: see (and optionally change) each record before it is sent, and each
acknowledgement after.

As in Kafka's Java client, an interceptor that raises is logged and skipped: interceptors are for
cross-cutting concerns such as tracing or metrics, and must not be able to stop delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sdk.producer.record_metadata import RecordMetadata

__all__ = ["InterceptorChain", "ProducerInterceptor", "ProducerRecord"]

log = logging.getLogger(__name__)


class ProducerRecord(NamedTuple):
    """A record as given to ``send``, before serialization and partitioning."""

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Sequence[tuple[str, bytes | None]] | None = None


class ProducerInterceptor:
    """Base class; override what you need. Called on the producer's event loop thread."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Before serialization and partitioning; return the record to send (possibly changed)."""
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        """Once per record: on success ``error`` is None; on failure ``metadata.offset`` is -1 (and
        ``partition`` is -1 if the record never got one)."""

    def close(self) -> None:
        """When the producer stops."""


class InterceptorChain:
    """Runs interceptors in order, isolating the producer from their failures."""

    __slots__ = ("_interceptors",)

    def __init__(self, interceptors: Iterable[ProducerInterceptor]):
        self._interceptors = tuple(interceptors)

    def __bool__(self) -> bool:
        return bool(self._interceptors)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for interceptor in self._interceptors:
            try:
                changed = interceptor.on_send(record)
            except Exception:
                log.warning(
                    "interceptor %r failed in on_send; record passed on unchanged", interceptor, exc_info=True
                )
                continue
            if changed is not None:
                record = changed
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.on_acknowledgement(metadata, error)
            except Exception:
                log.warning("interceptor %r failed in on_acknowledgement", interceptor, exc_info=True)

    def close(self) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.close()
            except Exception:
                log.warning("interceptor %r failed in close", interceptor, exc_info=True)
