"""``Consumer.group_metadata()``: the identity a transactional producer sends its offsets with.

As Kafka's Java consumer (KIP-447), it is ``(group, -1, "", instance id)`` until the first join
completes and then the generation and member id of the last completed join, kept when the member
loses its membership (``max_poll_interval_ms`` expired, evicted by the coordinator, left by
``unsubscribe``) until the next join completes. With the reset generation -1 and no member id, a
dropped member's transactional offsets would be accepted by the coordinator; with the kept ones
they are refused, which the sync facade test shows end to end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk import Producer, sync
from sdk.client.cluster import TopicPartition
from sdk.consumer import Consumer, ConsumerGroupMetadata
from sdk.errors import CommitFailedError, TransactionAbortableError

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 2
BROKER_CONFIG = {
    "num.partitions": PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}
SETTINGS: dict[str, Any] = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 2000,
    "heartbeat_interval_ms": 200,
    "max_poll_interval_ms": 1500,
    "fetch_max_wait_ms": 50,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def group_broker(broker_factory: Any) -> BrokerProcess:
    broker: BrokerProcess = broker_factory(BROKER_CONFIG)
    return broker


async def seeded_topic(bootstrap: str) -> str:
    topic = unique("meta")
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for partition in range(PARTITIONS):
            await producer.send(topic, b"x", partition=partition)
    return topic


async def poll_until(consumers: Sequence[Consumer], condition: Callable[[], bool], what: str,
                     timeout: float = 30) -> None:
    """Poll ``consumers`` (only them: the others may be left without polls) until ``condition``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        for consumer in consumers:
            await consumer.getmany(timeout_ms=50)


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


def membership_lost(consumer: Consumer) -> bool:
    """The member itself has noticed it is no longer in the group (its generation is reset)."""
    coordinator = consumer._coordinator
    return coordinator is not None and coordinator.generation < 0


@pytest.mark.parametrize("instance_id", [None, "static-1"])
async def test_before_the_first_join_it_names_no_generation_and_no_member(
    group_broker: BrokerProcess, instance_id: str | None
) -> None:
    topic = await seeded_topic(group_broker.bootstrap)
    group = unique("group")
    consumer = Consumer(bootstrap_servers=group_broker.bootstrap, group_id=group,
                        group_instance_id=instance_id, **SETTINGS)
    before_join = ConsumerGroupMetadata(group, -1, "", instance_id)
    assert consumer.group_metadata() == before_join
    await consumer.start()  # nothing subscribed: no join
    try:
        assert consumer.group_metadata() == before_join
        consumer.subscribe([topic])
        await poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS, "assigned")
        joined = consumer.group_metadata()
        assert joined.group_id == group and joined.group_instance_id == instance_id
        assert joined.generation_id >= 1 and joined.member_id
    finally:
        await consumer.stop()


