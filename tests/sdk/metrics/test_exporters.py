"""The optional exporters on running clients: a Prometheus scrape, OpenTelemetry metrics, and the
trace context carried in record headers from our producer to confluent-kafka's consumer (a peer
reading the W3C ``traceparent`` header) and to our consumer."""

from __future__ import annotations

import asyncio
import re

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.sdk")

from confluent_kafka import Consumer as PeerConsumer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sdk import AdminClient, Consumer, Producer
from sdk.admin import NewTopic
from sdk.metrics.opentelemetry import instrument_metrics
from sdk.metrics.prometheus import KafkaClientCollector
from sdk.metrics.tracing import TracingConsumerInterceptor, TracingProducerInterceptor, record_context


async def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        errors = await admin.create_topics([NewTopic(name, partitions, 1)])
        assert errors[name] is None
    return name


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_prometheus_scrape_of_a_running_producer_and_admin_client(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    registry = CollectorRegistry()
    async with (
        AdminClient(bootstrap_servers=cluster.bootstrap, client_id="prom-admin") as admin,
        Producer(bootstrap_servers=cluster.bootstrap, client_id="prom-producer") as producer,
    ):
        registry.register(KafkaClientCollector(producer, admin))
        for i in range(20):
            await producer.send(topic, b"v%d" % i)
        await producer.flush()
        await admin.list_topics()
        text = generate_latest(registry).decode()
    scraped = samples(text)
    producer_labels = (("client_id", "prom-producer"),)
    assert scraped[("kafka_producer_metrics_record_send_total", producer_labels)] == 20
    assert scraped[("kafka_producer_metrics_buffer_total_bytes", producer_labels)] == 32 * 1024 * 1024
    assert re.search(r"# TYPE kafka_producer_metrics_record_send(_total)? counter", text)
    assert "# TYPE kafka_producer_metrics_batch_size_avg gauge" in text
    assert (
        "# HELP kafka_producer_metrics_record_send_rate The average per-second number of records sent."
        in text
    )
    assert scraped[("kafka_admin_client_metrics_request_total", (("client_id", "prom-admin"),))] >= 1


async def test_opentelemetry_metrics_read_the_producer(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    async with Producer(bootstrap_servers=cluster.bootstrap, client_id="otel-producer") as producer:
        instrument_metrics(producer, meter=meter)
        for i in range(30):
            await producer.send(topic, b"v%d" % i)
        await producer.flush()
        data = reader.get_metrics_data()
    points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, tuple(sorted(point.attributes.items())))] = point.value
    labels = (("client-id", "otel-producer"),)
    assert points[("producer-metrics.record-send-total", labels)] == 30
    assert points[("producer-metrics.batch-size-max", labels)] > 0


async def test_trace_context_reaches_a_peer_consumer_in_the_traceparent_header(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with Producer(
        bootstrap_servers=cluster.bootstrap, interceptors=[TracingProducerInterceptor(provider)]
    ) as producer:
        with tracer.start_as_current_span("handle request") as parent:
            await producer.send_and_wait(topic, b"traced", headers=[("app", b"1")])
    trace_id = parent.get_span_context().trace_id
    publish = [span for span in exporter.get_finished_spans() if span.name == f"{topic} publish"]
    assert len(publish) == 1 and publish[0].kind == SpanKind.PRODUCER
    assert publish[0].context.trace_id == trace_id
    assert publish[0].parent.span_id == parent.get_span_context().span_id

    headers = await asyncio.to_thread(read_headers_with_confluent_kafka, cluster.bootstrap, topic)
    assert headers[0] == ("app", b"1")
    traceparent = dict(headers)["traceparent"].decode()
    version, header_trace_id, header_span_id, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert int(header_trace_id, 16) == trace_id
    assert int(header_span_id, 16) == publish[0].context.span_id


def read_headers_with_confluent_kafka(bootstrap: str, topic: str) -> list[tuple[str, bytes]]:
    consumer = PeerConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"peer-{topic}", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                return list(message.headers() or [])
        raise AssertionError("confluent-kafka read nothing")
    finally:
        consumer.close()


async def test_trace_goes_from_our_producer_to_our_consumer_through_the_broker(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with Producer(
        bootstrap_servers=cluster.bootstrap, interceptors=[TracingProducerInterceptor(provider)]
    ) as producer:
        with tracer.start_as_current_span("checkout") as parent:
            await producer.send_and_wait(topic, b"order-1")
    async with Consumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        interceptors=[TracingConsumerInterceptor(provider)],
    ) as consumer:
        record = await asyncio.wait_for(consumer.getone(), 30)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    publish, receive = spans[f"{topic} publish"], spans[f"{topic} receive"]
    trace_id = parent.get_span_context().trace_id
    assert publish.context.trace_id == receive.context.trace_id == trace_id
    assert receive.kind == SpanKind.CONSUMER and receive.parent.span_id == publish.context.span_id
    assert [link.context.span_id for link in receive.links] == [publish.context.span_id]
    assert receive.attributes["messaging.kafka.message.offset"] == record.offset == 0
    # The application continues the trace from the record itself.
    with tracer.start_as_current_span("process", context=record_context(record)) as process:
        pass
    assert process.get_span_context().trace_id == trace_id


async def test_consumer_lag_in_a_prometheus_scrape_and_opentelemetry(cluster, topic_name):
    topic = await create_topic(cluster.bootstrap, topic_name)
    async with Producer(bootstrap_servers=cluster.bootstrap) as producer:
        for i in range(7):
            await producer.send(topic, b"v%d" % i, partition=0)
        await producer.flush()
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    registry = CollectorRegistry()
    async with Consumer(
        topic, bootstrap_servers=cluster.bootstrap, client_id="prom-consumer", auto_offset_reset="earliest"
    ) as consumer:
        registry.register(KafkaClientCollector(consumer))
        instrument_metrics(consumer, meter=meter)  # before any partition metric exists
        got = 0
        while got < 3:
            got += sum(len(b) for b in (await consumer.getmany(timeout_ms=200, max_records=3 - got)).values())
        text = generate_latest(registry).decode()
        data = reader.get_metrics_data()
    scraped = samples(text)
    labels = (("client_id", "prom-consumer"), ("partition", "0"), ("topic", topic))
    assert scraped[("kafka_consumer_fetch_manager_metrics_records_lag", labels)] == 4
    assert scraped[("kafka_consumer_fetch_manager_metrics_records_consumed_total", labels[:1])] == 3
    # records-lag-max is the client's (no topic) next to each partition's, in one family.
    assert (
        scraped[
            (
                "kafka_consumer_fetch_manager_metrics_records_lag_max",
                (labels[0], ("partition", ""), ("topic", "")),
            )
        ]
        == 4
    )
    points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, tuple(sorted(point.attributes.items())))] = point.value
    otel_labels = (("client-id", "prom-consumer"), ("partition", "0"), ("topic", topic))
    assert points[("consumer-fetch-manager-metrics.records-lag", otel_labels)] == 4
