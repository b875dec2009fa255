"""A consume-transform-produce application, run as its own process by the zombie fencing tests.

It is what a user writes with the SDK: a read_committed ``Consumer`` subscribed in a group and a
transactional ``Producer``; each batch of input records becomes one transaction holding the
transformed records and the consumer's offsets, sent with ``consumer.group_metadata()`` so the
group coordinator can refuse a member that is no longer in the group (KIP-447). A transaction
that fails abortably is aborted and the consumer rewinds to the group's committed offsets.

``--stall-until FILE`` makes the first transaction wait, after its records are sent and before
its offsets, until FILE exists: longer than ``max_poll_interval_ms``, so the group drops this
member meanwhile. The process reports what it does as JSON lines on stdout
(``started``, ``stalled``, ``committed``, ``aborted``, ``fenced``, ``stopped``) and runs until
``--stop-file`` exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from sdk import Consumer, Producer
from sdk.errors import FencedInstanceIdError, KafkaError, TransactionAbortableError

#: How long a stalled transaction waits for its resume file at most.
STALL_LIMIT_S = 120.0


def report(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "at": time.time(), **fields}), flush=True)


def transform(value: bytes | None) -> bytes:
    return b"out-" + (value or b"")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--max-poll-interval-ms", type=int, default=4000)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-records", type=int, default=10)
    parser.add_argument("--stall-until", type=Path, default=None)
    parser.add_argument("--stop-file", type=Path, required=True)
    return parser.parse_args(argv)


class App:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.consumer = Consumer(
            args.source,
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            group_instance_id=args.instance_id,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=args.assignor,
            max_poll_interval_ms=args.max_poll_interval_ms,
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            max_poll_records=args.max_poll_records,
            fetch_max_wait_ms=100,
            request_timeout_ms=10000,
        )
        self.producer = Producer(
            bootstrap_servers=args.bootstrap,
            transactional_id=args.transactional_id,
            request_timeout_ms=10000,
            max_block_ms=20000,
            transaction_timeout_ms=120000,
        )
        self.stall_pending = args.stall_until is not None

    async def run(self) -> None:
        await self.producer.start()
        await self.consumer.start()
        report("started")
        try:
            while not self.args.stop_file.exists():
                try:
                    batches = await self.consumer.getmany(timeout_ms=200)
                except FencedInstanceIdError as exc:
                    report("fenced", error=repr(exc))
                    return
                if batches:
                    await self.process(batches)
        finally:
            await self.producer.stop()
            await self.consumer.stop()
            report("stopped")

    async def process(self, batches: dict[Any, list[Any]]) -> None:
        producer = self.producer
        offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
        await producer.begin_transaction()
        try:
            for records in batches.values():
                for record in records:
                    await producer.send(self.args.target, transform(record.value), key=record.key)
            if self.stall_pending:
                self.stall_pending = False
                await self.stall()
            metadata = self.consumer.group_metadata()
            await producer.send_offsets_to_transaction(offsets, metadata)
            await producer.commit_transaction()
        except TransactionAbortableError as exc:
            cause = exc.__cause__
            report("aborted", error=type(exc).__name__, cause=type(cause).__name__, detail=repr(cause))
            await producer.abort_transaction()
            await self.rewind()
            return
        report(
            "committed",
            generation=metadata.generation_id,
            member_id=metadata.member_id,
            offsets={f"{tp.topic}-{tp.partition}": offset for tp, offset in offsets.items()},
        )

    async def stall(self) -> None:
        path = self.args.stall_until
        before = self.consumer.group_metadata()
        report("stalled", generation=before.generation_id, member_id=before.member_id)
        deadline = time.monotonic() + STALL_LIMIT_S
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear within {STALL_LIMIT_S} s")
            await asyncio.sleep(0.05)

    async def rewind(self) -> None:
        """Positions back to what the group committed: the aborted records are read again by
        whichever member owns their partitions after the next poll."""
        assigned = self.consumer.assignment()
        if not assigned:
            return
        try:
            found = await self.consumer.seek_to_committed(*assigned)
            missing = [tp for tp, offset in found.items() if offset is None]
            if missing:
                await self.consumer.seek_to_beginning(*missing)
        except (KafkaError, ValueError) as exc:
            # Partitions already taken from us: the next poll gives them up.
            report("rewind-skipped", error=repr(exc))


def main(argv: list[str]) -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    asyncio.run(App(parse_args(argv)).run())


if __name__ == "__main__":
    main(sys.argv[1:])
