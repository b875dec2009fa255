"""examples/order_service.py as its users run it: two instances share the group, one is stopped
with SIGTERM mid-stream, and every order is confirmed exactly once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerProcess
from sdk import TopicPartition
from sdk.sync import Consumer, Producer
from tests.examples.app_process import AppProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture
def broker3() -> Iterator[BrokerProcess]:
    with BrokerProcess(config={"num.partitions": 3}) as broker:
        yield broker


def feed(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            order = {"order_id": f"order-{i}", "items": [{"price": "2.50", "quantity": 2}]}
            producer.send("orders", json.dumps(order).encode(), key=f"order-{i}".encode())
        producer.flush()


def confirmed(*apps: AppProcess) -> list[str]:
    return [line.split()[1] for app in apps for line in app.lines if line.startswith("confirmed ")]


def read_confirmations(bootstrap: str) -> list[dict[str, object]]:
    """Every confirmation in the topic, up to its end offsets."""
    out: list[dict[str, object]] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as reader:
        partitions = [TopicPartition("orders-confirmed", p) for p in range(3)]
        reader.assign(partitions)
        ends = reader.end_offsets(partitions)
        for _ in range(300):
            if all(reader.position(tp) >= end for tp, end in ends.items()):
                break
            for records in reader.getmany(timeout_ms=200).values():
                out.extend(json.loads(r.value) for r in records)
    return out


def test_two_instances_and_a_sigterm_confirm_every_order_exactly_once(broker3: BrokerProcess) -> None:
    feed(broker3.bootstrap, 0, 300)
    first = AppProcess("order_service.py", ["--bootstrap", broker3.bootstrap])
    second = None
    try:
        first.wait_for(lambda lines: len(confirmed_in(lines)) >= 50, 90, "50 confirmations")
        second = AppProcess("order_service.py", ["--bootstrap", broker3.bootstrap])
        second.wait_for_line("assigned [", timeout=90)
        assert first.terminate() == 0, first.output
        assert "stopped cleanly" in first.output
        feed(broker3.bootstrap, 300, 100)
        second.wait_for(lambda _: len(set(confirmed(first, second))) >= 400, 120, "all 400 orders confirmed")
        assert second.terminate() == 0, second.output
    finally:
        first.kill()
        if second is not None:
            second.kill()

    ids = confirmed(first, second)
    assert sorted(ids) == sorted(f"order-{i}" for i in range(400)), "an order was confirmed twice or never"
    confirmations = read_confirmations(broker3.bootstrap)
    assert len(confirmations) == 400
    assert {c["order_id"] for c in confirmations} == {f"order-{i}" for i in range(400)}
    assert all(c["total"] == 5.0 for c in confirmations)


def confirmed_in(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("confirmed ")]
