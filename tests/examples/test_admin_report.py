"""examples/admin_report.py as its users run it: it creates topics idempotently and reports each
group's lag as end offset minus committed offset, the figures the test set up."""

from __future__ import annotations

import json

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk import OffsetAndMetadata, TopicPartition
from sdk.sync import Consumer, Producer
from tests.examples.app_process import AppProcess

pytestmark = [pytest.mark.interop]


def run_report(bootstrap: str, *args: str) -> AppProcess:
    app = AppProcess("admin_report.py", ["--bootstrap", bootstrap, *args])
    assert app.wait(120) == 0, app.output
    return app


def test_topics_are_created_once_and_lag_is_end_minus_committed(broker_factory: BrokerFactory) -> None:
    broker: BrokerProcess = broker_factory()
    spec = [
        "--create",
        "ledger:3:retention.ms=3600000",
        "--create",
        "ledger-compacted:1:cleanup.policy=compact",
    ]
    first = run_report(broker.bootstrap, *spec)
    assert "created ledger" in first.output and "created ledger-compacted" in first.output
    again = run_report(broker.bootstrap, *spec)
    assert "ledger exists" in again.output

    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(30):
            producer.send("ledger", b"entry %d" % i, partition=i % 3)
        producer.flush()
    committed = {0: 4, 1: 10}
    with Consumer(bootstrap_servers=broker.bootstrap, group_id="ledger-readers") as consumer:
        consumer.commit({TopicPartition("ledger", p): OffsetAndMetadata(o, "") for p, o in committed.items()})

    data = json.loads(run_report(broker.bootstrap, "--json").lines[-1])
    topics = {t["name"]: t for t in data["topics"]}
    assert topics["ledger"]["partitions"] == 3
    assert topics["ledger"]["retention.ms"] == "3600000"
    assert topics["ledger-compacted"]["cleanup.policy"] == "compact"
    (group,) = [g for g in data["groups"] if g["group"] == "ledger-readers"]
    rows = {row["partition"]: row for row in group["partitions"]}
    assert set(rows) == {0, 1}
    for partition, offset in committed.items():
        assert rows[partition] == {
            "topic": "ledger",
            "partition": partition,
            "committed": offset,
            "end": 10,
            "lag": 10 - offset,
        }
    assert group["total_lag"] == 6

    table = run_report(broker.bootstrap).output
    assert "group ledger-readers" in table and "total lag 6" in table
