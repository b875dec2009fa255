"""The main demo: the SDK producing to the embedded reference broker, and reading it back.

    python examples/quickstart.py [--records 1000]

1. Starts the reference broker as a subprocess (``python -m reference_broker``) on a free
   loopback port with a temporary data directory.
2. Produces keyed records with headers through ``sdk.Producer``: idempotent, acks=all,
   zstd-compressed batches, the Java client's murmur2 partitioner.
3. Restarts the broker (a clean shutdown and recovery of the log from disk).
4. Reads the topic back with ``sdk.Consumer`` in a consumer group (committing as it goes), and
   checks that every record came back once, in order, with its key, value and headers.
5. Copies the topic, upper-cased, exactly once: a read_committed consumer and a transactional
   producer that commits the copy together with the consumed offsets; then aborts a second
   transaction, and checks that a read_committed reader sees the copy and nothing aborted.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time

from reference_broker.testing import BrokerProcess
from sdk import Consumer, OffsetAndMetadata, Producer, TopicPartition

TOPIC = "quickstart"
COPY_TOPIC = "quickstart-upper"
PARTITIONS = 3


async def produce(bootstrap: str, count: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """Send ``count`` records; return what each partition should hold, in order."""
    sent: dict[int, list[tuple[bytes, bytes]]] = collections.defaultdict(list)
    async with Producer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="zstd",
        linger_ms=5,
    ) as producer:
        futures = []
        for i in range(count):
            key = f"user-{i % 17}".encode()
            value = f"event {i}".encode()
            fut = await producer.send(TOPIC, value, key=key, headers=[("source", b"quickstart")])
            futures.append((key, value, fut))
        for key, value, fut in futures:
            meta = await fut
            sent[meta.partition].append((key, value))
    return sent


async def read_back(bootstrap: str) -> dict[int, list[tuple[bytes, bytes, int]]]:
    """Read the topic from the start as a consumer group, committing what was read."""
    got: dict[int, list[tuple[bytes, bytes, int]]] = collections.defaultdict(list)
    async with Consumer(
        bootstrap_servers=bootstrap, group_id="quickstart-readers", auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe([TOPIC])
        ends = await end_offsets_of(consumer, TOPIC)
        while await behind(consumer, ends):
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                got[tp.partition].extend((r.key, r.value, len(r.headers)) for r in records)
            await consumer.commit()
    return got


async def end_offsets_of(consumer: Consumer, topic: str) -> dict[TopicPartition, int]:
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return await consumer.end_offsets(partitions)


async def behind(consumer: Consumer, ends: dict[TopicPartition, int]) -> bool:
    """Whether ``consumer`` has yet to read up to ``ends`` (or to be handed all their partitions)."""
    if not set(ends) <= consumer.assignment():
        return True
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return True
    return False


async def copy_exactly_once(bootstrap: str) -> tuple[int, int]:
    """Copy the topic upper-cased to COPY_TOPIC in one transaction with the consumed offsets, then
    send one more record in a transaction that is aborted; a read_committed reader sees the copy
    and not the aborted record. Returns (records copied, records a read_committed reader sees)."""
    copied = 0
    async with (
        Consumer(
            bootstrap_servers=bootstrap,
            group_id="quickstart-copier",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
        ) as consumer,
        Producer(bootstrap_servers=bootstrap, transactional_id="quickstart-copier") as producer,
    ):
        consumer.subscribe([TOPIC])
        ends = await end_offsets_of(consumer, TOPIC)
        async with producer.transaction():
            while await behind(consumer, ends):
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    for r in records:
                        await producer.send(COPY_TOPIC, (r.value or b"").upper(), key=r.key)
                        copied += 1
            offsets = {tp: OffsetAndMetadata(await consumer.position(tp), "") for tp in ends}
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        await producer.begin_transaction()
        await producer.send(COPY_TOPIC, b"never visible")
        await producer.abort_transaction()
    visible = 0
    async with Consumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    ) as reader:
        ends = await end_offsets_of(reader, COPY_TOPIC)  # read_committed: the last stable offsets
        reader.assign(list(ends))
        while await behind(reader, ends):
            for records in (await reader.getmany(timeout_ms=1000)).values():
                visible += sum(1 for r in records if r.value != b"never visible")
                assert all(r.value != b"never visible" for r in records), "an aborted record was read"
    return copied, visible


def main() -> int:
    parser = argparse.ArgumentParser(description="SDK + reference broker demo")
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args()

    with BrokerProcess(config={"num.partitions": PARTITIONS}) as broker:
        print(f"reference broker listening on {broker.bootstrap} (data in a temporary directory)")
        start = time.perf_counter()
        sent = asyncio.run(produce(broker.bootstrap, args.records))
        elapsed = time.perf_counter() - start
        print(f"produced {args.records} records in {elapsed:.2f}s (idempotent, acks=all, zstd)")
        for partition in sorted(sent):
            print(f"  partition {partition}: {len(sent[partition])} records")

        broker.restart()
        print("broker restarted: the log was closed cleanly and reopened from disk")

        got = asyncio.run(read_back(broker.bootstrap))
        copied, visible = asyncio.run(copy_exactly_once(broker.bootstrap))
    ok = True
    for partition in range(PARTITIONS):
        expected = sent.get(partition, [])
        actual = [(k, v) for k, v, _ in got.get(partition, [])]
        headers_ok = all(n == 1 for _, _, n in got.get(partition, []))
        same = actual == expected and headers_ok
        ok &= same
        print(f"  partition {partition}: read {len(actual)} records back, "
              f"{'same records, same order' if same else 'MISMATCH'}")
    copy_ok = copied == visible == args.records
    ok &= copy_ok
    print(f"copied {copied} records upper-cased in one transaction with the group's offsets; "
          f"a read_committed reader sees {visible} of them and not the aborted record: "
          f"{'exactly once' if copy_ok else 'MISMATCH'}")
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
