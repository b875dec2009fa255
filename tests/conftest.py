"""Shared fixtures: the reference broker as a real subprocess.

``broker`` is one process for the whole session (use unique topic names); ``broker_factory``
makes fresh brokers with custom config and stops them after the test. Both come from the
``reference_broker.pytest_plugin`` plugin, which the distribution's ``pytest11`` entry point loads;
where it was not loaded (an install without that entry point's metadata,
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p no:reference_broker``), it is registered here, once.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

PLUGIN = "reference_broker.pytest_plugin"


def pytest_configure(config: pytest.Config) -> None:
    import reference_broker.pytest_plugin as plugin

    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, PLUGIN)


# -- Apache Kafka as an oracle (tests/apache_kafka.py) --------------------------------------------


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka KRaft node for the session (use unique topic names); ``.bootstrap``."""
    from tests.apache_kafka import KafkaCluster, require_apache_kafka

    require_apache_kafka()
    cluster = KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), 1, client_compiler=True)
    try:
        yield cluster.start().nodes[0]
    finally:
        cluster.kill()  # its data is thrown away: no controlled shutdown to wait for


@pytest.fixture
def apache_kafka_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Fresh Apache Kafka nodes with broker properties of the test's own, stopped after it.

    ``apache_kafka_factory(**{"log.segment.bytes": 1048576})`` starts one node and returns its
    ``KafkaNode``; ``apache_kafka_factory(nodes=3, ...)`` starts a cluster and returns the
    ``KafkaCluster``; ``features={"transaction.version": 1}`` formats the storage with those
    feature levels.
    """
    from tests.apache_kafka import KafkaCluster, require_apache_kafka

    require_apache_kafka()
    started: list[KafkaCluster] = []

    def start(nodes: int = 1, features: Mapping[str, int] | None = None, **properties: Any) -> Any:
        data_dir = tmp_path_factory.mktemp("apache-kafka")
        cluster = KafkaCluster(data_dir, nodes, features=features, client_compiler=True, **properties)
        started.append(cluster)
        cluster.start()
        return cluster.nodes[0] if nodes == 1 else cluster

    try:
        yield start
    finally:
        for cluster in started:
            cluster.kill()


# -- markers: ``unit`` (no process, no socket to a broker) and ``interop`` (real brokers, peers) ----

# Fixtures that start a broker, a peer client or a proxy in front of one.
_INTEROP_FIXTURES = frozenset(
    {
        "broker", "broker_factory", "mock_cluster", "kafka", "proxy_factory", "consume",
        "consume_sync", "group_broker", "bootstrap", "spark", "apache_kafka", "apache_kafka_factory",
        "reference_cluster", "nodes",
    }
)
# Modules and names whose presence in a test module means it drives real processes or peers.
_INTEROP_MODULES = frozenset(
    {"confluent_kafka", "aiokafka", "kafka", "pyspark", "subprocess", "reference_broker.testing"}
)
_INTEROP_NAMES = frozenset(
    {"BrokerProcess", "InProcessBroker", "run_in_process", "MockCluster", "ClusterProcess", "ClusterFactory"}
)


def _is_interop(item: pytest.Item) -> bool:
    if _INTEROP_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    if module is None:
        return False
    for name, value in vars(module).items():
        if name in _INTEROP_NAMES:
            return True
        module_name = getattr(value, "__name__", None) if isinstance(value, types.ModuleType) else None
        if module_name in _INTEROP_MODULES or (module_name or "").split(".")[0] in _INTEROP_MODULES:
            return True
    return False


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Mark every test ``unit`` or ``interop`` so that either set runs alone (``-m unit``), before
    any other plugin selects by markers; on an xdist worker, once every other plugin has reordered
    the tests, hand the modules out slowest first."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "apache_kafka" in fixtures or "apache_kafka_factory" in fixtures:
            item.add_marker(pytest.mark.apache_kafka)
        if any(item.get_closest_marker(m) for m in ("apache_kafka", "interop")) or _is_interop(item):
            item.add_marker(pytest.mark.interop)
        else:
            item.add_marker(pytest.mark.unit)
    yield
    if hasattr(config, "workerinput"):
        order_modules_slowest_first(items)


# -- running in parallel: ``pytest -n 3 --dist loadfile --no-loadscope-reorder`` (pytest-xdist) ---
#
# Each worker is a pytest session of its own: session fixtures (``broker``, ``apache_kafka``,
# ``spark``) start once per worker, module fixtures once per worker that runs the module, and
# ``--dist loadfile`` keeps each module on one worker, so a module fixture (a 3-node cluster, say)
# starts once. xdist hands the modules out in the order the workers collected them, so that
# order is slowest first: the run then ends on many short modules spread over every worker, not
# on one long one. (xdist's own reordering, most tests first, would undo it: hence
# ``--no-loadscope-reorder``.)


def _cost_rank(item: pytest.Item) -> int:
    """0 for the slowest kind of test, 3 for the fastest."""
    for rank, marker in enumerate(("slow", "apache_kafka", "interop")):
        if item.get_closest_marker(marker):
            return rank
    return 3


#: The modules that take longest on the 2-core CI machine (a minute or more each: Spark driver
#: kills, the 3-node Kafka cluster, fault workloads, benchmark smoke runs), longest first. They are
#: handed out before every other module, in this order: one of them started last would end the run
#: on a single busy worker while the others are idle.
LONGEST_MODULES = (
    "tests/benchmarks/test_scripts.py",
    "tests/oracles/test_sdk_on_kafka_cluster.py",
    "tests/spark_integration/test_driver_crash.py",
    "tests/tools/anomaly/test_workload.py",
    "tests/tools/anomaly/test_workload_kafka.py",
    "tests/tools/anomaly/test_workload_cluster.py",
    "tests/spark_integration/test_two_phase_stream.py",
    "tests/spark_integration/test_sink_apache_kafka.py",
    "tests/spark_integration/test_pipeline_crash.py",
    "tests/oracles/test_kafka_cli_tools.py",
    "tests/spark_integration/test_prefix_ownership.py",
)


def order_modules_slowest_first(items: list[pytest.Item]) -> None:
    """Stable-sort ``items`` by the rank of their module: the ``LONGEST_MODULES`` first, in their
    order, then by the module's slowest test: a module with a ``slow`` test, then one with an
    Apache Kafka test, then other interop, then unit; each module keeps the order pytest gave its
    tests."""
    module_rank: dict[str, tuple[int, int]] = {}
    for item in items:
        module = _module_of(item)
        if module in LONGEST_MODULES:
            module_rank[module] = (-1, LONGEST_MODULES.index(module))
        else:
            module_rank[module] = min(module_rank.get(module, (3, 0)), (_cost_rank(item), 0))
    items.sort(key=lambda item: module_rank[_module_of(item)])


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


# -- byte code for the processes the tests start -------------------------------------------------

#: What the brokers, clients, copiers, Spark drivers and Spark's Python workers the tests start
#: import, beside the standard library and the installed packages.
PROJECT_PACKAGES = ("sdk", "reference_broker", "spark_integration", "tools", "benchmarks", "tests")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the project's packages once (only what changed), before any test starts a
    process: where ``PYTHONDONTWRITEBYTECODE`` is set, as in some CI images, no process writes a
    ``.pyc``, and every broker, client and Spark Python worker would compile what it imports anew
    (about 0.3 s of a broker's start, more for a Spark worker). On an xdist worker the controller
    has done it."""
    import sys

    if hasattr(session.config, "workerinput") or not sys.dont_write_bytecode:
        return
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for package in PROJECT_PACKAGES:
        if (root / package).is_dir():
            compileall.compile_dir(root / package, quiet=1)
