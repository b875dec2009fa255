"""One workload client as a process of its own, recording everything it does to its history file.

Clients run as subprocesses so that a nemesis can SIGKILL or SIGSTOP them for real. Each runs
until SIGTERM, then ends cleanly (a transaction in progress is committed, a consumer commits its
offsets) and exits 0. Roles:

* ``producer``: ``sdk.Producer`` with idempotence, sends to every partition of the topic;
* ``ck-producer`` and ``ck-txn``: confluent-kafka's idempotent and transactional producers
  (``confluent_clients.py``);
* ``txn``: ``sdk.Producer`` with a ``transactional_id`` kept across incarnations of the client.
  Each transaction polls a read_committed consumer assigned to the partitions it does not own
  (reads inside the transaction: the checker's wr edges), then sends 1-4 values to the partitions
  it owns, waits for their acknowledgements, then commits (one in eight aborts on purpose, so
  aborted records reach the log);
* ``consumer``: ``sdk.Consumer`` in a group, read_committed, committing offsets every second.

    python -m tools.anomaly.client --role txn --client txn-0 --process txn-0.1 \
        --bootstrap 127.0.0.1:9092 --topic t --partitions 6 --own 0,1 --history txn-0.1.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sdk import Consumer, ConsumerRebalanceListener, Producer, TopicPartition
from sdk.errors import KafkaError, TransactionAbortableError
from tools.anomaly.history import Recorder

T = TypeVar("T")
ROLES = ("producer", "ck-producer", "txn", "ck-txn", "consumer")
#: Short enough that a killed transactional client's open transaction is aborted by the
#: coordinator well before the run's final read needs every partition stable.
TRANSACTION_TIMEOUT_MS = 10_000
REQUEST_TIMEOUT_MS = 5_000


class Client:
    def __init__(self, args: argparse.Namespace, recorder: Recorder) -> None:
        self.args = args
        self.rec = recorder
        self.stopping = asyncio.Event()
        self.seq = itertools.count()
        self.rng = random.Random()

    def next_value(self) -> str:
        return f"{self.rec.process}-{next(self.seq)}"

    async def pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except TimeoutError:
            pass

    async def started(self, make: Callable[[], T]) -> T:
        """A started client from ``make()``, retried while the broker cannot be reached (a client
        restarted during a broker kill must wait for it, as a supervised application would)."""
        while True:
            client = make()
            try:
                await client.start()  # type: ignore[attr-defined]
                return client
            except KafkaError:
                await client.stop()  # type: ignore[attr-defined]
                await self.pause(0.3)
                if self.stopping.is_set():
                    raise

    async def sent(self, value: str, txn: str | None, future: Any) -> bool:
        """Record a send's outcome; an unknown outcome is ``info`` (it may still be written)."""
        try:
            meta = await future
        except KafkaError as exc:
            self.rec.record("info", "send", value=value, txn=txn, error=repr(exc))
            return False
        self.rec.record("ok", "send", value=value, txn=txn, partition=meta.partition, offset=meta.offset)
        return True


class IdempotentProducer(Client):
    async def run(self) -> None:
        producer = await self.started(
            lambda: Producer(
                bootstrap_servers=self.args.bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=5,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                delivery_timeout_ms=60_000,
                max_block_ms=30_000,
            )
        )
        try:
            while not self.stopping.is_set():
                pending = []
                for _ in range(self.rng.randint(1, 5)):
                    value = self.next_value()
                    partition = self.rng.randrange(self.args.partitions)
                    self.rec.record("invoke", "send", value=value, txn=None)
                    try:
                        future = await producer.send(self.args.topic, value.encode(), partition=partition)
                    except KafkaError as exc:
                        self.rec.record("info", "send", value=value, txn=None, error=repr(exc))
                        continue
                    pending.append(self.sent(value, None, future))
                await asyncio.gather(*pending)
                await self.pause(0.02)
        finally:
            await producer.stop()


