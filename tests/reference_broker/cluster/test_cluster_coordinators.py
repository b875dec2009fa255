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
from reference_broker.testing import ClusterFactory, ClusterProcess
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



async def _until_answer(send: Callable[[], Any], accept: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + 30
    while True:
        response = await send()
        if accept(response):
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}: last answer {response}")
        await asyncio.sleep(0.1)


async def transaction_of_offsets_only(cluster: ClusterProcess) -> None:
    """On node 1 (the transaction coordinator the requests go to), a transaction holding only a
    group's ``__consumer_offsets`` partition, led by another node, is committed: the leader writes
    the COMMIT marker (its log end moves past it) and the transaction completes (the producer can
    start again), where a local write would have gone into node 1's follower replica."""
    from reference_broker.network.peer import PeerConnection
    from sdk.protocol.messages import (
        AddOffsetsToTxnRequest,
        EndTxnRequest,
        FindCoordinatorRequest,
        InitProducerIdRequest,
        ListOffsetsRequest,
    )

    def connect(node_id: int) -> PeerConnection:
        host, port = cluster.node(node_id).bootstrap.rsplit(":", 1)
        return PeerConnection(host, int(port), client_id="test")

    coordinator = connect(1)
    await _until_answer(
        lambda: coordinator.send(FindCoordinatorRequest(key="any", key_type=0), version=3),
        lambda r: r.error_code == 0, "__consumer_offsets exists")
    elsewhere = {p: node for p in range(OFFSETS_PARTITIONS)
                 if (node := cluster.leader_of("__consumer_offsets", p)) != 1}
    group = next(g for g in (f"group-{i}" for i in range(1000))
                 if partition_for(g, OFFSETS_PARTITIONS) in elsewhere)
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    leader = connect(elsewhere[offsets_partition])

    async def log_end() -> int:
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="__consumer_offsets", partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=offsets_partition, timestamp=-1)])])
        response: Any = await leader.send(request, version=5)
        return int(response.topics[0].partitions[0].offset)

    before = await log_end()
    init = InitProducerIdRequest(transactional_id="offsets-only", transaction_timeout_ms=60_000)
    producer = await _until_answer(lambda: coordinator.send(init, version=4), lambda r: r.error_code == 0,
                                   "the producer has an id")
    pid, epoch = producer.producer_id, producer.producer_epoch
    added: Any = await coordinator.send(AddOffsetsToTxnRequest(
        transactional_id="offsets-only", producer_id=pid, producer_epoch=epoch, group_id=group), version=3)
    assert added.error_code == 0
    ended: Any = await coordinator.send(EndTxnRequest(
        transactional_id="offsets-only", producer_id=pid, producer_epoch=epoch, committed=True), version=4)
    assert ended.error_code == 0
    await _until_answer(log_end, lambda end: end == before + 1, "the leader holds the COMMIT marker")
    await _until_answer(lambda: coordinator.send(init, version=4), lambda r: r.error_code == 0,
                        "the transaction is complete")
    await coordinator.close()
    await leader.close()


def test_transaction_markers_go_to_the_partition_leader_on_another_node(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, CONFIG)
    asyncio.run(asyncio.wait_for(transaction_of_offsets_only(cluster), 90))
