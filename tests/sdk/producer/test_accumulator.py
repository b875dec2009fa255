"""RecordAccumulator on its own: batching, readiness, drain limits, memory bound, expiry, and the
sequence order of retries with a TransactionManager."""

from __future__ import annotations

import asyncio

import pytest

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata
from sdk.errors import BufferExhaustedError, NotLeaderOrFollowerError
from sdk.producer.accumulator import RecordAccumulator, now_ms
from sdk.producer.batch import BatchSink, ProducerBatch
from sdk.producer.futures import RecordFuture
from sdk.producer.record_metadata import OffsetRange
from sdk.producer.transaction_manager import TransactionManager
from sdk.protocol import messages
from sdk.records import Compression, RecordBatch

MR = messages.MetadataResponse


def _cluster(leaders: dict[int, int]) -> ClusterMetadata:
    cluster = ClusterMetadata()
    cluster.update(
        MR(
            brokers=[MR.MetadataResponseBroker(node_id=n, host="h", port=n) for n in set(leaders.values())],
            topics=[
                MR.MetadataResponseTopic(
                    name="t",
                    partitions=[
                        MR.MetadataResponseTopic.MetadataResponsePartition(
                            partition_index=p, leader_id=leader
                        )
                        for p, leader in leaders.items()
                    ],
                )
            ],
        )
    )
    return cluster


def _accumulator(**overrides) -> RecordAccumulator:
    options = dict(
        batch_size=1000,
        linger_ms=50,
        compression=Compression.NONE,
        buffer_memory=100_000,
        delivery_timeout_ms=1000,
        retry_backoff=ExponentialBackoff(100, 1000, jitter=0),
        cluster=_cluster({0: 1, 1: 1, 2: 1}),
    )
    options.update(overrides)
    return RecordAccumulator(**options)


def test_batches_fill_to_batch_size_then_a_new_one_starts():
    acc = _accumulator()
    filled = []
    for _ in range(20):
        acc.try_append("t", 0, None, b"x" * 100, None, 1, RecordFuture.detached())
        filled.append(acc.filled)
        acc.filled = False
    dq = acc._batches["t"][0]
    assert len(dq) == 3
    assert all(b.builder.estimated_size() <= 1000 for b in dq)
    assert filled.count(True) == 2
    assert acc.memory_used == 20 * 121
    assert dq[0].full and not dq[-1].full


def test_ready_waits_for_linger_unless_full_or_flushing():
    acc = _accumulator()
    cluster = _cluster({0: 1, 1: 2})
    acc.try_append("t", 0, None, b"x", None, 1, RecordFuture.detached())
    now = now_ms()
    ready, delay, unknown = acc.ready(cluster, now)
    assert ready == {} and 0 < delay <= 50 and not unknown
    ready, _, _ = acc.ready(cluster, now + 60)
    assert set(ready) == {1}
    acc.begin_flush()
    acc.try_append("t", 1, None, b"x", None, 1, RecordFuture.detached())
    ready, _, _ = acc.ready(cluster, now)
    assert set(ready) == {1, 2}
    acc.end_flush()


def test_unknown_leader_is_reported():
    acc = _accumulator(linger_ms=0)
    acc.try_append("t", 0, None, b"x", None, 1, RecordFuture.detached())
    ready, _, unknown = acc.ready(_cluster({0: -1}), now_ms())
    assert ready == {} and unknown == {"t"}


def test_drain_takes_one_batch_per_partition_within_max_request_size():
    acc = _accumulator(linger_ms=0)
    cluster = _cluster({0: 1, 1: 1, 2: 1})
    for partition in range(3):
        for _ in range(12):
            acc.try_append("t", partition, None, b"x" * 100, None, 1, RecordFuture.detached())
    ready, _, _ = acc.ready(cluster, now_ms())
    batches = acc.drain(1, ready[1], 2500, now_ms(), None)
    assert len(batches) == 2  # two ~1 KB batches fit in 2.5 KB, the third does not
    assert len({b.partition for b in batches}) == 2
    batches = acc.drain(1, ready[1], 100, now_ms(), None)
    assert len(batches) == 1  # always at least one, even over the limit
    for batch in batches:
        RecordBatch(batch.payload).validate()


