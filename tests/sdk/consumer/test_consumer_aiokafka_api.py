"""The consumer behaves as aiokafka's where code written for aiokafka relies on it: calls before
``start()``, topics without a group, the group joined by ``start()`` and in the background,
duck-typed listeners, aiokafka's option and class names, and the blocking facade's iteration.
Against the reference broker (``group_broker``, 3 partitions per auto-created topic)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk import Consumer, Producer, TopicPartition, sync
from sdk import consumer as consumer_package
from sdk.errors import IllegalStateError

pytestmark = pytest.mark.timeout(120)
PARTITIONS = 3


@pytest.fixture(scope="module")
def group_broker_partitions() -> int:
    return PARTITIONS


@pytest.fixture
def bootstrap(group_broker: BrokerProcess) -> str:
    return group_broker.bootstrap


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def seeded(bootstrap: str, per_partition: int = 1) -> str:
    """A topic with ``per_partition`` records in each partition."""
    topic = unique("t")
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for p in range(PARTITIONS):
            for i in range(per_partition):
                await producer.send_and_wait(topic, b"%d-%d" % (p, i), partition=p)
    return topic


def every_partition(topic: str) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(PARTITIONS)}


async def test_subscribe_before_start_is_joined_by_start(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=unique("g"), auto_offset_reset="earliest")
    consumer.subscribe([topic])
    await consumer.start()
    try:
        assert consumer.assignment() == every_partition(topic)  # no poll needed
        batch = await consumer.getmany(timeout_ms=5000)  # the first poll returns records
        assert sum(len(records) for records in batch.values()) >= 1
    finally:
        await consumer.stop()


async def test_constructor_topics_with_a_group_are_joined_by_start(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=unique("g")) as consumer:
        assert consumer.assignment() == every_partition(topic)


async def test_pattern_subscription_before_start(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=unique("g"))
    consumer.subscribe(pattern=f"^{topic}$")
    async with consumer:
        assert consumer.assignment() == every_partition(topic)


async def test_assign_before_start(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 1)])
    async with consumer:
        record = await consumer.getone()
        assert (record.partition, record.value) == (1, b"1-0")


async def test_topics_without_a_group_are_read_from_every_partition(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    async with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        assert consumer.assignment() == every_partition(topic)
        values: set[bytes] = set()
        deadline = time.monotonic() + 20
        while len(values) < PARTITIONS and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.update(r.value for r in records)
        assert values == {b"%d-0" % p for p in range(PARTITIONS)}


async def test_subscribe_after_start_joins_in_the_background(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    async with Consumer(bootstrap_servers=bootstrap, group_id=unique("g")) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while consumer.assignment() != every_partition(topic):  # no poll: the join task joins
            assert time.monotonic() < deadline, "not joined without a poll"
            await asyncio.sleep(0.05)


async def test_seek_to_beginning_of_one_partition_ignores_the_others_positions(bootstrap: str) -> None:
    """auto_offset_reset='none' and nothing committed: seeking one partition must not fail on
    the others, which have no position yet (aiokafka's local-state example does this)."""
    topic = await seeded(bootstrap, per_partition=2)
    async with Consumer(bootstrap_servers=bootstrap, group_id=unique("g"), auto_offset_reset="none",
                        enable_auto_commit=False) as consumer:
        consumer.assign(every_partition(topic))
        tp = TopicPartition(topic, 0)
        assert await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0


async def test_last_poll_timestamp_is_epoch_milliseconds(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.getmany(timeout_ms=100)
        stamp = consumer.last_poll_timestamp(TopicPartition(topic, 0))
        assert abs(time.time() * 1000 - stamp) < 60_000, stamp


class DuckListener:
    """Not a ConsumerRebalanceListener subclass: aiokafka-style code may pass such an object."""

    def __init__(self) -> None:
        self.assigned: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned.append(set(assigned))


async def test_a_duck_typed_listener_is_accepted_and_called(bootstrap: str) -> None:
    topic = await seeded(bootstrap)
    listener = DuckListener()
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=unique("g"))
    consumer.subscribe([topic], listener=listener)
    async with consumer:
        assert listener.assigned == [every_partition(topic)]
    with pytest.raises(TypeError, match="on_partitions_revoked"):
        Consumer(bootstrap_servers=bootstrap, group_id="g").subscribe([topic], listener=object())


@pytest.mark.parametrize(
    "assignor_name", ["RangePartitionAssignor", "RoundRobinPartitionAssignor", "StickyPartitionAssignor"]
)
async def test_aiokafka_assignor_classes_and_client_rack_are_accepted(
    bootstrap: str, assignor_name: str
) -> None:
    assignor = getattr(consumer_package, assignor_name)
    topic = await seeded(bootstrap)
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=unique("g"), client_rack="rack-a",
                        partition_assignment_strategy=(assignor,), auto_offset_reset="earliest") as consumer:
        assert consumer.assignment() == every_partition(topic)
        assert await consumer.getone()


# -- the blocking facade ----------------------------------------------------------------------------


@pytest.fixture
def sync_consumer(bootstrap: str) -> Iterator[sync.Consumer]:
    consumer = sync.Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1000
    )
    try:
        yield consumer
    finally:
        consumer.close()


def test_sync_iteration_ends_after_consumer_timeout_ms_without_records(
    bootstrap: str, sync_consumer: sync.Consumer
) -> None:
    topic = asyncio.run(seeded(bootstrap))
    sync_consumer.start()
    sync_consumer.assign(every_partition(topic))
    values = [record.value for record in sync_consumer]  # ends once idle for a second
    assert sorted(values) == sorted(b"%d-0" % p for p in range(PARTITIONS))


def test_sync_not_started_error_says_with(bootstrap: str) -> None:
    consumer = sync.Consumer(bootstrap_servers=bootstrap)
    with pytest.raises(IllegalStateError) as raised:
        consumer.getmany()
    assert "'with'" in str(raised.value) and "async with" not in str(raised.value)
