"""One request in flight per partition (max_in_flight_requests_per_connection=1) with acks=0:
the partition is free again as soon as its request is written, since no answer ever comes."""

from __future__ import annotations

import asyncio

import pytest

from sdk import Producer


@pytest.mark.timeout(60)
async def test_acks_0_with_one_request_in_flight_keeps_sending(kafka, consume, topic_name):
    topic = await kafka.create_topic(topic_name)
    async with Producer(
        bootstrap_servers=kafka.bootstrap, acks=0, max_in_flight_requests_per_connection=1, linger_ms=0
    ) as producer:
        for i in range(5):
            future = await producer.send(topic, b"%d" % i, partition=0)
            await asyncio.wait_for(producer.flush(), 10)
            assert future.done(), f"record {i} was never sent"
    consumed = await consume(kafka.bootstrap, topic, expected=5)
    assert [r.value for r in sorted(consumed, key=lambda r: r.offset)] == [b"%d" % i for i in range(5)]
