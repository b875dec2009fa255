"""The sender's queue of transactional requests: sent ahead of produce requests, and no produce
request goes out while one is on the wire (Java's ``Sender.maybeSendAndPollTransactionalRequest``).

Runs against the reference broker; the only instrument is a spy on the real connection that
records, in order, what is written and when each answer arrives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Producer
from sdk.errors import ProducerClosedError
from sdk.producer.sender import TransactionalRequest
from sdk.protocol.messages import InitProducerIdRequest, MetadataRequest, ProduceRequest

METADATA, PRODUCE = MetadataRequest.API_KEY, ProduceRequest.API_KEY


def _spy_on(conn: Any, events: list[tuple[str, int]]) -> None:
    real_send = conn.send

    def send(request: Any, version: int | None = None, **kwargs: Any) -> Any:
        events.append(("sent", request.API_KEY))
        future = real_send(request, version, **kwargs)
        if future is not None:
            future.add_done_callback(lambda _f, key=request.API_KEY: events.append(("answered", key)))
        return future

    conn.send = send


async def test_a_queued_transactional_request_goes_before_the_next_produce_request(broker, topic_name):
    async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(topic_name, b"warm-up")  # metadata known, producer id set
        client, sender = producer.client, producer._sender
        (node_id,) = client.cluster.brokers
        events: list[tuple[str, int]] = []
        _spy_on(client.connection(node_id), events)

        answer = sender.enqueue_transactional(
            TransactionalRequest(METADATA, lambda version: MetadataRequest(topics=[]), node=lambda: node_id)
        )
        record = await producer.send(topic_name, b"after the transactional request")
        response = await asyncio.wait_for(answer, 10)
        assert response.brokers and response.brokers[0].node_id == node_id
        assert (await asyncio.wait_for(record, 10)).offset == 1
        # Metadata first, and the produce request only once Metadata was answered.
        assert events.index(("sent", METADATA)) < events.index(("answered", METADATA))
        assert events.index(("answered", METADATA)) < events.index(("sent", PRODUCE))


async def test_init_producer_id_goes_through_the_queue(broker, topic_name):
    producer = Producer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        sender = producer._sender
        seen: list[int] = []
        enqueue = sender.enqueue_transactional

        def recording(request: TransactionalRequest) -> asyncio.Future[Any]:
            seen.append(request.api_key)
            return enqueue(request)

        sender.enqueue_transactional = recording  # type: ignore[method-assign]
        await producer.send_and_wait(topic_name, b"needs a producer id")
        assert seen == [InitProducerIdRequest.API_KEY]
        assert producer.transaction_manager is not None and producer.transaction_manager.producer_id >= 0
    finally:
        await producer.stop()


async def test_requests_still_queued_at_close_fail_with_producer_closed(broker):
    producer = Producer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    sender = producer._sender
    nowhere = TransactionalRequest(METADATA, lambda version: MetadataRequest(topics=[]), node=lambda: 999)
    answer = sender.enqueue_transactional(nowhere)  # broker 999 does not exist: it stays queued
    await asyncio.sleep(0.05)
    assert not answer.done()
    await producer.stop()
    with pytest.raises(ProducerClosedError):
        await answer
