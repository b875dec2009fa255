"""Lazy per-record futures: RecordFuture behaves as an asyncio future, DeliveryFuture as a
thread-safe one, and both are resolved by their batch in one step (no broker needed)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata, PartitionMetadata, TopicMetadata
from sdk.errors import NotLeaderOrFollowerError
from sdk.producer.accumulator import RecordAccumulator
from sdk.producer.batch import ProducerBatch
from sdk.producer.futures import RecordFuture
from sdk.producer.record_metadata import LOG_APPEND_TIME, RecordMetadata
from sdk.records import Compression, RecordBatch, RecordBatchBuilder
from sdk.sync import DeliveryFuture


def _batch(loop: asyncio.AbstractEventLoop | None, n: int, partition: int = 2) -> tuple[ProducerBatch, list]:
    """A batch of ``n`` records, each with a RecordFuture, as Producer.send builds them."""
    batch = ProducerBatch("t", partition, RecordBatchBuilder(), 0.0, loop)
    futures = []
    for i in range(n):
        key = None if i % 2 else b"k%d" % i
        delta = batch.builder.append(1000 + i, key, b"v" * i)
        assert delta is not None
        future = RecordFuture(batch.outcome, delta, 1000 + i, -1 if key is None else len(key), i)
        batch.futures.append(future)
        futures.append(future)
    return batch, futures


def _accumulator() -> RecordAccumulator:
    """An accumulator outside any loop (as the sync facade's futures are made) for topic "t"."""
    cluster = ClusterMetadata()
    cluster.topics["t"] = TopicMetadata("t", {0: PartitionMetadata("t", 0, 1, 0, (1,), (1,), (), None)})
    return RecordAccumulator(
        batch_size=16384,
        linger_ms=5,
        compression=Compression.NONE,
        buffer_memory=100_000,
        delivery_timeout_ms=120_000,
        retry_backoff=ExponentialBackoff(100, 1000),
        cluster=cluster,
    )


async def test_a_batch_resolves_all_its_futures_at_once() -> None:
    batch, futures = _batch(asyncio.get_running_loop(), 5)
    assert not any(f.done() for f in futures)
    with pytest.raises(asyncio.InvalidStateError):
        futures[0].result()
    batch.complete(100, -1, 7, None)
    assert all(f.done() and not f.cancelled() and f.exception() is None for f in futures)
    metadata = [await f for f in futures]
    assert metadata[3] == RecordMetadata("t", 2, 103, 1003, 0, 7, -1, 3)
    assert metadata[0].serialized_key_size == 2
    assert [m.offset for m in metadata] == [100, 101, 102, 103, 104]
    assert futures[1].result() == metadata[1]


async def test_log_append_time_and_unknown_offsets() -> None:
    batch, futures = _batch(asyncio.get_running_loop(), 2)
    batch.complete(-1, 555, -1, None)
    first = futures[0].result()
    assert (first.offset, first.timestamp, first.timestamp_type) == (-1, 555, LOG_APPEND_TIME)


async def test_failures_reach_every_future_with_a_stable_traceback() -> None:
    batch, futures = _batch(asyncio.get_running_loop(), 3)
    error = NotLeaderOrFollowerError("gone")
    batch.fail(error, None)
    for future in futures:
        assert future.exception() is error
        with pytest.raises(NotLeaderOrFollowerError):
            await future
    depths = []
    for _ in range(3):
        with pytest.raises(NotLeaderOrFollowerError):
            futures[0].result()
        depths.append(len(_frames(error)))
    assert depths[0] == depths[1] == depths[2]  # re-raising does not grow one traceback


def _frames(error: BaseException) -> list:
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


async def test_asyncio_machinery_accepts_record_futures() -> None:
    loop = asyncio.get_running_loop()
    batch, futures = _batch(loop, 4)
    assert asyncio.isfuture(futures[0]) and futures[0].get_loop() is loop
    gathered = asyncio.ensure_future(asyncio.gather(*futures))
    waited = asyncio.create_task(asyncio.wait(futures[:2]))
    shielded = asyncio.shield(futures[2])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(futures[3], 0.01)  # gives up: cancels the record's future
    assert futures[3].cancelled()
    loop.call_later(0.01, batch.complete, 10, -1, 0, None)
    with pytest.raises(asyncio.CancelledError):
        await gathered  # one child was cancelled
    done, pending = await waited
    assert len(done) == 2 and not pending
    assert (await shielded).offset == 12
    assert [f.result().offset for f in futures[:3]] == [10, 11, 12]
    assert "finished" in repr(futures[0]) and "cancelled" in repr(futures[3])


async def test_callbacks_run_on_the_loop_in_their_context() -> None:
    batch, futures = _batch(asyncio.get_running_loop(), 3)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")
    seen: list[tuple[int, str]] = []

    def callback(future: RecordFuture) -> None:
        seen.append((future.result().offset, var.get()))

    var.set("mine")
    futures[0].add_done_callback(callback)
    futures[1].add_done_callback(callback)
    futures[1].add_done_callback(callback)
    assert futures[1].remove_done_callback(callback) == 2
    futures[1].add_done_callback(callback)  # registered again after all were removed: runs once
    futures[2].add_done_callback(callback, context=contextvars.Context())
    batch.complete(50, -1, 0, None)
    assert seen == []  # scheduled, not called inline
    await asyncio.sleep(0)
    assert sorted(seen) == [(50, "mine"), (51, "mine"), (52, "none")]
    futures[0].add_done_callback(callback)  # already done: scheduled at once
    await asyncio.sleep(0)
    assert seen[-1] == (50, "mine")


async def test_cancel_stops_waiting_but_not_the_batch() -> None:
    batch, futures = _batch(asyncio.get_running_loop(), 2)
    waiter = asyncio.create_task(_await(futures[0]))
    await asyncio.sleep(0)
    waiter.cancel()  # cancelling the awaiting task cancels the future, as with asyncio futures
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert futures[0].cancelled() and not futures[1].done()
    assert not futures[0].cancel()
    batch.complete(7, -1, 0, None)
    assert futures[0].cancelled()
    assert futures[1].result().offset == 8
    with pytest.raises(asyncio.CancelledError):
        futures[0].result()


async def _await(future: RecordFuture) -> RecordMetadata:
    return await future


async def test_split_moves_lazy_futures_and_their_waiters() -> None:
    loop = asyncio.get_running_loop()
    batch, futures = _batch(loop, 6)
    batch.close()
    batch.set_producer_state(1, 0, 40)
    waiter = asyncio.ensure_future(asyncio.gather(futures[1], futures[4]))
    await asyncio.sleep(0)
    futures[5].cancel()
    first, second = batch.split()
    assert [len(h.futures) for h in (first, second)] == [3, 3]
    assert [r.value for r in RecordBatch(second.close())] == [b"v" * 3, b"v" * 4, b"v" * 5]
    second.complete(20, -1, 0, None)
    assert futures[4].result().offset == 21 and not futures[1].done()
    first.complete(10, -1, 0, None)
    assert [m.offset for m in await waiter] == [11, 21]
    assert futures[5].cancelled()
    assert [f.result().offset for f in futures[:5]] == [10, 11, 12, 20, 21]


def test_delivery_future_resolved_by_its_batch_wakes_waiting_threads() -> None:
    accumulator = _accumulator()
    futures = [DeliveryFuture() for _ in range(3)]
    called: list[tuple[str, int]] = []
    futures[2].add_done_callback(
        lambda f: called.append((threading.current_thread().name, f.result().offset))
    )
    for future in futures:  # what the loop thread's pump does
        assert accumulator.try_append("t", 0, None, b"x", None, 1000, future) is future
    batch = accumulator.open["t"][0]
    results: list[object] = []
    waiting = threading.Thread(target=lambda: results.append(futures[1].get(5)))
    waiting.start()
    time.sleep(0.05)
    assert not futures[1].done() and not results
    completing = threading.Thread(target=batch.complete, args=(30, -1, 0, None), name="completer")
    completing.start()
    completing.join()
    waiting.join(5)
    assert [r.offset for r in results] == [31]  # type: ignore[attr-defined]
    assert called == [("completer", 32)]
    assert futures[0].result(0).offset == 30 and futures[0].exception(0) is None
    assert not futures[0].cancel() and "finished" in repr(futures[0])


def test_delivery_future_set_directly_cancelled_or_timed_out() -> None:
    direct = DeliveryFuture()
    direct.set_result("batch metadata")
    assert direct.get(0) == "batch metadata"
    failed = DeliveryFuture()
    failed.set_exception(ValueError("bad"))
    assert isinstance(failed.exception(0), ValueError)
    pending = DeliveryFuture()
    with pytest.raises(Exception, match="no acknowledgement"):
        pending.get(0.01)
    assert pending.cancel() and pending.cancelled() and "cancelled" in repr(pending)
    accumulator = _accumulator()
    accumulator.try_append("t", 0, None, b"x", None, 1, pending)
    batch = accumulator.open["t"][0]
    batch.fail(ValueError("late"), None)
    assert pending.cancelled()  # cancelled first: the batch's outcome does not change that
