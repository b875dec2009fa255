"""sdk.sync.Producer under back-pressure: a full ``buffer_memory`` blocks ``send`` in the caller's
thread until room frees, and ``close`` releases a blocked caller at once with ProducerClosedError.

The broker process is paused (SIGSTOP) so that nothing is acknowledged and memory stays full,
then resumed (SIGCONT): a real stall, not a simulated one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sdk.errors import ProducerClosedError
from sdk.sync import Producer

VALUE = b"x" * 200


@pytest.fixture
def paused_broker(broker_factory: Any) -> Iterator[Any]:
    broker = broker_factory()
    yield broker
    os.kill(broker.pid, signal.SIGCONT)  # never leave a stopped process behind


def _small_producer(bootstrap: str, topic: str) -> Producer:
    producer = Producer(
        bootstrap_servers=bootstrap, buffer_memory=4096, batch_size=1024, linger_ms=0, max_block_ms=20000
    )
    producer.HANDOVER_LIMIT = 2  # type: ignore[misc]  # a short hand-over queue: the caller feels the wait
    producer.send_and_wait(topic, b"warm-up", timeout=10)  # topic created, metadata cached
    return producer


def _sender(producer: Producer, topic: str, count: int, outcome: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        futures = []
        try:
            for _ in range(count):
                futures.append(producer.send(topic, VALUE))
        except BaseException as exc:
            outcome["error"] = exc
            outcome["error_at"] = time.monotonic()
        outcome["futures"] = futures

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_send_blocks_while_memory_is_full_and_resumes_when_room_frees(paused_broker, topic_name):
    producer = _small_producer(paused_broker.bootstrap, topic_name)
    try:
        os.kill(paused_broker.pid, signal.SIGSTOP)
        outcome: dict[str, Any] = {}
        thread = _sender(producer, topic_name, 100, outcome)  # 100 * ~221 bytes >> 4096
        thread.join(1.0)
        assert thread.is_alive(), "send should block while buffer_memory is full"
        os.kill(paused_broker.pid, signal.SIGCONT)
        thread.join(20)
        assert not thread.is_alive()
        assert "error" not in outcome
        offsets = [f.get(20).offset for f in outcome["futures"]]
        assert offsets == sorted(offsets) and len(set(offsets)) == 100
    finally:
        os.kill(paused_broker.pid, signal.SIGCONT)
        producer.close()


def test_close_releases_a_blocked_caller_with_producer_closed(paused_broker, topic_name):
    producer = _small_producer(paused_broker.bootstrap, topic_name)
    closer = None
    try:
        os.kill(paused_broker.pid, signal.SIGSTOP)
        outcome: dict[str, Any] = {}
        thread = _sender(producer, topic_name, 100, outcome)
        thread.join(1.0)
        assert thread.is_alive(), "send should block while buffer_memory is full"
        # close() waits to deliver what was handed over (the broker is still paused), in its own
        # thread; the blocked caller must not wait for that.
        closing_at = time.monotonic()
        closer = threading.Thread(target=producer.close, daemon=True)
        closer.start()
        thread.join(5)
        assert not thread.is_alive(), "a caller blocked in send must be released by close"
        assert isinstance(outcome["error"], ProducerClosedError)
        assert outcome["error_at"] - closing_at < 2
        with pytest.raises(ProducerClosedError):
            producer.send(topic_name, VALUE)
        os.kill(paused_broker.pid, signal.SIGCONT)
        closer.join(20)
        assert not closer.is_alive()
        # Records send() accepted before close began are delivered, none is left pending.
        accepted = outcome["futures"]
        assert accepted and all(f.done() for f in accepted)
        assert all(f.exception() is None for f in accepted)
    finally:
        os.kill(paused_broker.pid, signal.SIGCONT)
        if closer is not None:
            closer.join(20)
        producer.close()
