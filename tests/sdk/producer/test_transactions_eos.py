"""Exactly-once copy with our SDK, with the copier and the broker killed midway.

As Kafka's own transactions system test does: an input topic is seeded with numbered records
over 4 partitions; a copier (a read_committed group consumer, a transactional producer and the
consumer's offsets sent to each transaction with its group metadata) transforms and copies them
to an output topic in transactions of up to 100 records. Meanwhile the copier is killed inside a
transaction and replaced by a new one with the same transactional id (which fences it; the
coordinator aborts what it left open), then the broker is killed with SIGKILL and restarted.
Whatever failed is aborted and the consumer rewound to the committed offsets. A read_committed
reader then finds the output to be exactly the transformed input (0 duplicates, 0 missing, order
kept per partition), and one reading during the copy saw only a prefix of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerProcess
from sdk import Producer, TopicPartition
from sdk.consumer import Consumer
from sdk.errors import KafkaError, KafkaTimeoutError
from sdk.producer.transaction_manager import TransactionState
from sdk.producer.transactions import is_fatal

pytestmark = pytest.mark.asyncio

log = logging.getLogger(__name__)

PARTITIONS = 4
RECORDS = 2000
PER_PARTITION = RECORDS // PARTITIONS


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def eos_broker() -> Iterator[BrokerProcess]:
    config = {
        "num.partitions": PARTITIONS,
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 2,
        "transaction.state.log.num.partitions": 2,
    }
    with BrokerProcess(config=config) as proc:
        yield proc


async def _seed(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=10) as producer:
        futures = [
            await producer.send(topic, b"%d" % i, key=b"%d" % i, partition=i % PARTITIONS)
            for i in range(RECORDS)
        ]
        await asyncio.gather(*futures)


class Copier:
    """read_committed consumer -> transform -> transactional producer, offsets in the transaction."""

    def __init__(
        self, bootstrap: str, source: str, target: str, group: str, transactional_id: str, progress: list[int]
    ) -> None:
        self.bootstrap = bootstrap
        self.source = source
        self.target = target
        self.group = group
        self.transactional_id = transactional_id
        #: Records in committed transactions, shared by the copiers that take over one another.
        self.progress = progress
        self.aborts = 0
        self.consumer = Consumer(
            source,
            bootstrap_servers=bootstrap,
            group_id=group,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_records=100,
            fetch_max_wait_ms=100,
            request_timeout_ms=3000,
        )
        self.producer: Producer | None = None

    async def _new_producer(self) -> Producer:
        while True:
            producer = Producer(
                bootstrap_servers=self.bootstrap,
                transactional_id=self.transactional_id,
                request_timeout_ms=3000,
                max_block_ms=20000,
                linger_ms=5,
            )
            try:
                await producer.start()
                return producer
            except KafkaError as exc:
                log.info("copier: producer start failed (%r), again", exc)
                await asyncio.sleep(0.2)

    async def run(self) -> None:
        await self.consumer.start()
        try:
            while True:
                if self.producer is None:
                    self.producer = await self._new_producer()
                try:
                    batches = await self.consumer.getmany(timeout_ms=200)
                except KafkaError as exc:
                    log.info("copier: getmany failed: %r", exc)
                    await asyncio.sleep(0.1)
                    continue
                if batches:
                    await self._copy(self.producer, batches)
                elif await self._done():
                    return
        except asyncio.CancelledError:
            # Killed: nothing is finished cleanly (stop(0) gives the open transaction no time).
            if self.producer is not None:
                await self.producer.stop(0)
                self.producer = None
            raise
        finally:
            if self.producer is not None:
                await self.producer.stop()
            await self.consumer.stop()

    async def _done(self) -> bool:
        """Whether the group committed the end of every input partition."""
        try:
            for p in range(PARTITIONS):
                if await self.consumer.committed(TopicPartition(self.source, p)) != PER_PARTITION:
                    return False
        except KafkaError:
            return False
        return True

    async def _copy(self, producer: Producer, batches: dict[TopicPartition, list]) -> None:
        count = sum(len(records) for records in batches.values())
        try:
            await producer.begin_transaction()
            for tp, records in batches.items():
                for record in records:
                    await producer.send(
                        self.target, b"copied-" + record.value, key=record.key, partition=tp.partition
                    )
            offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
            await producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
            while True:
                try:
                    await producer.commit_transaction()
                    break
                except KafkaTimeoutError:
                    log.info("copier: commit timed out, again")  # the outcome is not known: retry
            self.progress[0] += count
        except KafkaError as exc:
            log.info("copier: transaction failed: %r", exc)
            await self._recover(producer, exc)

    async def _recover(self, producer: Producer, error: KafkaError) -> None:
        self.aborts += 1
        if is_fatal(error) or producer.transaction_manager.fatal_error is not None:  # type: ignore[union-attr]
            await producer.stop()
            self.producer = None
        else:
            for _ in range(10):
                try:
                    await producer.abort_transaction()
                    break
                except KafkaTimeoutError:
                    continue
                except KafkaError as exc:
                    log.info("copier: abort failed (%r): new producer", exc)
                    await producer.stop()
                    self.producer = None
                    break
        # Start again from what the group committed (with the transactions that committed).
        while True:
            try:
                assigned = self.consumer.assignment()
                if assigned:
                    found = await self.consumer.seek_to_committed(*assigned)
                    missing = [tp for tp, offset in found.items() if offset is None]
                    if missing:
                        await self.consumer.seek_to_beginning(*missing)
                return
            except KafkaError as exc:
                log.info("copier: rewind failed (%r), again", exc)
                await asyncio.sleep(0.2)


async def _read_committed(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 20
        quiet = 0
        while time.monotonic() < deadline and quiet < 3:
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                got[tp.partition].extend(r.value for r in records)
            total = sum(len(v) for v in got.values())
            quiet = quiet + 1 if not batches and total >= RECORDS else 0
    return got


async def _watch(bootstrap: str, topic: str, seen: dict[int, list[bytes]], stop: asyncio.Event) -> None:
    """A read_committed reader running during the copy: what it sees must never include an
    aborted or uncommitted record."""
    async with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=3000,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=100)
            except KafkaError:
                await asyncio.sleep(0.1)
                continue
            for tp, records in batches.items():
                seen[tp.partition].extend(r.value for r in records)


def _in_transaction(copier: Copier) -> bool:
    txn = copier.producer.transaction_manager if copier.producer is not None else None
    if txn is None or txn.state != TransactionState.IN_TRANSACTION:
        return False
    return bool(txn.new_partitions or txn.pending_partitions or txn.partitions_in_transaction)


async def _wait_for(progress: list[int], records: int, task: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + 60
    while progress[0] < records and time.monotonic() < deadline:
        assert not task.done(), task
        await asyncio.sleep(0.005)


async def test_exactly_once_copy_survives_copier_and_broker_kills(eos_broker):
    bootstrap = eos_broker.bootstrap
    source, target, group = unique("eos-in"), unique("eos-out"), unique("eos-group")
    transactional_id = unique("copier")
    await _seed(bootstrap, source)
    progress = [0]
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    stop_watching = asyncio.Event()
    watching = asyncio.create_task(_watch(bootstrap, target, seen, stop_watching))
    first = Copier(bootstrap, source, target, group, transactional_id, progress)
    copying = asyncio.create_task(first.run())
    second: Copier | None = None
    try:
        # The copier dies mid-transaction; its successor (same transactional id) fences it and
        # the coordinator aborts what it left open.
        await _wait_for(progress, RECORDS // 4, copying)
        spin_deadline = time.monotonic() + 10
        while not _in_transaction(first):
            assert time.monotonic() < spin_deadline, "the copier never seen inside a transaction"
            await asyncio.sleep(0)
        bounced_at = progress[0]
        copying.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await copying
        second = Copier(bootstrap, source, target, group, transactional_id, progress)
        copying = asyncio.create_task(second.run())
        # Then the broker is killed with SIGKILL and restarted.
        await _wait_for(progress, RECORDS // 2, copying)
        killed_at = progress[0]
        await asyncio.to_thread(eos_broker.restart, kill=True)
        restarted_at = progress[0]
        await asyncio.wait_for(asyncio.shield(copying), 90)
    finally:
        stop_watching.set()
        for task in (copying, watching):
            if not task.done() and task is copying:
                task.cancel()
            with contextlib.suppress(BaseException):
                await task
    log.info(
        "copier bounced at %d committed records, broker killed at %d and back at %d; %d transactions failed",
        bounced_at,
        killed_at,
        restarted_at,
        first.aborts + second.aborts,
    )
    assert 0 < bounced_at < killed_at <= restarted_at < RECORDS, "the kills happened midway"
    assert sum(len(v) for v in seen.values()) > 0
    output = await _read_committed(bootstrap, target)
    for p in range(PARTITIONS):
        expected = [b"copied-%d" % i for i in range(p, RECORDS, PARTITIONS)]
        got = output[p]
        assert len(got) == len(set(got)), f"partition {p}: {len(got) - len(set(got))} duplicates"
        assert got == expected, f"partition {p}: {len(set(expected) - set(got))} missing, or out of order"
        # The concurrent reader saw a prefix of the output: nothing aborted, nothing twice.
        assert seen[p] == expected[: len(seen[p])], f"partition {p}: the concurrent reader saw aborted data"
