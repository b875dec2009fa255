"""Waiting long polls look again only at the partitions an append touched: many fetches waiting
over many partitions cost one partition read each per append, not a read of every partition they
asked for (Kafka's DelayedFetch counts accumulated bytes instead of re-reading)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.testing import InProcessBroker, run_in_process
from sdk.protocol.messages import FetchRequest, MetadataRequest, ProduceRequest
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 40
WAITERS = 20
APPENDS = 10


@pytest.fixture
def runner() -> Iterator[InProcessBroker]:
    with run_in_process(config={"num.partitions": PARTITIONS}) as broker:
        yield broker


def _long_poll(topic: str) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=3000,
        min_bytes=10 << 20,  # never reached: the poll waits its whole time
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                topic_id=uuid.UUID(int=0),
                partitions=[
                    FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                    for p in range(PARTITIONS)
                ],
            )
        ],
    )


def _count_reads(runner: InProcessBroker) -> list[int]:
    """Count the storage's partition reads from now on (the broker's own loop does them)."""
    reads = [0]

    def install() -> None:
        storage = runner.broker.logs
        original = storage.read

        def counted(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return original(*args, **kwargs)

        storage.read = counted

    runner.call(install)
    return reads


def test_waiting_long_polls_reread_only_the_partition_appended_to(runner: InProcessBroker) -> None:
    topic = f"polls-{uuid.uuid4().hex[:8]}"
    with WireClient(runner.bootstrap) as admin:
        admin.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        reads = _count_reads(runner)
        pollers = [WireClient(runner.bootstrap) for _ in range(WAITERS)]
        try:
            for poller in pollers:
                poller.send(_long_poll(topic), 12)
            answered = []

            def collect(poller: WireClient) -> None:
                answered.append(poller.receive(FetchRequest.API_KEY, 12)[1])

            threads = [threading.Thread(target=collect, args=(p,), daemon=True) for p in pollers]
            for thread in threads:
                thread.start()
            for i in range(APPENDS):
                builder = RecordBatchBuilder()
                builder.append(1_700_000_000_000 + i, None, b"v" * 100)
                produce = ProduceRequest(
                    acks=-1,
                    timeout_ms=5000,
                    topic_data=[
                        ProduceRequest.TopicProduceData(
                            name=topic,
                            partition_data=[
                                ProduceRequest.PartitionProduceData(index=0, records=builder.build())
                            ],
                        )
                    ],
                )
                response = admin.request(produce, 9)
                assert response.responses[0].partition_responses[0].error_code == 0
            for thread in threads:
                thread.join(30)
        finally:
            for poller in pollers:
                poller.close()
    assert len(answered) == WAITERS
    for response in answered:  # every poll answers with the data appended
        assert len(response.responses[0].partitions[0].records) > 0
    # Each poll reads every partition when it starts and when it answers; in between, one
    # partition per append. Re-reading all of them at each append is APPENDS times as many.
    assert reads[0] <= WAITERS * (2 * PARTITIONS + 2 * APPENDS), reads[0]
