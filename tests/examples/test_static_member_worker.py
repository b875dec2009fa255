"""examples/static_member_worker.py as its users run it: one of two workers is stopped and started
again within the session timeout, and nobody rebalances."""

from __future__ import annotations

import pytest

from reference_broker.testing import BrokerFactory
from sdk.sync import Producer
from tests.examples.app_process import AppProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def assignments(app: AppProcess) -> list[str]:
    return [line for line in app.lines if line.startswith("assigned ")]


def test_a_restart_within_the_session_timeout_keeps_the_generation_and_the_partitions(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory({"num.partitions": 4})
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(40):
            producer.send("tasks", b"task %d" % i, partition=i % 4)
        producer.flush()
    args = ["--bootstrap", broker.bootstrap]
    apps: list[AppProcess] = []
    try:
        one = AppProcess("static_member_worker.py", [*args, "--instance", "worker-1"])
        apps.append(one)
        one.wait_for_line("assigned ", timeout=60)
        two = AppProcess("static_member_worker.py", [*args, "--instance", "worker-2"])
        apps.append(two)
        # The group settles when both hold two partitions at one generation.
        two.wait_for(lambda _: "partitions=[" in (assignments(two) or [""])[-1], 90, "an assignment")
        one.wait_for(
            lambda _: assignments(one)[-1].split()[1] == assignments(two)[-1].split()[1],
            90,
            "both workers at one generation",
        )
        settled_one, settled_two = assignments(one)[-1], assignments(two)[-1]
        lines_of_two = len(two.lines)

        assert one.terminate() == 0, one.output
        back = AppProcess("static_member_worker.py", [*args, "--instance", "worker-1"])
        apps.append(back)
        back.wait_for_line("assigned ", timeout=60)
        with Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(8):
                producer.send("tasks", b"more %d" % i, partition=i % 4)
            producer.flush()
        back.wait_for_line("processed ", timeout=60)
        two.wait_for(
            lambda lines: any(line.startswith("processed ") for line in lines[lines_of_two:]),
            60,
            "two processing again",
        )
        assert assignments(back)[-1] == settled_one, "the restarted member came back elsewhere"
        assert assignments(two)[-1] == settled_two
        rebalanced = [line for line in two.lines[lines_of_two:] if line.startswith(("assigned", "revoked"))]
        assert rebalanced == [], f"the other worker rebalanced: {rebalanced}"
    finally:
        for app in apps:
            app.kill()