async def test_memory_bound_blocks_then_fails():
    acc = _accumulator(buffer_memory=300)
    assert acc.try_reserve(200)
    assert not acc.try_reserve(200)
    with pytest.raises(BufferExhaustedError):
        await acc.reserve(200, 50)
    waiter = asyncio.create_task(acc.reserve(200, 1000))
    await asyncio.sleep(0.01)
    assert not acc.try_reserve(10)  # queued waiters go first
    acc.release(200)
    await waiter
    assert acc.memory_used == 200


def test_expired_batches_and_reenqueue_order():
    acc = _accumulator(linger_ms=0)
    for _ in range(5):  # two per batch: three batches
        acc.try_append("t", 0, None, b"x" * 400, None, 1, RecordFuture.detached())
    dq = acc._batches["t"][0]
    first, second = dq.popleft(), dq.popleft()
    first.base_sequence, second.base_sequence = 0, 5
    first.producer_epoch = second.producer_epoch = 0
    acc.reenqueue(second, now_ms())
    acc.reenqueue(first, now_ms())
    assert list(dq)[:2] == [first, second]
    expired = acc.expired_batches(now_ms() + 5000)
    assert len(expired) == 3


def test_batches_complete_with_metadata_and_give_memory_back():
    acc = _accumulator(linger_ms=0)
    sinks = [RecordFuture.detached() for _ in range(3)]
    for i, sink in enumerate(sinks):
        acc.try_append("t", 0, b"k", b"v" * i, None, 1000 + i, sink)
    batch = acc._batches["t"][0].popleft()
    batch.close()
    acc.done(batch)
    batch.complete(40, -1, 0, None)
    assert [s.result().offset for s in sinks] == [40, 41, 42]
    assert [s.result().timestamp for s in sinks] == [1000, 1001, 1002]
    assert sinks[2].result().serialized_value_size == 2
    assert acc.memory_used == 0


def test_split_keeps_records_sinks_runs_and_sequences():
    acc = _accumulator(linger_ms=0, batch_size=100_000)
    sinks = [RecordFuture.detached() for _ in range(3)]
    for i, sink in enumerate(sinks):
        acc.try_append("t", 0, b"k%d" % i, b"v%d" % i, [("h", b"x")], 1000 + i, sink)
    many = BatchSink(FakeFuture(), "t")
    for i in range(5):  # one run: consecutive records of one send_many call in one batch
        assert acc.try_append("t", 0, None, b"m%d" % i, None, 2000, many) is many
    assert acc._batches["t"][0][0].runs == [[many, 3, 5]] and many.pending_runs == 1
    many.count = 5
    many.seal()
    batch = acc._batches["t"][0].popleft()
    batch.set_producer_state(9, 1, 100)
    batch.reserved = 240
    first, second = acc.split_and_reenqueue(batch)
    assert (first.record_count, second.record_count) == (4, 4)
    assert (first.base_sequence, second.base_sequence) == (100, 104)
    assert first.reserved + second.reserved == 240
    assert [r.value for r in RecordBatch(first.close())] == [b"v0", b"v1", b"v2", b"m0"]
    assert next(iter(RecordBatch(first.close()))).headers == [("h", b"x")]
    assert [r.value for r in RecordBatch(second.close())] == [b"m1", b"m2", b"m3", b"m4"]
    assert list(acc._batches["t"][0])[:2] == [first, second]
    first.complete(10, -1, 0, None)
    assert [s.result().offset for s in sinks] == [10, 11, 12]
    assert not many.future.done()
    second.complete(14, -1, 0, None)
    assert many.future.result().ranges == (OffsetRange(0, 13, 1), OffsetRange(0, 14, 4))


class FakeFuture:
    """Just enough of a future for BatchSink."""

    def __init__(self):
        self._done, self._value, self._error = False, None, None

    def done(self):
        return self._done

    def set_result(self, value):
        self._done, self._value = True, value

    def set_exception(self, error):
        self._done, self._error = True, error

    def result(self):
        if self._error is not None:
            raise self._error
        return self._value


def _idempotent() -> TransactionManager:
    txn = TransactionManager()
    txn.begin_init(True)
    txn.set_producer_id(5, 0)
    return txn


