"""sdk.Consumer in subscribe mode: the consumer side of group membership (polling drives the
ConsumerCoordinator; positions come from committed offsets; patterns follow new topics).

Against librdkafka's mock cluster (which delays a new group's first rebalance by 3 s) and the
reference broker (without that delay). The group protocol itself
(rebalances, static membership, assignors) is tested in test_group*.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sdk import Producer
from sdk.consumer import Consumer, ConsumerRebalanceListener, TopicPartition
from sdk.consumer.errors import CommitFailedError

GROUP_SETTINGS = {
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "fetch_max_wait_ms": 100,
    "retry_backoff_ms": 50,
}


@pytest.fixture(scope="module")
def group_broker_partitions() -> int:
    return 4


async def fill(bootstrap: str, topic: str, per_partition: int) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(per_partition):
            for partition in range(4):
                await producer.send(topic, b"%d" % i, partition=partition)


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))

    async def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))


async def test_two_members_share_the_partitions_and_read_everything_once(bootstrap, unique):
    topic, group = unique("shared"), unique("group")
    await fill(bootstrap, topic, 25)
    first = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS)
    second = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS)
    await first.start()
    await second.start()
    try:
        seen: dict[str, list[tuple[int, int]]] = {"first": [], "second": []}

        async def poll(name: str, consumer: Consumer) -> None:
            async with asyncio.timeout(30):
                while len(seen["first"]) + len(seen["second"]) < 100 or not (
                    first.assignment() and second.assignment()
                ):
                    for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                        seen[name].extend((tp.partition, r.offset) for r in records)
                    try:
                        await consumer.commit()
                    except CommitFailedError:
                        pass  # a rebalance began: the revocation commits what was consumed

        await asyncio.gather(poll("first", first), poll("second", second))
        assert first.assignment() | second.assignment() == {TopicPartition(topic, p) for p in range(4)}
        assert not first.assignment() & second.assignment()
        everything = sorted(seen["first"] + seen["second"])
        assert everything == sorted((p, o) for p in range(4) for o in range(25))
    finally:
        await first.stop()
        await second.stop()


async def test_listener_and_committed_positions_across_a_restart(bootstrap, unique):
    topic, group = unique("restart"), unique("group")
    await fill(bootstrap, topic, 10)
    listener = Recorder()
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        **GROUP_SETTINGS) as consumer:
        consumer.subscribe(topics=[topic], listener=listener)
        assert consumer.subscription() == {topic}
        got = 0
        async with asyncio.timeout(20):
            while got < 40:
                got += sum(len(r) for r in (await consumer.getmany(timeout_ms=300)).values())
        await consumer.commit({TopicPartition(topic, 0): 6})
        await consumer.commit({TopicPartition(topic, p): 10 for p in (1, 2, 3)})
        assert consumer.group_metadata().generation_id >= 0
    assert listener.events[0] == ("assigned", {TopicPartition(topic, p) for p in range(4)})
    assert listener.events[-1][0] == "revoked"
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS) as consumer:
        records = []
        async with asyncio.timeout(20):
            while len(records) < 4:
                for batch in (await consumer.getmany(timeout_ms=300)).values():
                    records.extend(batch)
        assert [(r.partition, r.offset) for r in records] == [(0, 6), (0, 7), (0, 8), (0, 9)]


async def test_pattern_subscription_follows_new_topics(group_broker, unique):
    """On the reference broker only: on the mock each of the two rebalances waits 3 s."""
    bootstrap = group_broker.bootstrap
    prefix = unique("pattern")
    group = unique("group")
    await fill(bootstrap, f"{prefix}-a", 2)
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, metadata_max_age_ms=500,
                        **GROUP_SETTINGS) as consumer:
        consumer.subscribe(pattern=f"{prefix}-.*")
        topics_seen: set[str] = set()
        async with asyncio.timeout(30):
            while f"{prefix}-a" not in topics_seen:
                topics_seen |= {tp.topic for tp in (await consumer.getmany(timeout_ms=300))}
            await fill(bootstrap, f"{prefix}-b", 2)
            while f"{prefix}-b" not in topics_seen:
                topics_seen |= {tp.topic for tp in (await consumer.getmany(timeout_ms=300))}
        assert consumer.subscription() == {f"{prefix}-a", f"{prefix}-b"}


def test_an_unknown_assignor_name_is_a_config_error():
    from sdk.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", partition_assignment_strategy="bogus")
    assert info.value.option == "partition_assignment_strategy"


async def test_unsubscribe_hands_the_partitions_to_the_other_member(group_broker, unique):
    bootstrap = group_broker.bootstrap
    topic, group = unique("unsubscribe"), unique("group")
    everything = {TopicPartition(topic, p) for p in range(4)}
    await fill(bootstrap, topic, 2)
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS) as first, \
            Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS) as second:

        async def poll_until(consumer: Consumer, done) -> None:  # each member polls on its own
            while not done():
                await consumer.getmany(timeout_ms=100)

        def shared() -> bool:
            mine, theirs = first.assignment(), second.assignment()
            return bool(mine) and bool(theirs) and mine | theirs == everything and not mine & theirs

        async with asyncio.timeout(20):
            await asyncio.gather(poll_until(first, shared), poll_until(second, shared))
            first.unsubscribe()
            left_at = time.monotonic()
            assert first.assignment() == set()
            await poll_until(second, lambda: second.assignment() == everything)
            # Well within the 6 s session timeout: the first member left rather than timed out.
            assert time.monotonic() - left_at < 4
