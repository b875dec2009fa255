"""Fixtures for the consumer group tests: a reference broker that serves groups, an Apache Kafka
node with the same auto-creation settings, and a ``bootstrap`` over them and librdkafka's mock
cluster (``mock_cluster`` from tests/sdk/conftest.py).

The broker is a :class:`~reference_broker.testing.BrokerProcess`, whose embedded defaults already
set ``group.initial.rebalance.delay.ms=0``, so a group forms at once (the Kafka nodes of
tests/apache_kafka.py set it too). A test module that wants topics auto-created with another
partition count overrides ``group_broker_partitions``; both brokers then auto-create with it.
Kafka nodes are killed at teardown: their data is thrown away.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reference_broker.testing import BrokerProcess


@pytest.fixture(scope="module")
def group_broker_partitions() -> int:
    """``num.partitions`` of the module's ``group_broker`` and ``group_kafka`` (auto-created topics)."""
    return 1


@pytest.fixture(scope="module")
def group_broker(group_broker_partitions: int) -> Iterator[BrokerProcess]:
    """A reference broker for one test module, forming groups without the initial rebalance delay."""
    with BrokerProcess(config={"num.partitions": group_broker_partitions}) as proc:
        yield proc


@pytest.fixture(scope="module")
def group_kafka(
    group_broker_partitions: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """An Apache Kafka node for one test module, with the group settings of ``group_broker``
    (BrokerProcess's test defaults) that differ from Kafka's: topics auto-created with
    ``group_broker_partitions`` partitions (Kafka: 1) and session timeouts from 1 s (Kafka: 6 s)."""
    from tests.apache_kafka import KafkaCluster, require_apache_kafka

    require_apache_kafka()
    settings = {"num.partitions": group_broker_partitions, "group.min.session.timeout.ms": 1000}
    cluster = KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), 1, **settings)
    try:
        yield cluster.start().nodes[0]
    finally:
        cluster.kill()


@pytest.fixture(params=["mock", "reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """librdkafka's mock cluster, the reference broker (``group_broker``), Apache Kafka
    (``group_kafka``)."""
    if request.param == "mock":
        return str(request.getfixturevalue("mock_cluster").bootstrap)
    if request.param == "apache":
        return str(request.getfixturevalue("group_kafka").bootstrap)
    return str(request.getfixturevalue("group_broker").bootstrap)
