"""sdk.Consumer groups end to end: with commits on revocation (by the listener, or by auto-commit),
members joining and leaving mid-stream read every record exactly once."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from sdk import Producer
from sdk.consumer import Consumer
from sdk.consumer.listener import ConsumerRebalanceListener

pytestmark = pytest.mark.timeout(120)

PER_PARTITION = 60


@pytest.fixture(scope="module")
def group_broker_partitions() -> int:
    return 4


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The reference broker and Apache Kafka, not librdkafka's mock cluster: it answers
    REBALANCE_IN_PROGRESS to OffsetCommit while a rebalance is being prepared (Kafka accepts
    commits from the current generation then), so commits on eager revocation fail there and
    records are read twice."""
    if request.param == "apache":
        return str(request.getfixturevalue("group_kafka").bootstrap)
    return str(request.getfixturevalue("group_broker").bootstrap)


async def fill(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    """PER_PARTITION records in each of the topic's 4 partitions (auto-created with 4 on both)."""
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(PER_PARTITION):
            for partition in range(4):
                await producer.send(topic, b"%d" % i, partition=partition)
    return {(p, o) for p in range(4) for o in range(PER_PARTITION)}


class CommitOnRevoke(ConsumerRebalanceListener):
    """Commits what was processed before the partitions go (the pattern the issue asks for)."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        assert self.consumer is not None
        await self.consumer.commit()


SETTINGS: dict[str, Any] = {
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 200,
    "fetch_max_wait_ms": 100,
    "retry_backoff_ms": 50,
    "max_poll_records": 7,
}


async def consume(consumer: Consumer, seen: list[tuple[int, int]], stop: asyncio.Event) -> None:
    """Process (record) a few records at a time until ``stop``, slowly enough to be interrupted."""
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=100)
        for tp, records in batches.items():
            seen.extend((tp.partition, r.offset) for r in records)
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("commit_mode", ["listener", "auto"])
async def test_join_and_leave_mid_stream_process_each_record_once(bootstrap: str, commit_mode: str) -> None:
    topic, group = f"once-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    expected = await fill(bootstrap, topic)
    seen: list[tuple[int, int]] = []

    def make() -> Consumer:
        listener = CommitOnRevoke() if commit_mode == "listener" else None
        consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=commit_mode == "auto",
            auto_commit_interval_ms=60000,  # only the commits made on revocation and close count
            **SETTINGS,
        )
        if listener is not None:
            listener.consumer = consumer
        consumer._test_listener = listener  # type: ignore[attr-defined]
        return consumer

    first, second = make(), make()
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    await first.start()
    first.subscribe([topic], listener=first._test_listener)  # type: ignore[attr-defined]
    first_task = asyncio.create_task(consume(first, seen, stop_first))
    try:
        await _until(lambda: len(seen) >= 40, "the first member reads")
        await second.start()
        second.subscribe([topic], listener=second._test_listener)  # type: ignore[attr-defined]
        second_task = asyncio.create_task(consume(second, seen, stop_second))
        await _until(lambda: bool(first.assignment()) and bool(second.assignment())
                     and not first.assignment() & second.assignment(), "both members hold partitions")
        await _until(lambda: len(seen) >= 120, "both members read")
        # The first member leaves: it commits what it processed, the second takes over from there.
        stop_first.set()
        await first_task
        if commit_mode == "listener":
            await first.commit()
        await first.stop()
        await _until(lambda: set(seen) >= expected, "the second member reads the rest", timeout=40)
        stop_second.set()
        await second_task
    finally:
        stop_first.set()
        stop_second.set()
        await first.stop()
        await second.stop()
    duplicates = len(seen) - len(set(seen))
    assert set(seen) == expected
    assert duplicates == 0, f"{duplicates} records processed twice"


async def _until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


async def test_a_fenced_static_consumer_gets_a_clear_error_from_getmany(bootstrap: str) -> None:
    from sdk.errors import FencedInstanceIdError  # type: ignore[attr-defined]

    topic, group = f"fence-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    await fill(bootstrap, topic)
    settings = {**SETTINGS, "group_instance_id": "the-one", "enable_auto_commit": False}
    older = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings)
    newer = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings)
    await older.start()
    try:
        await _until_async(lambda: _polled(older), "the first instance has partitions")
        await newer.start()
        await _until_async(lambda: _polled(newer), "the second instance has partitions")
        with pytest.raises(FencedInstanceIdError, match="the-one"):
            async with asyncio.timeout(10):
                while True:
                    await older.getmany(timeout_ms=100)
    finally:
        await older.stop()
        await newer.stop()


async def _polled(consumer: Consumer) -> bool:
    await consumer.getmany(timeout_ms=50)
    return bool(consumer.assignment())


async def _until_async(condition: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"


async def test_coordinator_requests_do_not_wait_behind_a_fetch_long_poll(bootstrap: str) -> None:
    """Group requests use a connection of their own (as Java's client does): a commit made while
    the fetcher's long poll waits on an empty partition is answered at once, not after
    fetch_max_wait_ms (the broker answers one connection's requests in order)."""
    from sdk.client.cluster import TopicPartition
    from sdk.consumer.records import OffsetAndMetadata

    topic, group = f"idle-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_and_wait(topic, b"one", partition=0)
    tp = TopicPartition(topic, 0)
    async with Consumer(
        bootstrap_servers=bootstrap, group_id=group, fetch_max_wait_ms=5000, enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(0, "")})  # the coordinator is known
        consumer.seek(tp, 1)  # the end: the fetch will wait the full fetch_max_wait_ms
        # Behind the long poll the answer takes about fetch_max_wait_ms on every attempt; a
        # scheduler stall on a loaded runner delays one, so up to three attempts are timed.
        timings: list[float] = []
        while len(timings) < 3 and not (timings and timings[-1] < 2.0):
            polling = asyncio.create_task(consumer.getmany(timeout_ms=4000))
            await asyncio.sleep(0.3)  # the long poll is on the wire
            started = time.monotonic()
            await consumer.commit({tp: OffsetAndMetadata(1, "")})
            assert await consumer.committed(tp) == 1
            timings.append(time.monotonic() - started)
            polling.cancel()
        assert timings[-1] < 2.0, f"commit + committed took {timings} s behind the long poll"


def test_coordinator_connections_have_node_ids_of_their_own() -> None:
    from sdk.client.client import broker_node_id, coordinator_node_id

    for node in (0, 1, 7, 1000):
        assert coordinator_node_id(node) != node
        assert broker_node_id(coordinator_node_id(node)) == node
        assert broker_node_id(node) == node
