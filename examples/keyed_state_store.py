"""A keyed state store rebuilt from a compacted topic: the pattern behind Kafka Streams' state
stores and every "table" kept in Kafka.

    python examples/keyed_state_store.py --bootstrap 127.0.0.1:9092 --snapshot
    python examples/keyed_state_store.py --bootstrap 127.0.0.1:9092 --follow
    python examples/keyed_state_store.py       # embedded broker: writes profiles, then rebuilds them

The topic ``customer-profiles`` holds the newest profile of each customer (key: customer id,
value: JSON) and a tombstone (a record with no value) for each customer deleted. It is created
with ``cleanup.policy=compact``, so the broker's log cleaner keeps only the newest record of each
key (and drops tombstones after ``delete.retention.ms``): the topic stays about the size of the
table, however many updates it saw, and reading it from the beginning rebuilds the table.

At start the store reads every partition from its beginning to the end offsets it found when it
started (no consumer group: the whole table is needed, not a share of it); a tombstone removes
the key. ``--snapshot`` then prints the table as JSON and exits; ``--follow`` keeps applying
updates as they arrive until SIGTERM or SIGINT, printing the table's size after each batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from sdk import AdminClient, Consumer, Producer, TopicPartition
from sdk.admin.types import NewTopic
from sdk.errors import TopicAlreadyExistsError

PROFILES = "customer-profiles"
COMPACTED = {
    "cleanup.policy": "compact",
    # Small segments and an eager cleaner, so the demo compacts within seconds; production keeps
    # Kafka's defaults (1 GiB segments, a dirty ratio of 0.5).
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


async def ensure_topic(bootstrap: str, partitions: int) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        errors = await admin.create_topics([NewTopic(PROFILES, partitions, 1, topic_configs=COMPACTED)])
        error = errors[PROFILES]
        if error is not None and not isinstance(error, TopicAlreadyExistsError):
            raise error


class ProfileStore:
    """The table: customer id -> newest profile."""

    def __init__(self) -> None:
        self.profiles: dict[str, dict[str, object]] = {}
        self.records_read = 0

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        self.records_read += 1
        if key is None:
            return  # a record without a key has no place in a table
        if value is None:
            self.profiles.pop(key.decode(), None)
        else:
            self.profiles[key.decode()] = json.loads(value)


async def rebuild(consumer: Consumer, store: ProfileStore) -> list[TopicPartition]:
    """Read every partition from its beginning up to the end offsets of now."""
    ids = consumer.partitions_for_topic(PROFILES)
    for _ in range(100):  # None until the metadata of the topic has arrived
        if ids is not None:
            break
        await asyncio.sleep(0.1)
        ids = consumer.partitions_for_topic(PROFILES)
    if ids is None:
        raise SystemExit(f"topic {PROFILES} not found")
    partitions = [TopicPartition(PROFILES, p) for p in sorted(ids)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    ends = await consumer.end_offsets(partitions)
    while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            for record in records:
                store.apply(record.key, record.value)
    return partitions


async def run(bootstrap: str, follow: bool) -> dict[str, dict[str, object]]:
    store = ProfileStore()
    async with Consumer(bootstrap_servers=bootstrap, enable_auto_commit=False) as consumer:
        await rebuild(consumer, store)
        print(f"rebuilt {len(store.profiles)} profiles from {store.records_read} records", flush=True)
        if follow:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        store.apply(record.key, record.value)
                if batches:
                    print(f"{len(store.profiles)} profiles", flush=True)
    return store.profiles


async def write_demo_profiles(bootstrap: str) -> None:
    """Many updates per customer and a few deletions, as an application writes them."""
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for version in range(50):
            for customer in range(100):
                profile = {"customer": customer, "version": version, "tier": ["free", "pro"][version % 2]}
                await producer.send(PROFILES, json.dumps(profile).encode(), key=b"customer-%d" % customer)
        for customer in range(0, 100, 10):
            await producer.send(PROFILES, None, key=b"customer-%d" % customer)
        await producer.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port; without it an embedded broker is started")
    parser.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--snapshot", action="store_true", help="print the table as JSON and exit")
    mode.add_argument("--follow", action="store_true", help="keep applying updates until SIGTERM")
    args = parser.parse_args()
    if args.bootstrap:
        asyncio.run(ensure_topic(args.bootstrap, args.partitions))
        profiles = asyncio.run(run(args.bootstrap, args.follow))
    else:
        from reference_broker.testing import BrokerProcess

        with BrokerProcess(config={"log.cleaner.backoff.ms": 200}) as broker:
            print(f"embedded reference broker on {broker.bootstrap}", flush=True)
            asyncio.run(ensure_topic(broker.bootstrap, args.partitions))
            asyncio.run(write_demo_profiles(broker.bootstrap))
            profiles = asyncio.run(run(broker.bootstrap, args.follow))
    if args.snapshot or not args.bootstrap:
        print(json.dumps(profiles, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
