"""examples/exactly_once_processor.py as its users run it, with real kills: an instance killed
with SIGKILL mid-stream and restarted, a second instance joining, and a zombie fenced by a new
process with its transactional id. A read_committed reader must see every payment exactly once."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from sdk import TopicPartition
from sdk.sync import Consumer, Producer
from tests.examples.app_process import AppProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CURRENCIES = ["EUR", "GBP", "JPY", "USD"]


@pytest.fixture
def broker3() -> Iterator[BrokerProcess]:
    with BrokerProcess(config={"num.partitions": 3}) as broker:
        yield broker


def feed(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(first, first + count):
            payment = {"payment_id": i, "amount_cents": 100 + i, "currency": CURRENCIES[i % 4]}
            producer.send("payments", json.dumps(payment).encode(), key=str(i).encode())
        producer.flush()


def committed_count(lines: list[str]) -> int:
    return sum(int(line.split()[1]) for line in lines if line.startswith("committed "))


def read_committed_output(bootstrap: str) -> list[dict[str, Any]]:
    """Everything a read_committed reader sees in payments-eur, up to the last stable offsets."""
    out: list[dict[str, Any]] = []
    with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as reader:
        partitions = [TopicPartition("payments-eur", p) for p in range(3)]
        reader.assign(partitions)
        ends = reader.end_offsets(partitions)
        for _ in range(300):
            if all(reader.position(tp) >= end for tp, end in ends.items()):
                break
            for records in reader.getmany(timeout_ms=200).values():
                out.extend(json.loads(r.value) for r in records)
    return out


def test_kill_restart_join_and_zombie_fencing_keep_every_payment_exactly_once(
    broker3: BrokerProcess,
) -> None:
    total = 1200
    feed(broker3.bootstrap, 0, 600)
    apps: list[AppProcess] = []

    def start(instance: int) -> AppProcess:
        app = AppProcess(
            "exactly_once_processor.py", ["--bootstrap", broker3.bootstrap, "--instance", str(instance)]
        )
        apps.append(app)
        return app

    try:
        crashed = start(1)
        crashed.wait_for(lambda lines: committed_count(lines) >= 100, 90, "100 committed records")
        crashed.kill()  # kill -9: its open transaction is left to the restarted instance to abort
        feed(broker3.bootstrap, 600, 300)
        restarted = start(1)
        restarted.wait_for_line("committed ", timeout=90)
        second = start(2)
        second.wait_for_line("running", timeout=60)
        # A new process with instance 1's transactional id fences the running one, which finds
        # out at its next transaction.
        successor = start(1)
        successor.wait_for_line("running", timeout=60)
        feed(broker3.bootstrap, 900, 300)
        restarted.wait_for_line("fenced", timeout=90)
        assert restarted.wait() == 0, restarted.output

        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            seen = read_committed_output(broker3.bootstrap)
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
