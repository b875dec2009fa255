"""The coordinators on a three-node cluster: ``__consumer_offsets`` and ``__transaction_state`` are
replicated topics, a group's (a transactional id's) coordinator is the leader of its partition,
and when that node dies the partition's new leader loads the group (the transactions), so the
group resumes from its committed offsets there and a transactional producer fences its
predecessor and continues."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from reference_broker.coordinator.group.records import partition_for
from reference_broker.coordinator.txn.records import partition_for as txn_partition_for
from reference_broker.testing import ClusterFactory, ClusterProcess
from reference_broker.testing import wait_until as until
from sdk import Consumer, Producer
from sdk import errors as sdk_errors

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
    """At the transactional id's coordinator (the node FindCoordinator names), a transaction
    holding only a group's ``__consumer_offsets`` partition, led by another node, is committed:
    the leader writes the COMMIT marker (its log end moves past it) and the transaction completes
    (the producer can start again), where a local write would have gone into the coordinator's
    follower replica."""
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

    bootstrap = connect(1)
    await _until_answer(
        lambda: bootstrap.send(FindCoordinatorRequest(key="any", key_type=0), version=3),
        lambda r: r.error_code == 0, "__consumer_offsets exists")
    found = await _until_answer(
        lambda: bootstrap.send(FindCoordinatorRequest(key="offsets-only", key_type=1), version=3),
        lambda r: r.error_code == 0, "the transactional id has a coordinator")
    await bootstrap.close()
    coordinator_id = found.node_id
    coordinator = connect(coordinator_id)
    elsewhere = {p: node for p in range(OFFSETS_PARTITIONS)
                 if (node := cluster.leader_of("__consumer_offsets", p)) != coordinator_id}
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


TXN_CONFIG: dict[str, Any] = {
    **CONFIG,
    "num.partitions": 3,
    "transaction.state.log.num.partitions": OFFSETS_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
}


async def read_committed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """What a read_committed consumer sees of ``topic`` (every partition, from the start), once
    it has ``count`` records and nothing more arrives for a moment (or after 45 s)."""
    got: list[bytes] = []
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=f"reader-{uuid.uuid4().hex[:8]}",
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        isolation_level="read_committed", fetch_max_wait_ms=100,
                        request_timeout_ms=5000) as consumer:
        deadline = time.monotonic() + 45
        quiet_until = None
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=300)
            for records in batches.values():
                got.extend(r.value for r in records)
            if len(got) >= count and not batches:
                quiet_until = quiet_until or time.monotonic() + 2
                if time.monotonic() > quiet_until:
                    break
    return got


async def transactions_across_a_coordinator_crash(cluster: ClusterProcess, topic: str) -> list[bytes]:
    """A transactional producer commits to every partition of ``topic``; a second transaction is
    open when the transaction coordinator's node is killed; a new producer with the same
    transactional id fences the first (aborting its open transaction) and commits another. The
    first producer can no longer commit. Returns the values that must be committed."""
    transactional_id = f"crash-{uuid.uuid4().hex[:8]}"
    txn_partition = txn_partition_for(transactional_id, OFFSETS_PARTITIONS)
    partitions = range(3)
    first = Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id,
                     request_timeout_ms=5000)
    await first.start()
    try:
        await first.begin_transaction()
        committed = [f"first-{p}-{i}".encode() for p in partitions for i in range(5)]
        for value in committed:
            await first.send(topic, value, partition=int(value.split(b"-")[1]))
        await first.commit_transaction()

        coordinator = cluster.leader_of("__transaction_state", txn_partition)
        await first.begin_transaction()
        for p in partitions:
            await first.send_and_wait(topic, f"aborted-{p}".encode(), partition=p)
        cluster.kill(coordinator)
        await asyncio.to_thread(
            until, lambda: cluster.leader_of("__transaction_state", txn_partition, timeout=30) != coordinator,
            "another node leads the transactional id's __transaction_state partition")

        async with Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id,
                            request_timeout_ms=5000) as second:
            await second.begin_transaction()
            later = [f"second-{p}-{i}".encode() for p in partitions for i in range(5)]
            for value in later:
                await second.send(topic, value, partition=int(value.split(b"-")[1]))
            await second.commit_transaction()
        with pytest.raises(sdk_errors.KafkaError) as fenced:
            await asyncio.wait_for(first.commit_transaction(), 60)
        error_name = type(fenced.value).__name__.lower()
        assert "fenced" in error_name or "epoch" in error_name, fenced.value
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(first.stop(), 30)
    return committed + later


def test_transactional_producer_fences_and_continues_after_its_coordinator_is_killed(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, TXN_CONFIG)
    topic = f"txn-crash-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    assert len({cluster.leader_of(topic, p) for p in range(3)}) >= 2, "the partitions share one leader"

    expected = asyncio.run(asyncio.wait_for(transactions_across_a_coordinator_crash(cluster, topic), 180))
    got = asyncio.run(read_committed(cluster.bootstrap, topic, len(expected)))
    assert sorted(got) == sorted(expected)
