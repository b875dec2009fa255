"""Fixtures for the consumer group tests: a reference broker that serves groups, and a ``bootstrap``
over it and librdkafka's mock cluster (``mock_cluster`` from tests/sdk/conftest.py).

The broker is a :class:`~reference_broker.testing.BrokerProcess`, whose embedded defaults already
set ``group.initial.rebalance.delay.ms=0``, so a group forms at once. A test module that wants
topics auto-created with another partition count overrides ``group_broker_partitions``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_broker.testing import BrokerProcess


@pytest.fixture(scope="module")
def group_broker_partitions() -> int:
    """``num.partitions`` of the module's ``group_broker`` (auto-created topics)."""
    return 1


@pytest.fixture(scope="module")
def group_broker(group_broker_partitions: int) -> Iterator[BrokerProcess]:
    """A reference broker for one test module, forming groups without the initial rebalance delay."""
    with BrokerProcess(config={"num.partitions": group_broker_partitions}) as proc:
        yield proc


@pytest.fixture(params=["mock", "reference"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """librdkafka's mock cluster, then the reference broker (``group_broker``)."""
    if request.param == "mock":
        return str(request.getfixturevalue("mock_cluster").bootstrap)
    return str(request.getfixturevalue("group_broker").bootstrap)
