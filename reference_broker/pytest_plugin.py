"""The reference broker as pytest fixtures, like an embedded Kafka for your own tests.

Installing the distribution registers this module as a pytest plugin (the ``pytest11`` entry
point ``reference_broker``), so any test can ask for:

* ``broker``: one :class:`~reference_broker.testing.BrokerProcess` for the whole test session,
  with one partition per auto-created topic. Tests share it, so each should use topic names of
  its own (a uuid suffix, say).
* ``broker_factory``: a :class:`~reference_broker.testing.BrokerFactory`; call it with a config
  (Kafka property names) for a fresh broker of the test's own, e.g.
  ``broker_factory({"num.partitions": 3, "log.segment.bytes": 1048576})``. Every broker it made is
  stopped, and its data removed, when the test ends.
* ``reference_cluster``: a :class:`~reference_broker.testing.ClusterFactory`; call it for a
  replicated cluster of node processes, each behind a proxy the test can cut
  (``reference_cluster(3, {"min.insync.replicas": 2})`` returns a started
  :class:`~reference_broker.testing.ClusterProcess` once every broker is registered). Every node
  is stopped by its PID when the test ends, paused ones included::

      def test_orders_survive_a_leader_crash(reference_cluster):
          cluster = reference_cluster(3)
          ...
          cluster.kill(cluster.leader_of("orders", 0))

Both are real ``python -m reference_broker`` processes on free loopback ports; connect any client
to ``broker.bootstrap``::

    def test_orders_are_published(broker):
        publish_orders(bootstrap_servers=broker.bootstrap)
        ...

A fixture of the same name in a project's own ``conftest.py`` takes precedence over these, and
``pytest -p no:reference_broker`` leaves the plugin out.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess, ClusterFactory

__all__ = ["broker", "broker_factory", "reference_cluster"]

#: The shared broker's config: one partition per auto-created topic keeps tests' topics small.
SHARED_BROKER_CONFIG = {"num.partitions": 1}


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerProcess]:
    """One broker shared by the whole session; tests must use unique topic names."""
    with BrokerProcess(config=SHARED_BROKER_CONFIG) as proc:
        yield proc


@pytest.fixture
def broker_factory() -> Iterator[BrokerFactory]:
    """Fresh brokers with custom config for one test, all stopped at teardown."""
    factory = BrokerFactory()
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def reference_cluster() -> Iterator[ClusterFactory]:
    """Replicated clusters for one test (``reference_cluster(nodes, config)``), all closed at
    teardown."""
    factory = ClusterFactory()
    try:
        yield factory
    finally:
        factory.close_all()
