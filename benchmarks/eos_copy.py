"""Exactly-once copy with bounces, the scenario of Kafka's transactions system test.

An input topic is seeded with numbered records over several partitions; copier processes (a
read_committed consumer, a transactional producer and the consumer's offsets sent to each
transaction) transform and copy them to an output topic. Meanwhile the copier process and the
broker are killed with SIGKILL and restarted, alternately, at evenly spaced points of the copy. A
read_committed reader running during the copy checks that what it sees is, per partition, always
a prefix of the expected output (nothing aborted, nothing uncommitted, nothing twice); at the end
a fresh read_committed read must be exactly the transformed input.

Shared by tests/sdk/producer/test_transactions_eos.py (bounded form) and benchmarks/eos_soak.py
(long form). ``python benchmarks/eos_copy.py sdk|confluent-kafka BOOTSTRAP SOURCE TARGET GROUP
PARTITIONS MESSAGES`` runs one copier process; it exits 0 once the group committed the whole input.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from reference_broker.testing import BrokerProcess
from sdk import Producer, TopicPartition
from sdk.consumer import Consumer
from sdk.errors import KafkaError, KafkaTimeoutError
from sdk.producer.transaction_errors import is_fatal

log = logging.getLogger(__name__)

COPIERS = ("sdk", "confluent-kafka")
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}
#: A copier that commits nothing for this long is killed and restarted, as a supervisor would do
#: (librdkafka 2.x can block past its timeouts after a broker restart: confluentinc/librdkafka#5456).
STALL_S = 8.0
#: Milliseconds the SDK copier waits after each committed transaction (``run_soak``'s
#: ``pause_ms``; unset in benchmarks). A test sets it so that the copy advances gradually enough
#: for every bounce to land while it is under way, however fast the machine copies.
PAUSE_ENV = "EOS_COPY_PAUSE_MS"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def value(i: int) -> bytes:
    return b"%d" % i


def transform(record_value: bytes) -> bytes:
    return b"copied-" + record_value


def expected_output(messages: int, partitions: int) -> dict[int, list[bytes]]:
    """Message i goes to partition i % partitions; the output keeps the input's partitions."""
    return {p: [transform(value(i)) for i in range(p, messages, partitions)] for p in range(partitions)}


async def seed(bootstrap: str, topic: str, messages: int, partitions: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=10) as producer:
        futures = [
            await producer.send(topic, value(i), key=value(i), partition=i % partitions)
            for i in range(messages)
        ]
        await asyncio.gather(*futures)


class SdkCopier:
    """read_committed consumer -> transform -> transactional producer, offsets in the transaction.

    The consumer is assigned the partitions (not subscribed) with the group's committed offsets,
    so that a successor of a killed copier need not wait for the dead member's session to expire;
    the transactional id fences the predecessor and the coordinator aborts what it left open.
    """

    def __init__(
        self,
        bootstrap: str,
        source: str,
        target: str,
        group: str,
        partitions: int,
        messages: int,
        pause_s: float = 0.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.pause_s = pause_s
        self.source = source
        self.target = target
        self.transactional_id = group + "-copier"
        self.ends = {p: len(range(p, messages, partitions)) for p in range(partitions)}
        self.aborts = 0
        self.consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=100,
            fetch_max_wait_ms=100,
            request_timeout_ms=3000,
        )
        self.partitions = partitions
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
            self.consumer.assign([TopicPartition(self.source, p) for p in range(self.partitions)])
            # The producer first: initialising it fences a killed predecessor and aborts its open
            # transaction, whose offsets would otherwise keep the committed offsets unstable.
            self.producer = await self._new_producer()
            await self._rewind()
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
                    if self.pause_s:
                        await asyncio.sleep(self.pause_s)
                elif await self._done():
                    return
        finally:
            if self.producer is not None:
                await self.producer.stop()
            await self.consumer.stop()

    async def _done(self) -> bool:
        """Whether the group committed the end of every input partition."""
        try:
            for p, end in self.ends.items():
                if await self.consumer.committed(TopicPartition(self.source, p)) != end:
                    return False
        except KafkaError:
            return False
        return True

    async def _copy(self, producer: Producer, batches: dict[TopicPartition, list]) -> None:
        try:
            await producer.begin_transaction()
            for tp, records in batches.items():
                for record in records:
                    await producer.send(
                        self.target, transform(record.value), key=record.key, partition=tp.partition
                    )
            offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
            await producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
            while True:
                try:
                    await producer.commit_transaction()
                    break
                except KafkaTimeoutError:
                    log.info("copier: commit timed out, again")  # the outcome is not known: retry
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
        await self._rewind()

    async def _rewind(self) -> None:
        """Start again from what the group committed (with the transactions that committed)."""
        while True:
            try:
                assigned = self.consumer.assignment()
                found = await self.consumer.seek_to_committed(*assigned)
                missing = [tp for tp, offset in found.items() if offset is None]
                if missing:
                    await self.consumer.seek_to_beginning(*missing)
                return
            except KafkaError as exc:
                log.info("copier: rewind failed (%r), again", exc)
                await asyncio.sleep(0.2)


