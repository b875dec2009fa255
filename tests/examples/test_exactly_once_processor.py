"""examples/exactly_once_processor.py as its users run it, with real kills: an instance killed
with SIGKILL mid-stream and restarted, a second instance joining, and a zombie fenced by a new
process with its transactional id. A read_committed reader must see every payment exactly once."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory
from sdk.sync import Producer
from tests.examples.app_process import AppProcess, json_values_to_end

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CURRENCIES = ["EUR", "GBP", "JPY", "USD"]


def feed(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            payment = {"payment_id": i, "amount_cents": 100 + i, "currency": CURRENCIES[i % 4]}
            producer.send("payments", json.dumps(payment).encode(), key=str(i).encode())
        producer.flush()


def committed_count(lines: list[str]) -> int:
    return sum(int(line.split()[1]) for line in lines if line.startswith("committed "))


def test_kill_restart_join_and_zombie_fencing_keep_every_payment_exactly_once(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory({"num.partitions": 3})
    total = 1200
    feed(broker.bootstrap, 0, 600)
    apps: list[AppProcess] = []

    def start(instance: int) -> AppProcess:
        app = AppProcess(
            "exactly_once_processor.py", ["--bootstrap", broker.bootstrap, "--instance", str(instance)]
        )
        apps.append(app)
        return app

    try:
        crashed = start(1)
        crashed.wait_for(lambda lines: committed_count(lines) >= 100, 90, "100 committed records")
        crashed.kill()  # kill -9: its open transaction is left to the restarted instance to abort
        feed(broker.bootstrap, 600, 300)
        restarted = start(1)
        restarted.wait_for_line("committed ", timeout=90)
        second = start(2)
        second.wait_for_line("running", timeout=60)
        # A new process with instance 1's transactional id fences the running one, which finds
        # out at its next transaction.
        successor = start(1)
        successor.wait_for_line("running", timeout=60)
        feed(broker.bootstrap, 900, 300)
        restarted.wait_for_line("fenced", timeout=90)
        assert restarted.wait() == 0, restarted.output

        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            seen = json_values_to_end(broker.bootstrap, "payments-eur", 3, isolation_level="read_committed")
            if len({p["payment_id"] for p in seen}) >= total:
                break
            time.sleep(1)
        for app in (second, successor):
            assert app.terminate() == 0, app.output
    finally:
        for app in apps:
            app.kill()

    counts = Counter(p["payment_id"] for p in seen)
    twice = sorted(pid for pid, n in counts.items() if n > 1)
    missing = sorted(set(range(total)) - set(counts))
    assert not twice and not missing, f"read twice: {twice[:20]}; missing: {missing[:20]}"
    rates = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "JPY": 0.0061}
    assert all(p["eur_cents"] == round(p["amount_cents"] * rates[p["currency"]]) for p in seen)
