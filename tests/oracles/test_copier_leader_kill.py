"""The SDK's transactional copier keeps committing after a partition leader of a 3-node Apache
Kafka cluster is killed with SIGKILL and restarted.

The copier (benchmarks/eos_copy.py: a read_committed consumer, a transactional producer and the
consumer's offsets sent to each transaction) runs as a process of its own; a read_committed reader
counts the committed output. After the leader of an output (or input) partition is killed, Kafka
moves its partitions once the controller fences the dead broker (broker.session.timeout.ms, 4.5 s
in CLUSTER_CONFIG), and the restarted node rejoins as a follower: from then on the copier must go
on without being restarted, and the output must stay exact.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apache_kafka import KafkaCluster, require_apache_kafka
from tests.oracles.test_sdk_on_kafka_cluster import (
    CLUSTER_CONFIG,
    PARTITIONS,
    create_topics,
    partition_leader,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import eos_copy  # type: ignore[import-not-found]  # benchmarks/ is not a package

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow]

MESSAGES = 12000
#: Committed output the copier must add after the killed node is back, without a restart of its own.
PROGRESS_AFTER_RESTART = 1000
#: A generous bound for that progress: Kafka fences the dead broker within its session timeout.
PROGRESS_DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    require_apache_kafka()
    config: dict[str, Any] = dict(CLUSTER_CONFIG)
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), 3, client_compiler=True, **config)
    try:
        yield kafka.start()
    finally:
        kafka.kill()


def wait_for(condition: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {deadline_s:.0f} s")
        time.sleep(0.05)


@pytest.mark.parametrize("killed_topic", ["output", "input"])
def test_copier_goes_on_after_a_partition_leader_is_killed(
    cluster: KafkaCluster, tmp_path: Path, killed_topic: str
) -> None:
    source, target, group = (f"leader-{p}-{uuid.uuid4().hex[:8]}" for p in ("in", "out", "group"))
    create_topics(cluster.bootstrap, source, target)
    asyncio.run(eos_copy.seed(cluster.bootstrap, source, MESSAGES, PARTITIONS))
    watcher = eos_copy.Watcher(cluster.bootstrap, target, PARTITIONS)
    watcher.start()
    args = [cluster.bootstrap, source, target, group, str(PARTITIONS), str(MESSAGES)]
    # A short pause after each transaction keeps the copy under way across the kill.
    env = {**os.environ, eos_copy.PAUSE_ENV: "20"}
    copier = eos_copy.CopierProcess("sdk", args, tmp_path / "copier.log", env)
    try:
        copier.ensure_running()
        wait_for(lambda: watcher.total >= MESSAGES // 6, 120, "the first committed output")
        topic = target if killed_topic == "output" else source
        node_id = partition_leader(cluster.bootstrap, topic, 0)
        cluster.node(node_id).restart(kill=True)
        back_at = watcher.total
        wait_for(
            lambda: copier.finished or watcher.total >= min(back_at + PROGRESS_AFTER_RESTART, MESSAGES),
            PROGRESS_DEADLINE_S,
            f"committed output beyond {back_at} after node {node_id} (leader of {topic}-0) was back",
        )
        assert copier.starts == 1, "the copier was restarted"
        wait_for(lambda: copier.finished, 240, "the end of the copy")
        assert copier.starts == 1, "the copier died and was restarted"
        output = asyncio.run(eos_copy.read_committed(cluster.bootstrap, target, PARTITIONS, MESSAGES))
    finally:
        copier.kill()
        watcher.stopping.set()
        watcher.join(10)
    assert watcher.error is None, watcher.error
    assert output == eos_copy.expected_output(MESSAGES, PARTITIONS)