def run_confluent_copier(
    bootstrap: str, source: str, target: str, group: str, partitions: int, messages: int
) -> None:
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as CKProducer
    from confluent_kafka import TopicPartition as CKTopicPartition

    ends = {p: len(range(p, messages, partitions)) for p in range(partitions)}
    consumer = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CKTopicPartition(source, p) for p in range(partitions)])
    producer = CKProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": group + "-copier",
            "linger.ms": 2,
            "transaction.timeout.ms": 5000,
            "message.timeout.ms": 4000,
        }
    )
    try:
        producer.init_transactions(20)
        while True:
            messages_read = [m for m in consumer.consume(100, 0.2) if m.error() is None]
            if not messages_read:
                # Done once the group committed the end of every partition (a successor may find
                # it so from the start: positions of partitions it never read are unknown).
                committed = consumer.committed(list(consumer.assignment()), 5)
                if all(tp.offset >= ends[tp.partition] for tp in committed):
                    os._exit(0)
                continue
            producer.begin_transaction()
            for m in messages_read:
                producer.produce(target, transform(m.value()), key=m.key(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 5)
            producer.commit_transaction(5)
    except KafkaException as exc:
        # A copier that fails dies and is restarted by the supervisor, like a crashed one; os._exit
        # because librdkafka's destroy can wait on a broker connection that was cut.
        print("copier stops:", exc, file=sys.stderr, flush=True)
        os._exit(3)


class CopierProcess:
    """One copier at a time as a child process, restarted by ``ensure_running`` when it died."""

    def __init__(
        self, copier: str, args: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.args = [sys.executable, str(Path(__file__).resolve()), copier, *args]
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def finished(self) -> bool:
        return self.proc is not None and self.proc.poll() == 0

    def ensure_running(self) -> None:
        if self.proc is None or (self.proc.poll() is not None and self.proc.returncode != 0):
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(
                    self.args, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=self.env
                )
            self.starts += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc.returncode = -9  # restarted by ensure_running


class Watcher(threading.Thread):
    """A read_committed reader running during the copy, in its own thread and event loop; ``seen``
    grows as committed output appears and doubles as the copy's progress."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.seen.values())

    def run(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as exc:  # reported by the scenario
            self.error = exc

    async def _watch(self) -> None:
        # Bounces are scheduled on what this reader has seen, so it must trail the committed output
        # closely, also right after a broker restart: short fetch waits, and reconnect and retry
        # backoffs capped at 100 ms (the default 1 s let a faster copier finish before the last
        # bounce point was seen).
        async with Consumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            request_timeout_ms=3000,
            reconnect_backoff_max_ms=100,
            retry_backoff_max_ms=100,
        ) as consumer:
            consumer.assign([TopicPartition(self.topic, p) for p in self.seen])
            while not self.stopping.is_set():
                try:
                    batches = await consumer.getmany(timeout_ms=20)
                except KafkaError:
                    await asyncio.sleep(0.1)
                    continue
                for tp, records in batches.items():
                    self.seen[tp.partition].extend(r.value for r in records)


async def read_committed(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[bytes]]:
    """Everything committed in ``topic``, read until ``expected`` records and then a quiet spell."""
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    async with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        quiet = 0
        while time.monotonic() < deadline and quiet < 3:
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                got[tp.partition].extend(r.value for r in records)
            total = sum(len(v) for v in got.values())
            quiet = quiet + 1 if not batches and total >= expected else 0
    return got


@dataclass
class SoakResult:
    messages: int
    copier_kills: int = 0
    broker_kills: int = 0
    stall_kills: int = 0
    copier_starts: int = 0
    duplicates: int = 0
    missing: int = 0
    order_violations: int = 0
    #: Partitions where the concurrent reader saw something other than a prefix of the output.
    reader_violations: int = 0
    reader_saw: int = 0
    #: Committed output records (seen by the reader) when each bounce happened.
    bounced_at: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return not (self.duplicates or self.missing or self.order_violations or self.reader_violations)


def _compare(
    result: SoakResult, output: dict[int, list[bytes]], seen: dict[int, list[bytes]], messages: int
) -> None:
    for p, expected in expected_output(messages, len(output)).items():
        got = output[p]
        result.duplicates += len(got) - len(set(got))
        result.missing += len(set(expected) - set(got))
        # Order: neighbours whose input numbers go backwards (the input is increasing per partition).
        numbers = [int(v[len(transform(b"")) :]) for v in got]
        result.order_violations += sum(1 for a, b in itertools.pairwise(numbers) if b < a)
        if seen[p] != expected[: len(seen[p])]:
            result.reader_violations += 1


def run_soak(
    broker: BrokerProcess,
    *,
    messages: int,
    partitions: int,
    bounces: int,
    copier: str,
    log_dir: Path,
    timeout_s: float = 600.0,
    pause_ms: float = 0.0,
) -> SoakResult:
    """Seed, copy with ``bounces`` copier kills and ``bounces`` broker kills (alternating, evenly
    spread over the copy), then compare; ``broker`` is running and is left running. ``pause_ms``
    (the SDK copier's wait after each transaction, see ``PAUSE_ENV``) spreads the copy out."""
    if copier not in COPIERS:
        raise ValueError(f"copier must be one of {COPIERS}")
    started = time.monotonic()
    bootstrap = broker.bootstrap
    source, target, group = unique("eos-in"), unique("eos-out"), unique("eos-group")
    asyncio.run(seed(bootstrap, source, messages, partitions))
    result = SoakResult(messages)
    watcher = Watcher(bootstrap, target, partitions)
    watcher.start()
    env = {**os.environ, PAUSE_ENV: str(pause_ms)} if pause_ms else None
    args = [bootstrap, source, target, group, str(partitions), str(messages)]
    process = CopierProcess(copier, args, log_dir / "copier.log", env)
    # Bounce k of 2*bounces happens when k/(2*bounces+1) of the output is committed.
    points = [messages * k // (2 * bounces + 1) for k in range(1, 2 * bounces + 1)]
    deadline = started + timeout_s
    last_total, last_progress = -1, time.monotonic()
    try:
        process.ensure_running()
        while not process.finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"copy unfinished after {timeout_s}s: {watcher.total} of {messages} seen")
            total = watcher.total
            if points and total >= points[0]:
                points.pop(0)
                result.bounced_at.append(total)
                if len(points) % 2 == 1:
                    process.kill()
                    result.copier_kills += 1
                else:
                    broker.restart(kill=True)
                    result.broker_kills += 1
                last_progress = time.monotonic()
            if total != last_total:
                last_total, last_progress = total, time.monotonic()
            elif time.monotonic() - last_progress > STALL_S:
                log.warning("copier made no progress for %.0fs: killed", STALL_S)
                process.kill()
                result.stall_kills += 1
                last_progress = time.monotonic()
            process.ensure_running()
            time.sleep(0.01)
        output = asyncio.run(read_committed(bootstrap, target, partitions, messages))
        time.sleep(0.3)  # let the reader catch up with the end, then stop it
    finally:
        process.kill()
        watcher.stopping.set()
        watcher.join(10)
    if watcher.error is not None:
        raise RuntimeError("the concurrent reader failed") from watcher.error
    result.copier_starts = process.starts
    result.reader_saw = watcher.total
    _compare(result, output, watcher.seen, messages)
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str]) -> None:
    copier, bootstrap, source, target, group, partitions, messages = argv
    logging.basicConfig(level=os.environ.get("EOS_COPY_LOG_LEVEL", "WARNING"))
    if copier == "sdk":
        pause_s = float(os.environ.get(PAUSE_ENV, "0")) / 1000
        asyncio.run(
            SdkCopier(bootstrap, source, target, group, int(partitions), int(messages), pause_s).run()
        )
    elif copier == "confluent-kafka":
        run_confluent_copier(bootstrap, source, target, group, int(partitions), int(messages))
    else:
        raise SystemExit(f"unknown copier {copier!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
