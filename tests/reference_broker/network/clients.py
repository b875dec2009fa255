"""Well-behaved clients for the abusive-client tests: round trips counted while something else
happens, and a producer and consumer that must keep working."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer

from sdk.protocol.messages import MetadataRequest
from tests.reference_broker.wire import WireClient


def round_trips_until(client: WireClient, done: threading.Event, deadline_s: float) -> int:
    """Metadata round trips completed on ``client`` until ``done`` is set (or the deadline)."""
    completed = 0
    deadline = time.monotonic() + deadline_s
    while not done.is_set() and time.monotonic() < deadline:
        client.request(MetadataRequest(topics=[]), 12)
        completed += 1
    return completed


def produce_and_consume(bootstrap: str, topic: str, count: int, deadline: float) -> int:
    """Produce ``count`` acknowledged records with confluent-kafka, then read them back from the
    start; returns how many distinct values were read (``count`` when nothing was lost)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    delivered: list[int] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(1)

    for i in range(count):
        producer.produce(topic, value=str(i).encode(), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(max(1.0, deadline - time.monotonic()))
    assert not errors, errors
    assert len(delivered) == count, f"{len(delivered)} of {count} delivered"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
    finally:
        consumer.close()
    return len(seen)
