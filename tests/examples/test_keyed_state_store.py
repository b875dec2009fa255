"""examples/keyed_state_store.py as its users run it: the table it rebuilds equals the newest
value of every live key, before and after the broker compacted the topic, and once compacted it
is rebuilt from fewer records than were written."""

from __future__ import annotations

import json
import time

import pytest

from reference_broker.testing import BrokerFactory
from sdk.sync import Producer
from tests.examples.app_process import AppProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CUSTOMERS, VERSIONS = 100, 30


def snapshot(bootstrap: str) -> tuple[dict[str, object], int]:
    """The table the app rebuilds, and how many records it read to do so."""
    app = AppProcess("keyed_state_store.py", ["--bootstrap", bootstrap, "--snapshot"])
    assert app.wait(120) == 0, app.output
    rebuilt = next(line for line in app.lines if line.startswith("rebuilt "))
    return json.loads(app.lines[-1]), int(rebuilt.split()[4])


def test_the_rebuilt_table_holds_each_live_keys_newest_value_and_compaction_shrinks_the_rebuild(
    broker_factory: BrokerFactory,
) -> None:
    bootstrap = broker_factory({"log.cleaner.backoff.ms": 100}).bootstrap
    assert snapshot(bootstrap) == ({}, 0)  # creates the compacted topic
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        for version in range(VERSIONS):
            for customer in range(CUSTOMERS):
                value = {"customer": customer, "version": version}
                producer.send("customer-profiles", json.dumps(value).encode(), key=b"c%d" % customer)
            producer.flush()
            time.sleep(0.1)  # pacing: segment.ms=1000 rolls a segment every few versions
        for customer in range(0, CUSTOMERS, 10):
            producer.send("customer-profiles", None, key=b"c%d" % customer)
        producer.flush()
    written = CUSTOMERS * VERSIONS + CUSTOMERS // 10
    expected = {f"c{c}": {"customer": c, "version": VERSIONS - 1} for c in range(CUSTOMERS) if c % 10}

    deadline = time.monotonic() + 90
    read = written
    while time.monotonic() < deadline:
        table, read = snapshot(bootstrap)
        assert table == expected
        if read < written // 2:
            break
        # Each later write rolls the segment it lands in out of the active one, giving the
        # cleaner more to clean.
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            producer.send(
                "customer-profiles", json.dumps({"customer": 1, "version": VERSIONS - 1}).encode(), key=b"c1"
            )
            producer.flush()
        time.sleep(1)
    assert read < written // 2, f"the topic was not compacted: {read} of {written} records still read"
