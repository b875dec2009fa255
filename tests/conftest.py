"""Shared fixtures: the reference broker as a real subprocess.

``broker`` is one process for the whole session (use unique topic names); ``broker_factory``
makes fresh brokers with custom config and stops them after the test. Both come from the
``reference_broker.pytest_plugin`` plugin, which the distribution's ``pytest11`` entry point loads;
where it was not loaded (an install without that entry point's metadata,
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p no:reference_broker``), it is registered here, once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PLUGIN = "reference_broker.pytest_plugin"


def pytest_configure(config: pytest.Config) -> None:
    import reference_broker.pytest_plugin as plugin

    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, PLUGIN)


# -- Apache Kafka as an oracle (tests/apache_kafka.py) --------------------------------------------


def _require_apache_kafka() -> None:
    """Skip (or, under CI, fail) when Apache Kafka cannot run here; fetch its jars otherwise."""
    from tests.apache_kafka import KafkaUnavailable, kafka_jars

    try:
        kafka_jars()
    except KafkaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka KRaft node for the session (use unique topic names); ``.bootstrap``."""
    from tests.apache_kafka import KafkaCluster

    _require_apache_kafka()
    cluster = KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), 1)
    try:
        yield cluster.start().nodes[0]
    finally:
        cluster.stop()


@pytest.fixture
def apache_kafka_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Fresh Apache Kafka nodes with broker properties of the test's own, stopped after it.

    ``apache_kafka_factory(**{"log.segment.bytes": 1048576})`` starts one node and returns its
    ``KafkaNode``; ``apache_kafka_factory(nodes=3, ...)`` starts a cluster and returns the
    ``KafkaCluster``.
    """
    from tests.apache_kafka import KafkaCluster

    _require_apache_kafka()
    started: list[KafkaCluster] = []

    def start(nodes: int = 1, **properties: Any) -> Any:
        cluster = KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), nodes, **properties)
        started.append(cluster)
        cluster.start()
        return cluster.nodes[0] if nodes == 1 else cluster

    try:
        yield start
    finally:
        for cluster in started:
            cluster.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "apache_kafka" in fixtures or "apache_kafka_factory" in fixtures:
            item.add_marker(pytest.mark.apache_kafka)
