"""examples/order_service.py as its users run it: two instances share the group, one is stopped
with SIGTERM mid-stream, and every order is confirmed exactly once."""

from __future__ import annotations

import json

import pytest

from reference_broker.testing import BrokerFactory
from sdk.sync import Producer
from tests.examples.app_process import AppProcess, json_values_to_end

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def feed(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            order = {"order_id": f"order-{i}", "items": [{"price": "2.50", "quantity": 2}]}
            producer.send("orders", json.dumps(order).encode(), key=f"order-{i}".encode())
        producer.flush()


def confirmed(*apps: AppProcess) -> list[str]:
    return [line.split()[1] for app in apps for line in app.lines if line.startswith("confirmed ")]


def test_two_instances_and_a_sigterm_confirm_every_order_exactly_once(broker_factory: BrokerFactory) -> None:
    broker = broker_factory({"num.partitions": 3})
    feed(broker.bootstrap, 0, 300)
    first = AppProcess("order_service.py", ["--bootstrap", broker.bootstrap])
    second = None
    try:
        first.wait_for(lambda lines: len(confirmed_in(lines)) >= 50, 90, "50 confirmations")
        second = AppProcess("order_service.py", ["--bootstrap", broker.bootstrap])
        second.wait_for_line("assigned [", timeout=90)
        assert first.terminate() == 0, first.output
        assert "stopped cleanly" in first.output
        feed(broker.bootstrap, 300, 100)
        second.wait_for(lambda _: len(set(confirmed(first, second))) >= 400, 120, "all 400 orders confirmed")
        assert second.terminate() == 0, second.output
    finally:
        first.kill()
        if second is not None:
            second.kill()

    ids = confirmed(first, second)
    assert sorted(ids) == sorted(f"order-{i}" for i in range(400)), "an order was confirmed twice or never"
    confirmations = json_values_to_end(broker.bootstrap, "orders-confirmed", 3)
    assert len(confirmations) == 400
    assert {c["order_id"] for c in confirmations} == {f"order-{i}" for i in range(400)}
    assert all(c["total"] == 5.0 for c in confirmations)


def confirmed_in(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("confirmed ")]