@pytest.mark.parametrize(
    "how, instance_id, extra",
    [
        pytest.param("poll-timeout", None, {}, id="dynamic-max-poll-interval"),
        pytest.param("poll-timeout", "static-1", {}, id="static-max-poll-interval"),
        # Polls are allowed for a minute but the rebalance waits only 1.5 s for this member, whose
        # rebalance listener is stuck in on_partitions_revoked: the coordinator drops it.
        pytest.param("evicted", None, {"max_poll_interval_ms": 60000, "rebalance_timeout_ms": 1500},
                     id="dynamic-evicted-by-coordinator"),
    ],
)
async def test_a_member_that_lost_its_membership_keeps_the_last_joins_identity(
    group_broker: BrokerProcess, how: str, instance_id: str | None, extra: dict[str, Any]
) -> None:
    bootstrap = group_broker.bootstrap
    topic = await seeded_topic(bootstrap)
    group = unique("group")
    release = asyncio.Event()

    class StuckOnRevoke:
        async def on_partitions_revoked(self, revoked: object) -> None:
            await release.wait()

        def on_partitions_assigned(self, assigned: object) -> None:
            pass

    slow = Consumer(bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance_id,
                    **{**SETTINGS, **extra})
    slow.subscribe([topic], listener=StuckOnRevoke() if how == "evicted" else None)
    other = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **SETTINGS)
    await slow.start()
    await other.start()
    try:
        await poll_until([slow], lambda: len(slow.assignment()) == PARTITIONS, "the first member assigned")
        joined = slow.group_metadata()
        # Only the other member polls now: the group moves every partition to it.
        await poll_until([other], lambda: len(other.assignment()) == PARTITIONS, "the other member owns all")
        if how == "evicted":
            assert slow.group_metadata() == joined  # its rejoin never completed
            release.set()
        else:
            await wait_until(lambda: membership_lost(slow), "the slow member notices it was dropped")
        # The identity of its last completed join (the background join task may have rejoined
        # once when the other member came, so a later generation than the first one).
        lost = slow.group_metadata()
        assert lost.generation_id >= joined.generation_id >= 1
        assert lost.member_id == joined.member_id and lost.group_instance_id == instance_id
        # Its next poll rejoins: a completed join replaces the identity.
        await poll_until(
            [slow, other],
            lambda: slow.group_metadata() != lost and bool(slow.assignment()) and bool(other.assignment()),
            "the slow member rejoined and both are assigned",
        )
        rejoined = slow.group_metadata()
        assert rejoined.generation_id > lost.generation_id
        assert rejoined.group_instance_id == instance_id
        if instance_id is None:
            assert rejoined.member_id and rejoined.member_id != joined.member_id
    finally:
        release.set()
        await other.stop()
        await slow.stop()


async def test_unsubscribe_leaves_but_keeps_the_last_joins_identity(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = await seeded_topic(bootstrap)
    group = unique("group")
    leaving = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **SETTINGS)
    other = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **SETTINGS)
    await leaving.start()
    await other.start()
    try:
        await poll_until([leaving], lambda: len(leaving.assignment()) == PARTITIONS, "assigned")
        joined = leaving.group_metadata()
        leaving.unsubscribe()
        await poll_until([other], lambda: len(other.assignment()) == PARTITIONS, "the other member owns all")
        assert membership_lost(leaving)
        assert leaving.group_metadata() == joined
    finally:
        await other.stop()
        await leaving.stop()


def test_sync_facade_a_dropped_members_offsets_are_refused(group_broker: BrokerProcess) -> None:
    """Two blocking consumers of one group and a transactional producer: once the group moved the
    first consumer's partitions to the second, offsets sent with the first one's
    ``group_metadata()`` make the transaction abortable with ``CommitFailedError`` as its cause;
    after the abort the producer commits the second consumer's offsets."""
    bootstrap = group_broker.bootstrap
    topic = asyncio.run(seeded_topic(bootstrap))
    group = unique("group")
    tp = TopicPartition(topic, 0)
    with (
        sync.Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **SETTINGS) as slow,
        sync.Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **SETTINGS) as other,
        sync.Producer(bootstrap_servers=bootstrap, transactional_id=unique("txn")) as producer,
    ):
        deadline = time.monotonic() + 30
        while len(slow.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "the first consumer was never assigned"
            slow.poll(timeout_ms=50)
        joined = slow.group_metadata()
        deadline = time.monotonic() + 30
        while len(other.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "the group never moved the partitions"
            other.poll(timeout_ms=50)
        # The slow member's last completed join (its background join task may have rejoined
        # while the group moved, before max_poll_interval_ms dropped it).
        lost = slow.group_metadata()
        assert lost.member_id == joined.member_id and lost.generation_id >= joined.generation_id

        producer.begin_transaction()
        producer.send(topic, b"from the dropped member", partition=0)
        with pytest.raises(TransactionAbortableError) as refused:
            producer.send_offsets_to_transaction({tp: 1}, slow.group_metadata())
        assert isinstance(refused.value.__cause__, CommitFailedError), repr(refused.value.__cause__)
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction()
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(topic, b"from the owner", partition=0)
        producer.send_offsets_to_transaction({tp: 1}, other.group_metadata())
        producer.commit_transaction()
        assert other.committed(tp) == 1
