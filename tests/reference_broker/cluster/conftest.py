"""Fixtures of the cluster acceptance scenarios: ``nodes`` runs a test on a three-node cluster of
ours and on Apache Kafka's three-node cluster (one per module, restarted nodes settled between
tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_broker.testing import ClusterFactory
from tests.apache_kafka import KafkaCluster, require_apache_kafka
from tests.reference_broker.cluster.three_nodes import CLUSTER_CONFIG, KafkaNodes, ReferenceNodes, ThreeNodes


@pytest.fixture(scope="module")
def kafka_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNodes]:
    require_apache_kafka()
    # A killed and restarted node re-registers only once the controller expired its old session:
    # 4.5 s (heartbeats every 1.5 s, three per session) instead of Kafka's 9 s per crash.
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), 3, **CLUSTER_CONFIG,
                         **{"broker.session.timeout.ms": 4500, "broker.heartbeat.interval.ms": 1500})
    try:
        yield KafkaNodes(kafka.start())
    finally:
        kafka.kill()


@pytest.fixture(params=["reference", pytest.param("kafka", marks=pytest.mark.apache_kafka)])
def nodes(request: pytest.FixtureRequest, reference_cluster: ClusterFactory) -> ThreeNodes:
    if request.param == "kafka":
        kafka: KafkaNodes = request.getfixturevalue("kafka_nodes")
        kafka.settle()
        return kafka
    return ReferenceNodes(reference_cluster(3, CLUSTER_CONFIG))
