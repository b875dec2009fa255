"""The group coordinator on a three-node cluster: ``__consumer_offsets`` is a replicated topic, a
group's coordinator is the leader of its partition, and when that node dies the partition's new
leader loads the group, so the group resumes from its committed offsets there."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from reference_broker.coordinator.group.records import partition_for
from reference_broker.testing import ClusterFactory
from sdk import Consumer, Producer

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

OFFSETS_PARTITIONS = 3
CONFIG: dict[str, Any] = {
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "min.insync.replicas": 2,
    "num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "replica.lag.time.max.ms": 3000,
}


def until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True) as producer:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)


async def consume(bootstrap: str, topic: str, group: str, count: int, *, commit: bool) -> list[bytes]:
    """``count`` records of ``topic`` read in ``group`` from its committed offsets (the earliest
    without one); their offsets committed when ``commit``."""
    got: list[bytes] = []
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, fetch_max_wait_ms=100,
                        request_timeout_ms=5000) as consumer:
        deadline = time.monotonic() + 45
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=300, max_records=count - len(got))
            for records in batches.values():
                got.extend(r.value for r in records)
        if commit:
            await consumer.commit()
    return got


def test_group_resumes_from_committed_offsets_after_its_coordinator_is_killed(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, CONFIG)
    topic, group = f"resume-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(30)
    values = [f"record-{i}".encode() for i in range(20)]
    asyncio.run(produce(cluster.bootstrap, topic, values))

    first = asyncio.run(consume(cluster.bootstrap, topic, group, 12, commit=True))
    assert first == values[:12]
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    coordinator = cluster.leader_of("__consumer_offsets", offsets_partition, timeout=30)
    cluster.kill(coordinator)
    until(lambda: cluster.leader_of("__consumer_offsets", offsets_partition, timeout=30) != coordinator,
          "another node leads the group's __consumer_offsets partition")

    rest = asyncio.run(consume(cluster.bootstrap, topic, group, 8, commit=False))
    assert rest == values[12:]

