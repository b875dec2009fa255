"""Three combined-mode nodes as real processes: brokers register and are unfenced, a topic with
replication factor 3 is created through any node, every node's Metadata and Kafka's own
``kafka-topics --describe`` show its leader, replicas and ISR, and a killed node is fenced after
its session timeout with its leaderships moved."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess
from tests.apache_kafka import require_apache_kafka
from tests.oracles.kafka_tools import run_tool

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.apache_kafka]

pytest.importorskip("reference_broker.raft", reason="needs the raft quorum of the cluster")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

NODES = 3
SESSION_MS = 3000
CLUSTER_ID = "cDVJ2f7NQWm0mzWq2i8Rtw"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.fixture
def cluster() -> Iterator[list[BrokerProcess]]:
    hosts = [f"127.0.1.{n}" for n in range(1, NODES + 1)]
    client_ports = [free_port(h) for h in hosts]
    controller_ports = [free_port(h) for h in hosts]
    voters = ",".join(f"{n}@{hosts[n - 1]}:{controller_ports[n - 1]}" for n in range(1, NODES + 1))
    nodes = []
    for n in range(1, NODES + 1):
        host = hosts[n - 1]
        config = {
            "node.id": n,
            "process.roles": "broker,controller",
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{host}:{client_ports[n - 1]},"
            f"CONTROLLER://{host}:{controller_ports[n - 1]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "cluster.id": CLUSTER_ID,
            "broker.heartbeat.interval.ms": 300,
            "broker.session.timeout.ms": SESSION_MS,
        }
        nodes.append(BrokerProcess(config=config, host=host, port=client_ports[n - 1]))
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def admin(node: BrokerProcess) -> Any:
    return AdminClient({"bootstrap.servers": node.bootstrap, "socket.timeout.ms": 3000})


def broker_count(node: BrokerProcess) -> int:
    """The brokers node's Metadata lists (0 while it cannot answer yet, as at start)."""
    try:
        return len(admin(node).list_topics(timeout=5).brokers)
    except confluent_kafka.KafkaException:
        return 0


def partitions(node: BrokerProcess, topic: str) -> dict[int, Any]:
    try:
        metadata = admin(node).list_topics(topic, timeout=5)
    except confluent_kafka.KafkaException:
        return {}
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return dict(found.partitions)


def test_three_nodes_replicate_a_topic_and_fence_a_killed_node(cluster: list[BrokerProcess]) -> None:
    until(lambda: broker_count(cluster[0]) == NODES, "every broker is unfenced")
    creator = admin(cluster[1])  # held: a destroyed client fails its futures with _DESTROY
    futures = creator.create_topics([NewTopic("replicated", 3, 3)], operation_timeout=20)
    futures["replicated"].result(timeout=30)

    for node in cluster:
        parts = until(
            lambda node=node: len(partitions(node, "replicated")) == 3 and partitions(node, "replicated"), ""
        )
        for p in parts.values():
            assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] and p.leader in (1, 2, 3)
    leaders = {p.id: p.leader for p in partitions(cluster[0], "replicated").values()}
    assert sorted(leaders.values()) == [1, 2, 3]  # the placer spreads leadership

    require_apache_kafka()  # Kafka's jars for kafka-topics (skipped without them, failed under CI)
    described = run_tool(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        cluster[2].bootstrap,
        "--describe",
        "--topic",
        "replicated",
    )
    assert described.returncode == 0, described.stderr
    lines = [line for line in described.stdout.splitlines() if "Partition: " in line]
    assert len(lines) == 3 and all(
        "Leader: " in line and "Replicas: " in line and "Isr: " in line for line in lines
    )

    victim = leaders[0]
    cluster[victim - 1].kill()
    survivor = cluster[victim % NODES]

    def moved() -> bool:
        part = partitions(survivor, "replicated").get(0)
        return part is not None and part.leader not in (victim, -1) and victim not in part.isrs

    until(moved, f"partition 0 leaves killed node {victim}", timeout=SESSION_MS / 1000 + 20)
    brokers = admin(survivor).list_topics(timeout=5).brokers
    assert victim not in brokers
