"""The sender's retries, sequence handling and expiry, driven by a scripted cluster and a manual
clock (Java's SenderTest with MockClient and MockTime).

No broker and no socket: ``MockProducerBroker`` answers each request from the test's script,
``MockTime`` moves only when the test ticks it. Each test checks what Java's ``Sender`` and
``TransactionManager`` do in the same case (the idempotent producer; the transactional one is
in test_transactions_unit.py).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from sdk.errors import (
    DeliveryTimeoutError,
    ErrorCode,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
)
from sdk.protocol.messages import InitProducerIdRequest, ProduceRequest
from sdk.testing.mock_producer_broker import MockProducerBroker, produce_response
from sdk.testing.mock_time import MockTime, settle
from tests.sdk.producer.sender_harness import (
    BACKOFF_MS,
    DELIVERY_TIMEOUT_MS,
    PRODUCER_ID,
    ProducerParts,
    batch_of,
    init_producer_id_response,
    time,
)

__all__ = ["time"]

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "t"


@pytest.fixture
def broker() -> MockProducerBroker:
    return MockProducerBroker(topics={TOPIC: 2}, retry_backoff_ms=BACKOFF_MS)


@pytest.fixture
async def producer(broker: MockProducerBroker, time: MockTime) -> AsyncIterator[ProducerParts]:
    parts = ProducerParts(broker, time)
    broker.prepare_response(init_producer_id_response(), match={"producer_id": -1})
    await settle()
    assert parts.txn is not None and parts.txn.producer_id == PRODUCER_ID
    yield parts
    await parts.close()
    broker.verify()


def produce_sent(broker: MockProducerBroker) -> int:
    return len(broker.sent(ProduceRequest))


async def test_a_retriable_error_is_retried_after_the_backoff_with_the_same_sequence(broker, producer, time):
    record = producer.send(TOPIC, 0)
    await settle()
    assert produce_sent(broker) == 1
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    await settle()
    assert broker.metadata_requests >= 1  # the leader moved: metadata is asked for
    await time.tick(BACKOFF_MS - 1)
    assert produce_sent(broker) == 1  # still backing off
    await time.tick(1)
    assert produce_sent(broker) == 2
    first, retry = (batch_of(s, TOPIC, 0) for s in broker.sent(ProduceRequest))
    assert (retry.producer_id, retry.producer_epoch, retry.base_sequence) == (PRODUCER_ID, 0, 0)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (PRODUCER_ID, 0, 0)
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=42))
    await settle()
    assert (await record).offset == 42


async def test_the_backoff_grows_with_each_attempt(broker, producer, time):
    producer.send(TOPIC, 0)
    await settle()
    sent_at = [time.monotonic()]
    for _ in range(3):
        broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
        while produce_sent(broker) < len(sent_at) + 1:
            await time.tick(1)
        sent_at.append(time.monotonic())
    gaps_ms = [round((b - a) * 1000) for a, b in itertools.pairwise(sent_at)]
    # Doubling from retry_backoff_ms (no jitter in the fake), never earlier.
    for gap, backoff in zip(gaps_ms, [BACKOFF_MS, 2 * BACKOFF_MS, 4 * BACKOFF_MS], strict=True):
        assert backoff <= gap <= backoff + 1


async def test_a_lost_connection_retries_the_batch(broker, producer, time):
    record = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_disconnect(ProduceRequest)
    await settle()
    assert not record.done()
    await time.tick(BACKOFF_MS)
    assert produce_sent(broker) == 2
    assert batch_of(broker.sent(ProduceRequest)[1], TOPIC, 0).base_sequence == 0
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=7))
    await settle()
    assert (await record).offset == 7


async def test_a_non_retriable_error_fails_the_batch_at_once(broker, producer, time):
    record = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    await settle()
    with pytest.raises(TopicAuthorizationFailedError):
        await record
    await time.tick(10 * BACKOFF_MS)
    assert produce_sent(broker) == 1


async def test_sequences_continue_across_batches_of_a_partition(broker, producer, time):
    first = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=0))
    await settle()
    await first
    second = producer.send(TOPIC, 0)
    await settle()
    assert batch_of(broker.sent(ProduceRequest)[1], TOPIC, 0).base_sequence == 1
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=1))
    await settle()
    assert (await second).offset == 1


@pytest.mark.parametrize("code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID])
async def test_a_sequence_gap_bumps_the_epoch_and_retries_from_sequence_zero(broker, producer, time, code):
    """KIP-360: the idempotent producer bumps its epoch (InitProducerId with its current id and
    epoch) and sends the batch again, renumbered from 0 in the new epoch."""
    first = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=0))
    await settle()
    await first
    record = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(produce_response(TOPIC, 0, error=code))
    await settle()
    bump = broker.sent(InitProducerIdRequest)
    assert len(bump) == 2 and (bump[1].request.producer_id, bump[1].request.producer_epoch) == (
        PRODUCER_ID,
        0,
    )
    broker.prepare_response(init_producer_id_response(epoch=1))
    await time.tick(BACKOFF_MS)
    assert produce_sent(broker) == 3
    retry = batch_of(broker.sent(ProduceRequest)[2], TOPIC, 0)
    assert (retry.producer_id, retry.producer_epoch, retry.base_sequence) == (PRODUCER_ID, 1, 0)
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=1))
    await settle()
    assert (await record).offset == 1
    assert producer.txn is not None and producer.txn.epoch_bumps == 1


async def test_a_later_batch_refused_out_of_order_behind_a_retried_one_is_retried_after_it(
    broker, producer, time
):
    """Two batches in flight; the first fails retriably and the second gets OUT_OF_ORDER_SEQUENCE
    (the broker never saw the first): no epoch bump, both are sent again in order, the second
    only once the first is acknowledged (Java's SenderTest.testResetWhenOutOfOrderSequence...
    family: the out-of-order batch is not next in line, so it is retried)."""
    warm_up = producer.send(TOPIC, 0)
    await settle()
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=0))
    await settle()
    await warm_up
    first = producer.send(TOPIC, 0)
    await settle()
    second = producer.send(TOPIC, 0)
    await settle()
    assert [batch_of(s, TOPIC, 0).base_sequence for s in broker.sent(ProduceRequest)[1:]] == [1, 2]
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    await settle()
    await time.tick(BACKOFF_MS)
    assert len(broker.sent(InitProducerIdRequest)) == 1  # no bump
    # Only the oldest unacknowledged batch goes while a retry is pending.
    assert [batch_of(s, TOPIC, 0).base_sequence for s in broker.sent(ProduceRequest)[3:]] == [1]
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=1))
    await time.tick(BACKOFF_MS)
    assert [batch_of(s, TOPIC, 0).base_sequence for s in broker.sent(ProduceRequest)[4:]] == [2]
    broker.prepare_response(produce_response(TOPIC, 0, base_offset=2))
    await settle()
    assert (await first).offset == 1 and (await second).offset == 2


async def test_a_batch_never_sent_expires_after_the_delivery_timeout(broker, producer, time):
    broker.set_down(0)
    record = producer.send(TOPIC, 0)
    await time.tick(DELIVERY_TIMEOUT_MS - 1)
    assert not record.done()
    await time.tick(1)
    with pytest.raises(DeliveryTimeoutError):
        await record
    assert produce_sent(broker) == 0


async def test_a_retriable_error_after_the_delivery_timeout_fails_with_it_as_cause(broker, producer, time):
    record = producer.send(TOPIC, 0)
    await settle()
    await time.tick(DELIVERY_TIMEOUT_MS)  # the answer comes late
    broker.prepare_response(produce_response(TOPIC, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    await settle()
    with pytest.raises(DeliveryTimeoutError) as caught:
        await record
    assert isinstance(caught.value.__cause__, NotLeaderOrFollowerError)
    assert produce_sent(broker) == 1


async def test_init_producer_id_is_retried_after_a_retriable_error(broker, time):
    parts = ProducerParts(broker, time)
    try:
        broker.prepare_response(init_producer_id_response(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        await settle()
        assert parts.txn is not None and parts.txn.producer_id == -1
        record = parts.send(TOPIC, 1)
        await time.tick(BACKOFF_MS)
        assert len(broker.sent(InitProducerIdRequest)) == 2
        broker.prepare_response(init_producer_id_response(producer_id=5))
        await settle()
        assert batch_of(broker.sent(ProduceRequest)[0], TOPIC, 1).producer_id == 5
        broker.prepare_response(produce_response(TOPIC, 1, base_offset=3))
        await settle()
        assert (await record).offset == 3
    finally:
        await parts.close()
