"""The three-node clusters the acceptance scenarios run on, ours and Apache Kafka's, behind one
protocol (``ThreeNodes``), and the confluent-kafka helpers those scenarios share. The ``nodes``
fixture (``conftest.py``) gives each scenario both clusters in turn."""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any, Protocol

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import ClusterProcess
from reference_broker.testing import wait_until as until
from tests.apache_kafka import KafkaCluster

PARTITIONS = 2
INTERNAL_PARTITIONS = 3
CLUSTER_CONFIG: dict[str, Any] = {
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "min.insync.replicas": 2,
    "num.partitions": PARTITIONS,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    "unclean.leader.election.enable": False,
    # A node that stops fetching leaves the ISR within seconds, so the tests see it happen.
    "replica.lag.time.max.ms": 3000,
    "group.initial.rebalance.delay.ms": 0,
}


class ThreeNodes(Protocol):
    """What the scenarios need of a three-node cluster, ours or Kafka's."""

    kind: str
    bootstrap: str

    def leader_of(self, topic: str, partition: int) -> int: ...

    def crash_and_restart(self, node_id: int) -> None: ...

    def cut_off(self, node_id: int) -> None: ...

    def bring_back(self, node_id: int) -> None: ...

    def bootstrap_without(self, node_id: int) -> str: ...

    def address_of(self, node_id: int) -> str: ...


class ReferenceNodes:
    kind = "reference"

    def __init__(self, cluster: ClusterProcess) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap

    def leader_of(self, topic: str, partition: int) -> int:
        return self.cluster.leader_of(topic, partition, timeout=60)

    def crash_and_restart(self, node_id: int) -> None:
        self.cluster.restart(node_id, kill=True)

    def cut_off(self, node_id: int) -> None:
        self.cluster.isolate(node_id)

    def bring_back(self, node_id: int) -> None:
        self.cluster.heal(node_id)

    def bootstrap_without(self, node_id: int) -> str:
        return ",".join(n.bootstrap for n in self.cluster.nodes if n.node_id != node_id)

    def address_of(self, node_id: int) -> str:
        return self.cluster.node(node_id).bootstrap


class KafkaNodes:
    kind = "kafka"

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self._starting: list[int] = []

    def settle(self) -> None:
        """Until every node restarted by ``crash_and_restart`` serves again."""
        while self._starting:
            self.cluster.node(self._starting.pop()).wait_ready()

    def leader_of(self, topic: str, partition: int) -> int:
        return until(lambda: partition_state(self.bootstrap, topic, partition, leader_needed=True),
                     f"{topic}-{partition} has a leader", 60).leader

    def crash_and_restart(self, node_id: int) -> None:
        """SIGKILL and start again without waiting for the JVM to serve (it takes far longer than
        our node, and the scenario must go on meanwhile); one node down at a time."""
        self.settle()
        node = self.cluster.node(node_id)
        node.kill()
        node.launch()
        self._starting.append(node_id)

    def cut_off(self, node_id: int) -> None:
        self.cluster.node(node_id).kill()

    def bring_back(self, node_id: int) -> None:
        self.cluster.node(node_id).start()

    def bootstrap_without(self, node_id: int) -> str:
        return ",".join(n.bootstrap for n in self.cluster.nodes if n.node_id != node_id)

    def address_of(self, node_id: int) -> str:
        return self.cluster.node(node_id).bootstrap


def partition_state(bootstrap: str, topic: str, partition: int, *, leader_needed: bool = False) -> Any:
    """confluent-kafka's view of ``topic``/``partition`` (None while unknown or, with
    ``leader_needed``, leaderless)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    try:
        found = admin.list_topics(topic, timeout=5).topics.get(topic)
    except confluent_kafka.KafkaException:
        return None
    if found is None or found.error is not None or partition not in found.partitions:
        return None
    state = found.partitions[partition]
    return None if leader_needed and state.leader < 0 else state


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, **config: Any) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=3,
                     config={k: str(v) for k, v in config.items()})
    admin.create_topics([topic], operation_timeout=30)[name].result(60)

    def in_sync(partition: int) -> bool:
        state = partition_state(bootstrap, name, partition, leader_needed=True)
        return state is not None and len(state.isrs) == 3

    for p in range(partitions):
        until(functools.partial(in_sync, p), f"{name}-{p} has its three replicas in sync", 60)


def read_committed(bootstrap: str, topic: str, *, at_least: int, timeout: float) -> list[bytes]:
    """The values a read_committed consumer reads from partition 0 of ``topic``, from its start,
    until it has ``at_least`` of them or ``timeout`` seconds have passed."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < at_least and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(100, 0.5) if not m.error()]
    finally:
        consumer.close()
    return values