class TransactionalProducer(Client):
    """Read, then write, in each transaction; a fatal error means a new producer (same id)."""

    def __init__(self, args: argparse.Namespace, recorder: Recorder) -> None:
        super().__init__(args, recorder)
        self.own = [int(p) for p in args.own.split(",")]
        self.txn_numbers = itertools.count()
        self.producer: Producer | None = None

    async def new_producer(self) -> Producer:
        return await self.started(
            lambda: Producer(
                bootstrap_servers=self.args.bootstrap,
                transactional_id=f"{self.args.topic}-{self.rec.client}",
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                max_block_ms=20_000,
                linger_ms=2,
            )
        )

    async def run(self) -> None:
        others = [p for p in range(self.args.partitions) if p not in self.own]
        consumer = await self.started(
            lambda: Consumer(
                bootstrap_servers=self.args.bootstrap,
                isolation_level="read_committed",
                auto_offset_reset="latest",
                enable_auto_commit=False,
                fetch_max_wait_ms=50,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
            )
        )
        try:
            consumer.assign([TopicPartition(self.args.topic, p) for p in others])
            self.rec.record("ok", "assign", partitions=others)
            while not self.stopping.is_set():
                if self.producer is None:
                    self.producer = await self.new_producer()
                await self.transaction(self.producer, consumer)
                await self.pause(0.02)
        finally:
            if self.producer is not None:
                await self.producer.stop()
            await consumer.stop()

    async def transaction(self, producer: Producer, consumer: Consumer) -> None:
        txn = f"{self.rec.process}#{next(self.txn_numbers)}"
        try:
            await producer.begin_transaction()
        except KafkaError:
            await self.replace(producer)
            return
        self.rec.record("ok", "txn-begin", txn=txn)
        try:
            batches = await consumer.getmany(timeout_ms=50, max_records=20)
        except KafkaError:
            batches = {}
        records = [[tp.partition, r.offset, r.value.decode()] for tp, rs in batches.items() for r in rs]
        if records:
            self.rec.record("ok", "poll", records=records, txn=txn)
        pending = []
        for _ in range(self.rng.randint(1, 4)):
            value = self.next_value()
            self.rec.record("invoke", "send", value=value, txn=txn)
            try:
                future = await producer.send(
                    self.args.topic, value.encode(), partition=self.rng.choice(self.own)
                )
            except KafkaError as exc:
                self.rec.record("info", "send", value=value, txn=txn, error=repr(exc))
                continue
            pending.append(self.sent(value, txn, future))
        # Acknowledged before the end, so that aborted transactions leave records in the log
        # for read_committed readers to skip.
        await asyncio.gather(*pending)
        abort = self.rng.random() < 1 / 8
        if not abort:
            self.rec.record("invoke", "txn-commit", txn=txn)
            try:
                await producer.commit_transaction()
            except KafkaError as exc:
                # An abortable error means a record failed and the commit was never asked for;
                # anything else (a timeout, a lost connection) may have reached the coordinator.
                kind = "fail" if isinstance(exc, TransactionAbortableError) else "info"
                self.rec.record(kind, "txn-commit", txn=txn, error=repr(exc))
                abort = True
            else:
                self.rec.record("ok", "txn-commit", txn=txn)
        if abort:
            await self.abort(producer, txn)

    async def abort(self, producer: Producer, txn: str) -> None:
        self.rec.record("invoke", "txn-abort", txn=txn)
        try:
            await producer.abort_transaction()
        except KafkaError as exc:
            self.rec.record("info", "txn-abort", txn=txn, error=repr(exc))
            await self.replace(producer)
        else:
            self.rec.record("ok", "txn-abort", txn=txn)

    async def replace(self, producer: Producer) -> None:
        """Drop a producer that cannot go on; the next transaction starts a new one (which fences
        this one and has the coordinator abort whatever it left open)."""
        await producer.stop()
        self.producer = None


class GroupConsumer(Client):
    class Listener(ConsumerRebalanceListener):
        def __init__(self, client: GroupConsumer, consumer: Consumer, group: str) -> None:
            self.client = client
            self.consumer = consumer
            self.group = group

        def on_partitions_revoked(self, revoked: Any) -> None:
            partitions = sorted(tp.partition for tp in revoked)
            self.client.rec.record("ok", "revoke", partitions=partitions, group=self.group)

        def on_partitions_assigned(self, assigned: Any) -> None:
            self.client.rec.record(
                "ok",
                "assign",
                partitions=sorted(tp.partition for tp in self.consumer.assignment()),
                added=sorted(tp.partition for tp in assigned),
                group=self.group,
            )

    @property
    def group(self) -> str:
        return f"{self.args.topic}-group"

    async def run(self) -> None:
        consumer = await self.started(
            lambda: Consumer(
                bootstrap_servers=self.args.bootstrap,
                group_id=self.group,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=1000,
                fetch_max_wait_ms=100,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
            )
        )
        try:
            consumer.subscribe([self.args.topic], listener=self.Listener(self, consumer, self.group))
            last_commit = time.monotonic()
            while not self.stopping.is_set():
                try:
                    batches = await consumer.getmany(timeout_ms=100)
                except KafkaError:
                    await self.pause(0.1)
                    continue
                records = [
                    [tp.partition, r.offset, r.value.decode()] for tp, rs in batches.items() for r in rs
                ]
                if records:
                    self.rec.record("ok", "poll", records=records, txn=None)
                if time.monotonic() - last_commit > 1.0:
                    await self.commit(consumer)
                    last_commit = time.monotonic()
            await self.commit(consumer)
        finally:
            await consumer.stop()

    async def commit(self, consumer: Consumer) -> None:
        try:
            offsets = {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}
        except KafkaError:
            return
        self.rec.record("invoke", "commit-offsets", offsets=offsets, group=self.group)
        try:
            await consumer.commit({TopicPartition(self.args.topic, p): o for p, o in offsets.items()})
        except KafkaError as exc:
            self.rec.record("info", "commit-offsets", offsets=offsets, group=self.group, error=repr(exc))
        else:
            self.rec.record("ok", "commit-offsets", offsets=offsets, group=self.group)


async def run_async(args: argparse.Namespace, rec: Recorder) -> None:
    kinds = {"producer": IdempotentProducer, "txn": TransactionalProducer, "consumer": GroupConsumer}
    client = kinds[args.role](args, rec)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, client.stopping.set)
    await client.run()  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=ROLES, required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--process", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--own", default="", help="partitions a txn client writes, comma-separated")
    parser.add_argument("--history", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.role in ("txn", "ck-txn") and not args.own:
        parser.error(f"--role {args.role} needs --own")
    rec = Recorder.open(args.history, args.process, args.client)
    try:
        if args.role.startswith("ck-"):
            from tools.anomaly import confluent_clients

            run = (
                confluent_clients.run_idempotent
                if args.role == "ck-producer"
                else confluent_clients.run_transactional
            )
            run(args, rec)
        else:
            asyncio.run(run_async(args, rec))
    finally:
        rec.close()


if __name__ == "__main__":
    main()
