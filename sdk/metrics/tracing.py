"""OpenTelemetry tracing through record headers, as OpenTelemetry's aiokafka and confluent-kafka
instrumentations do (needs the ``otel`` extra)::

    from sdk.metrics.tracing import TracingConsumerInterceptor, TracingProducerInterceptor

    producer = Producer(..., interceptors=[TracingProducerInterceptor()])
    consumer = Consumer(..., interceptors=[TracingConsumerInterceptor()])

The producer side starts a ``"<topic> publish"`` span (kind PRODUCER, child of the caller's current
span) for each record sent and writes its context into the record's headers with the globally
configured propagator (``opentelemetry.propagate``; W3C ``traceparent``/``tracestate`` by
default), so any consumer that reads those headers (Java, librdkafka, this one) continues the
trace. The consumer side starts a ``"<topic> receive"`` span (kind CONSUMER) for each record a poll
returns, a child of the context in its headers and linked to it; ``record_context(record)`` gives
that context to the application for its own processing span::

    with tracer.start_as_current_span("handle order", context=record_context(record)):
        ...

Spans end at once: the publish span covers handing the record to the producer, the receive span
handing it to the application.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import Link, SpanKind, TracerProvider

from sdk.consumer.interceptors import ConsumerInterceptor, PolledRecords
from sdk.producer.interceptors import ProducerInterceptor, ProducerRecord

__all__ = ["TracingConsumerInterceptor", "TracingProducerInterceptor", "record_context"]

_TRACER_NAME = "sdk.metrics.tracing"


class _HeaderSetter(Setter[list[tuple[str, bytes | None]]]):
    def set(self, carrier: list[tuple[str, bytes | None]], key: str, value: str) -> None:
        carrier.append((key, value.encode()))


class _HeaderGetter(Getter[Any]):
    """Reads record headers: a sequence of ``(name, bytes)``; the last of a repeated name wins."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        found = None
        for name, value in carrier or ():
            if name == key and value is not None:
                found = value
        if found is None:
            return None
        return [bytes(found).decode("utf-8", "replace")]

    def keys(self, carrier: Any) -> list[str]:
        return [name for name, _ in carrier or ()]


_SETTER = _HeaderSetter()
_GETTER = _HeaderGetter()


def record_context(record: Any) -> Context:
    """The trace context a producer wrote into ``record``'s headers (empty if none)."""
    return propagate.extract(record.headers, getter=_GETTER)


class TracingProducerInterceptor(ProducerInterceptor):
    """Starts a publish span per record and puts its context in the record's headers (replacing
    trace headers the record already carries, e.g. when a consumed record is forwarded)."""

    def __init__(self, tracer_provider: TracerProvider | None = None):
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.destination.name": record.topic,
            "messaging.operation": "publish",
        }
        if record.partition is not None:
            attributes["messaging.destination.partition.id"] = str(record.partition)
        span = self._tracer.start_span(
            f"{record.topic} publish", kind=SpanKind.PRODUCER, attributes=attributes
        )
        try:
            carrier: list[tuple[str, bytes | None]] = []
            propagate.inject(carrier, context=trace.set_span_in_context(span), setter=_SETTER)
            injected = {name for name, _ in carrier}
            headers = [header for header in record.headers or () if header[0] not in injected]
            return record._replace(headers=headers + carrier)
        finally:
            span.end()


class TracingConsumerInterceptor(ConsumerInterceptor):
    """Starts a receive span per polled record, continuing the trace its headers carry."""

    def __init__(self, tracer_provider: TracerProvider | None = None):
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)

    def on_consume(self, records: PolledRecords) -> PolledRecords:
        tracer = self._tracer
        for tp, polled in records.items():
            name = f"{tp.topic} receive"
            for record in polled:
                parent = record_context(record)
                producer_span = trace.get_current_span(parent).get_span_context()
                links = [Link(producer_span)] if producer_span.is_valid else None
                span = tracer.start_span(
                    name,
                    context=parent,
                    kind=SpanKind.CONSUMER,
                    links=links,
                    attributes={
                        "messaging.system": "kafka",
                        "messaging.destination.name": tp.topic,
                        "messaging.operation": "receive",
                        "messaging.destination.partition.id": str(tp.partition),
                        "messaging.kafka.message.offset": record.offset,
                    },
                )
                span.end()
        return records

    def on_commit(self, offsets: Mapping[Any, Any]) -> None:
        return None
