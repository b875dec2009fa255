"""The producer's sending parts (accumulator, transaction manager, sender, transactional
operations) wired as ``Producer.start`` wires them, but on a scripted cluster
(``MockProducerBroker``) and a manual clock (``MockTime``): no broker, no socket, and time moves
only when the test says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk.producer import accumulator as accumulator_module
from sdk.producer.accumulator import RecordAccumulator
from sdk.producer.futures import LazyRecordFuture
from sdk.producer.sender import Sender
from sdk.producer.transaction_manager import TransactionManager
from sdk.producer.transaction_operations import Transactions
from sdk.protocol.messages import InitProducerIdResponse, ProduceRequest
from sdk.records import Compression, RecordBatch
from sdk.testing.mock_producer_broker import MockProducerBroker, SentRequest
from sdk.testing.mock_time import MockTime, settle

PRODUCER_ID = 1000
BACKOFF_MS = 100
DELIVERY_TIMEOUT_MS = 120_000
REQUEST_TIMEOUT_MS = 30_000


class ProducerParts:
    """One producer's parts on ``broker`` and ``time``; ``transactional_id`` makes it
    transactional, otherwise it is idempotent (or neither with ``idempotent=False``)."""

    def __init__(
        self,
        broker: MockProducerBroker,
        time: MockTime,
        *,
        transactional_id: str | None = None,
        idempotent: bool = True,
        acks: int = -1,
        max_in_flight: int = 5,
        delivery_timeout_ms: float = DELIVERY_TIMEOUT_MS,
        max_block_ms: float = 60_000,
    ) -> None:
        self.broker = broker
        self.time = time
        self.txn = TransactionManager(transactional_id) if idempotent or transactional_id else None
        self.accumulator = RecordAccumulator(
            batch_size=16384,
            linger_ms=0,
            compression=Compression.NONE,
            buffer_memory=32 * 1024 * 1024,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff=broker.retry_backoff,
            max_in_flight_per_partition=max_in_flight,
            cluster=broker.cluster,
            max_request_size=1048576,
        )
        self.sender = Sender(
            broker,
            self.accumulator,
            self.txn,
            acks=acks,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            max_request_size=1048576,
            max_in_flight=max_in_flight,
            interceptors=None,
            clock=time,
        )
        self.accumulator.on_ready = self.sender.wake
        self.transactions: Transactions | None = None
        if transactional_id is not None:
            assert self.txn is not None
            self.transactions = Transactions(
                broker, self.txn, self.accumulator, self.sender, max_block_ms=max_block_ms, clock=time
            )
            self.sender.before_drain = self.transactions.poll
        self.sender.start()

    def send(self, topic: str, partition: int, value: bytes = b"v") -> LazyRecordFuture:
        """Append one record (as ``Producer.send`` does once metadata is known)."""
        future = self.accumulator.try_append(topic, partition, None, value, None, None, None)
        assert isinstance(future, LazyRecordFuture), "the record must be appended at once"
        self.sender.wake()
        return future

    async def close(self) -> None:
        self.sender.force_close(RuntimeError("test over"))
        self.broker.disconnect_all()
        await self.sender.close(0)


async def run(time: MockTime, awaitable: Any) -> Any:
    """Run ``awaitable`` as a task, let it go as far as it can without time passing, and return
    the task (the test then answers requests or moves time)."""
    task = asyncio.ensure_future(awaitable)
    await settle()
    return task


def batch_of(sent: SentRequest, topic: str, partition: int) -> RecordBatch:
    """The record batch a Produce request carried for ``topic``-``partition``."""
    request = sent.request
    assert isinstance(request, ProduceRequest)
    for data in request.topic_data:
        if data.name == topic:
            for part in data.partition_data:
                if part.index == partition:
                    assert part.records is not None
                    return RecordBatch(bytes(part.records))
    raise AssertionError(f"no batch for {topic}-{partition} in {request}")


def init_producer_id_response(producer_id: int = PRODUCER_ID, epoch: int = 0, error: int = 0) -> Any:
    return InitProducerIdResponse(error_code=error, producer_id=producer_id, producer_epoch=epoch)


@pytest.fixture
def time(monkeypatch: pytest.MonkeyPatch) -> MockTime:
    """The clock of the sender, the transactional operations and the batches' creation times."""
    clock = MockTime(start=1000.0)
    monkeypatch.setattr(accumulator_module, "now_ms", lambda: clock.now_ms)
    return clock