def _drain_one(acc: RecordAccumulator, txn: TransactionManager, now: float) -> list[ProducerBatch]:
    ready, _, _ = acc.ready(_cluster({0: 1}), now)
    return acc.drain(1, ready.get(1, []), 1_000_000, now, txn)


def _establish(acc: RecordAccumulator, txn: TransactionManager) -> None:
    """Partition 0's leader acknowledged a first batch (one record, sequence 0): it holds the
    producer's state, so the partition pipelines and the tests' batches start at sequence 1."""
    acc.try_append("t", 0, None, b"new", None, 1, RecordFuture.detached())
    (opening,) = _drain_one(acc, txn, now_ms())
    acc.unmute(opening)
    txn.on_success(opening)


def test_a_partition_with_a_retry_pending_drains_only_its_next_sequence():
    acc = _accumulator(linger_ms=0, retry_backoff=ExponentialBackoff(10, 10, jitter=0))
    txn = _idempotent()
    _establish(acc, txn)
    now = now_ms()
    sent = []
    for _ in range(3):  # one batch per record (400-byte records, 1000-byte batches, sealed at drain)
        acc.try_append("t", 0, None, b"x" * 400, None, 1, RecordFuture.detached())
        sent += _drain_one(acc, txn, now_ms())
    first, second, third = sent
    assert [b.base_sequence for b in sent] == [1, 2, 3]
    # The first and third come back NOT_LEADER_OR_FOLLOWER (the second is still on the wire);
    # they go back in sequence order whatever order their answers came in.
    for batch in (third, first):
        assert txn.can_retry(batch, NotLeaderOrFollowerError())
        txn.retry_pending(batch)
        acc.reenqueue(batch, now)
    acc.try_append("t", 0, None, b"new", None, 1, RecordFuture.detached())
    assert [b.base_sequence for b in acc._batches["t"][0]] == [1, 3, -1]
    later = now_ms() + 20
    assert _drain_one(acc, txn, later) == [first]
    assert _drain_one(acc, txn, later) == []  # the third is not next, the new one waits
    txn.on_success(first)
    assert _drain_one(acc, txn, later) == []  # the second is still unacknowledged
    txn.on_success(second)
    assert _drain_one(acc, txn, later) == [third]
    assert _drain_one(acc, txn, later) == []  # one at a time until all are acknowledged
    txn.on_success(third)
    assert not txn.is_retrying("t", 0)
    (fresh,) = _drain_one(acc, txn, later)
    assert fresh.base_sequence == 4


def test_reenqueue_puts_retries_before_new_batches_in_sequence_order():
    acc = _accumulator(linger_ms=0)
    txn = _idempotent()
    _establish(acc, txn)
    now = now_ms()
    sent = []
    for _ in range(4):
        acc.try_append("t", 0, None, b"x" * 400, None, 1, RecordFuture.detached())
        sent += _drain_one(acc, txn, now_ms())
    acc.try_append("t", 0, None, b"new", None, 1, RecordFuture.detached())
    for index in (2, 0, 3, 1):
        acc.reenqueue(sent[index], now)
    assert list(acc._batches["t"][0])[:4] == sent
    assert not acc._batches["t"][0][4].has_sequence


def test_a_new_leader_gets_nothing_until_the_old_one_answered():
    # A batch is on the wire to broker 1 when metadata moves the partition to broker 2: the next
    # batch waits, or broker 2 could write it before broker 1 refuses the first one.
    acc = _accumulator(linger_ms=0)
    txn = _idempotent()
    _establish(acc, txn)
    acc.try_append("t", 0, None, b"x" * 400, None, 1, RecordFuture.detached())
    (first,) = _drain_one(acc, txn, now_ms())
    acc.try_append("t", 0, None, b"y" * 400, None, 1, RecordFuture.detached())
    moved = _cluster({0: 2})
    ready, _, _ = acc.ready(moved, now_ms())
    assert acc.drain(2, ready[2], 1_000_000, now_ms(), txn) == []
    acc.unmute(first)  # broker 1 answered
    ready, _, _ = acc.ready(moved, now_ms())
    (second,) = acc.drain(2, ready[2], 1_000_000, now_ms(), txn)
    assert second.base_sequence == 2
