"""The producer's per-record fast path (``RecordAccumulator.try_append``): keyless records ride the
topic's sticky route (the DefaultPartitioner's sticky partition and its open batch) without asking
the partitioner or the metadata, and fall back to the general path the moment anything the route
assumed changes.

The unit tests drive a Producer wired to an in-memory cluster view and accumulator (no sender), so
they can change metadata, seal batches and exhaust memory between two sends; the end-to-end test
checks the records against a real broker.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import Producer
from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata, PartitionMetadata, TopicMetadata
from sdk.producer.accumulator import RECORD_OVERHEAD, RecordAccumulator
from sdk.producer.futures import RecordFuture
from sdk.records import Compression, RecordBatch

VALUE = b"v" * 100
SIZE = RECORD_OVERHEAD + len(VALUE)


def _topic(name: str, leaders: dict[int, int]) -> TopicMetadata:
    return TopicMetadata(
        name,
        {p: PartitionMetadata(name, p, leader, 0, (1,), (1,), (), None) for p, leader in leaders.items()},
    )


def _producer(**config: Any) -> tuple[Producer, RecordAccumulator, list[int]]:
    """A Producer in the running state with a 4-partition topic "t" and no network; the list
    collects the partitions the partitioner handed out for keyless records."""
    options = dict(bootstrap_servers="unused:1", batch_size=1000, buffer_memory=100_000)
    options.update(config)
    producer = Producer(**options)
    producer._loop = asyncio.get_running_loop()
    cluster = ClusterMetadata()
    cluster.topics["t"] = _topic("t", {p: 1 for p in range(4)})
    producer._cluster = cluster
    accumulator = RecordAccumulator(
        batch_size=producer.config.batch_size,
        linger_ms=5,
        compression=Compression.NONE,
        buffer_memory=producer.config.buffer_memory,
        delivery_timeout_ms=120_000,
        retry_backoff=ExponentialBackoff(100, 1000),
        cluster=cluster,
        partitioner=producer._partitioner,
    )
    producer._accumulator = accumulator
    producer._state, producer._accepting = "running", True
    asked: list[int] = []
    partitioner = producer._partitioner
    original = partitioner.partition_keyless

    def counting(*args: Any) -> int:
        asked.append(original(*args))
        return asked[-1]

    partitioner.partition_keyless = counting  # type: ignore[method-assign]
    return producer, accumulator, asked


def _records(accumulator: RecordAccumulator) -> dict[int, list[bytes | None]]:
    """Values per partition, in append order, across every batch."""
    out: dict[int, list[bytes | None]] = {}
    for partition, queue in accumulator._batches["t"].items():
        for batch in queue:
            out.setdefault(partition, []).extend(r.value for r in RecordBatch(batch.builder.build()))
    return out


async def test_keyless_records_ask_the_partitioner_once_per_batch() -> None:
    producer, accumulator, asked = _producer()
    futures = [await producer.send("t", b"%03d" % i + VALUE[3:]) for i in range(40)]
    assert all(isinstance(f, RecordFuture) for f in futures)
    # 1000-byte batches take 7 records of 121 bytes (plus framing); the sticky partition keeps
    # 1000 bytes' worth (9 records) before switching: the partitioner is asked when a batch or
    # a sticky stint ends, never for the records in between.
    assert 5 <= len(asked) <= 14
    sticky = producer._partitioner.sticky("t")  # type: ignore[attr-defined]
    route = accumulator._routes["t"]
    assert route.sticky is sticky and route.batch is accumulator.open["t"][sticky.partition]
    assert accumulator.memory_used == 40 * SIZE
    # Every record is where its future says, in send order per partition.
    sent = {i: f for i, f in enumerate(futures)}
    for partition, values in _records(accumulator).items():
        mine = [b"%03d" % i + VALUE[3:] for i, f in sent.items() if f._outcome.partition == partition]
        assert values == mine


async def test_sticky_accounting_matches_the_partitioner() -> None:
    producer, _, asked = _producer(batch_size=16384)
    for _ in range(10):
        await producer.send("t", VALUE)
    sticky = producer._partitioner.sticky("t")  # type: ignore[attr-defined]
    assert len(asked) == 1 and sticky.produced == 10 * SIZE and not sticky.used_up
    while not sticky.used_up:
        await producer.send("t", VALUE)
    assert sticky.produced >= 16384 > sticky.produced - SIZE  # used up by the record that crossed
    await producer.send("t", VALUE)
    assert len(asked) >= 2 and producer._partitioner.sticky("t") is not sticky  # switched


async def test_the_route_is_dropped_when_what_it_assumed_changes() -> None:
    producer, accumulator, asked = _producer(batch_size=16384)
    await producer.send("t", VALUE)
    route = accumulator._routes["t"]
    await producer.send("t", VALUE)
    assert len(asked) == 1
    # New metadata (same layout): one trip through the partitioner, then the route again.
    producer._cluster.version += 1
    await producer.send("t", VALUE)
    await producer.send("t", VALUE)
    assert len(asked) == 2 and route.version == producer._cluster.version
    # The batch was drained by the sender: the next record opens a new one.
    batch = route.batch
    accumulator._seal(batch)
    await producer.send("t", VALUE)
    assert len(asked) == 3 and route.batch is not batch and batch.record_count == 4
    # The sticky partition lost its leader: the partitioner moves away from it.
    gone = route.sticky.partition
    producer._cluster.topics["t"] = _topic("t", {p: (-1 if p == gone else 1) for p in range(4)})
    producer._cluster.version += 1
    future = await producer.send("t", VALUE)
    assert future._outcome.partition != gone and asked[-1] != gone


@pytest.mark.parametrize(
    ("kwargs", "asks"),
    [
        ({"key": b"k"}, 0),  # keyed: murmur2, never partition_keyless
        ({"partition": 3}, 0),  # explicit partition
        ({"headers": [("h", b"1")]}, 0),  # keyless with headers: the route takes it too
        ({"value": bytearray(b"ba")}, 0),  # converted to bytes first, then the route takes it
    ],
)
async def test_other_records_take_the_general_path(kwargs: dict[str, Any], asks: int) -> None:
    producer, accumulator, asked = _producer(batch_size=16384)
    await producer.send("t", VALUE)
    before = len(asked)
    value = kwargs.pop("value", VALUE)
    future = await producer.send("t", value, **kwargs)
    assert len(asked) == before + asks
    assert not future.done()
    if "partition" in kwargs:
        assert future._outcome.partition == 3
    values = [v for vs in _records(accumulator).values() for v in vs]
    assert sorted(values) == sorted([VALUE, bytes(value)])


async def test_no_memory_no_fast_path() -> None:
    producer, accumulator, _ = _producer(batch_size=16384, buffer_memory=3 * SIZE)
    for _ in range(3):
        await producer.send("t", VALUE)
    sticky = producer._partitioner.sticky("t")  # type: ignore[attr-defined]
    batch = accumulator._routes["t"].batch
    assert accumulator.memory_used == 3 * SIZE == sticky.produced
    # Full: try_append declines without a trace (send would now wait for memory in
    # _append_waiting), for the route and for a partition's open batch alike.
    assert accumulator.try_append("t", None, None, VALUE, None, None, None) is None
    assert accumulator.try_append("t", sticky.partition, b"k", VALUE, None, None, None) is None
    assert accumulator.memory_used == 3 * SIZE == sticky.produced
    assert batch.record_count == 3 and len(batch.futures) == 3


async def test_records_for_a_given_partition_join_its_open_batch_directly() -> None:
    """The explicit-partition fast path: once a partition has an open batch, records sent to it
    (keyed or not) are appended there without asking the metadata, with the same bookkeeping."""
    producer, accumulator, _ = _producer(batch_size=16384)
    calls: list[str] = []

    class CountingTopics(dict):
        def get(self, name: Any, default: Any = None) -> Any:
            calls.append(name)
            return super().get(name, default)

    accumulator.cluster.topics = CountingTopics(accumulator.cluster.topics)
    first = await producer.send("t", VALUE, partition=2)
    assert len(calls) == 1  # opened the batch
    rest = [await producer.send("t", VALUE, key=b"k%d" % i if i % 2 else None, partition=2) for i in range(9)]
    assert len(calls) == 1  # all nine went straight into the open batch
    batch = accumulator.open["t"][2]
    assert batch.record_count == 10 and batch.futures == [first, *rest]
    assert accumulator.memory_used == batch.reserved == 10 * SIZE + sum(2 for i in range(9) if i % 2)
    assert [r.key for r in RecordBatch(batch.builder.build())] == [None] + [
        b"k%d" % i if i % 2 else None for i in range(9)
    ]
    # A sealed batch, a partition without a batch: the general path; headers change nothing.
    accumulator._seal(batch)
    await producer.send("t", VALUE, partition=2)
    await producer.send("t", VALUE, partition=1)
    await producer.send("t", VALUE, partition=1, headers=[("h", b"1")])
    assert len(calls) == 3


async def test_a_custom_partitioner_is_always_asked() -> None:
    chosen: list[int] = []

    def always_two(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        chosen.append(2)
        return 2

    producer, accumulator, _ = _producer(partitioner=always_two)
    for _ in range(5):
        await producer.send("t", VALUE)
    assert chosen == [2] * 5 and not accumulator._routes
    assert list(_records(accumulator)) == [2]


async def test_fast_path_records_round_trip(kafka, consume, topic_name) -> None:
    topic = await kafka.create_topic(topic_name)
    sent: list[tuple[bytes | None, bytes]] = []
    futures = []
    async with Producer(bootstrap_servers=kafka.bootstrap, batch_size=2000, linger_ms=1) as producer:
        for i in range(3000):
            key = b"key-%d" % (i % 5) if i % 50 == 7 else None
            value = b"%06d" % i + b"." * (i % 90)
            sent.append((key, value))
            futures.append(await producer.send(topic, value, key=key))
            if i % 700 == 0:
                await producer.send_many(topic, [(None, b"many-%d-%d" % (i, j)) for j in range(30)])
        metadata = await asyncio.gather(*futures)
    consumed = await consume(kafka.bootstrap, topic, expected=3000 + 5 * 30)
    by_position = {(r.partition, r.offset): r for r in consumed}
    for (key, value), md in zip(sent, metadata, strict=True):
        record = by_position[(md.partition, md.offset)]
        assert (record.key, record.value) == (key, value)
    assert len({md.partition for md in metadata}) == 4  # sticky switches spread the records


async def test_send_many_appends_one_run_per_batch_through_try_append() -> None:
    """``send_many`` records go through ``try_append`` a batch at a time: keyless records follow
    the sticky route (switching partitions as ``send`` would), keyed ones their key's partition,
    and each batch gets one run per stretch of the call, in order, with its memory counted."""
    producer, accumulator, asked = _producer()
    calls: list[Any] = []
    general = accumulator.try_append

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return general(*args, **kwargs)

    accumulator.try_append = counting  # type: ignore[method-assign]
    values = [b"%03d" % i + VALUE[3:] for i in range(40)]
    records: list[tuple[bytes | None, bytes]] = [(None, v) for v in values[:30]]
    records += [(b"k", v) for v in values[30:]]
    future = await producer.send_many("t", records)
    assert len(calls) < 20  # 30 keyless records in ~5 batches, then one call per keyed record
    sticky = producer._partitioner.sticky("t")  # type: ignore[attr-defined]
    assert accumulator.memory_used == 40 * SIZE + 10 * 1
    placed = _records(accumulator)
    keyed_partition = next(p for p, vs in placed.items() if values[-1] in vs)
    assert [v for v in placed[keyed_partition] if v in values[30:]] == values[30:]
    keyless = [v for p in sorted(placed) for v in placed[p] if v in values[:30]]
    assert sorted(keyless) == values[:30]
    for values_here in placed.values():
        assert values_here == sorted(values_here)  # call order kept within each partition
    runs = [run for dq in accumulator._batches["t"].values() for batch in dq for run in batch.runs]
    assert sum(run[2] for run in runs) == 40 and not future.done()
    assert len(asked) >= 4 and sticky is not None  # 30 x 121 bytes: several sticky stints
