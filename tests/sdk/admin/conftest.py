"""Fixtures for the admin client tests: the cluster it administers (the reference broker and
Apache Kafka, each case checked by an oracle that is not this SDK: confluent-kafka's AdminClient
and clients) and a started ``AdminClient`` on it."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
import pytest_asyncio

from sdk.admin import AdminClient


@dataclass
class Cluster:
    kind: str  # "reference" or "apache"
    bootstrap: str

    def oracle(self) -> confluent_kafka.admin.AdminClient:
        """confluent-kafka's AdminClient on the same cluster (librdkafka, written elsewhere)."""
        return confluent_kafka.admin.AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "apache":
        return Cluster("apache", request.getfixturevalue("apache_kafka").bootstrap)
    return Cluster("reference", request.getfixturevalue("broker").bootstrap)


@pytest_asyncio.fixture
async def admin(cluster: Cluster) -> AsyncIterator[AdminClient]:
    client = AdminClient(bootstrap_servers=cluster.bootstrap, default_api_timeout_ms=30000)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique names (topics, groups, transactional ids) for this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return lambda prefix: f"{prefix}-{base}-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy (and return that), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def oracle_topic(cluster: Cluster, topic: str) -> Any:
    """The topic as librdkafka's metadata of every topic shows it, or None (asking for the topic
    by name would create it: librdkafka's Metadata request allows auto-creation)."""
    metadata = cluster.oracle().list_topics(timeout=10)
    meta = metadata.topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    return meta
