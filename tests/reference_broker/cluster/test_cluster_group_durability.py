"""The group coordinator's writes on a three-node cluster are answered only once the ISR of their
``__consumer_offsets`` partition holds them (Kafka's CoordinatorRuntime completes a write when
the high watermark passes it), and what a write changes is not visible before that.

The window is made certain by pausing (SIGSTOP) the partition's followers: the ISR still names
them (``replica.lag.time.max.ms`` is long), so nothing the coordinator writes can be committed
and every write must wait, then time out as COORDINATOR_NOT_AVAILABLE (Kafka's mapping of
REQUEST_TIMED_OUT). With one follower left out of the ISR, ``min.insync.replicas`` decides:
at 2 the commit is acknowledged and survives the coordinator's SIGKILL; at 3 it is refused
with COORDINATOR_NOT_AVAILABLE (NOT_ENOUGH_REPLICAS mapped) and never shows in OffsetFetch.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from reference_broker.coordinator.group.records import partition_for
from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterFactory, ClusterProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    FindCoordinatorRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

OFFSETS_PARTITIONS = 3
OFFSETS = "__consumer_offsets"


def cluster_config(min_insync_replicas: int, replica_lag_ms: int) -> dict[str, Any]:
    return {
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
        "min.insync.replicas": min_insync_replicas,
        "num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "replica.lag.time.max.ms": replica_lag_ms,
    }


def connect(cluster: ClusterProcess, node_id: int) -> PeerConnection:
    host, port = cluster.node(node_id).bootstrap.rsplit(":", 1)
    return PeerConnection(host, int(port), client_id="durability-test")


async def until_answer(send: Callable[[], Awaitable[Any]], accept: Callable[[Any], bool], what: str,
                       timeout: float = 45.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = await send()
        except (TimeoutError, OSError, ConnectionError) as exc:
            response = exc
        if not isinstance(response, BaseException) and accept(response):
            return response
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}: last answer {response}")
        await asyncio.sleep(0.1)


def commit_request(group: str, topic: str, offset: int, generation: int = -1, member: str = "") -> Any:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])],
    )


async def commit(conn: PeerConnection, group: str, topic: str, offset: int) -> int:
    response: Any = await conn.send(commit_request(group, topic, offset), version=8)
    return int(response.topics[0].partitions[0].error_code)


async def fetched_offset(conn: PeerConnection, group: str, topic: str) -> int:
    """The group's committed offset of ``topic``-0 as OffsetFetch answers it (-1: none)."""
    response: Any = await conn.send(OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), version=7)
    assert response.error_code == E.NONE, response
    part = response.topics[0].partitions[0]
    assert part.error_code == E.NONE, response
    return int(part.committed_offset)


def setup(cluster: ClusterProcess) -> tuple[str, str, int, list[int]]:
    """A topic, a group, the group's coordinator and the other replicas of its partition, once the
    partition's ISR holds all three replicas."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(30)

    async def find() -> int:
        conn = connect(cluster, 1)
        try:
            found = await until_answer(
                lambda: conn.send(FindCoordinatorRequest(key=group, key_type=0), version=3),
                lambda r: r.error_code == E.NONE, "the group has a coordinator")
        finally:
            await conn.close()
        return int(found.node_id)

    asyncio.run(find())
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    cluster.wait_for(lambda: (p := cluster.partition(OFFSETS, offsets_partition)) is not None
                     and len(p.isr_nodes) == 3 and p.leader_id >= 0,
                     "the group's __consumer_offsets partition has its three replicas in sync")
    coordinator = cluster.leader_of(OFFSETS, offsets_partition)
    followers = [n for n in (1, 2, 3) if n != coordinator]
    return topic, group, coordinator, followers


def test_offset_commit_is_not_acknowledged_nor_visible_while_the_isr_lacks_it(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, cluster_config(2, 60_000))
    topic, group, coordinator, followers = setup(cluster)

    async def scenario() -> tuple[int, set[int]]:
        conn, reader = connect(cluster, coordinator), connect(cluster, coordinator)
        try:
            await until_answer(lambda: commit(conn, group, topic, 5), lambda code: code == E.NONE,
                               "the first commit is acknowledged")
            for node in followers:
                cluster.pause(node)
            try:
                pending = asyncio.ensure_future(commit(conn, group, topic, 7))
                seen: set[int] = set()
                while not pending.done():
                    seen.add(await fetched_offset(reader, group, topic))
                    await asyncio.sleep(0.05)
                return pending.result(), seen
            finally:
                for node in followers:
                    cluster.resume(node)
        finally:
            await conn.close()
            await reader.close()

    code, seen = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert (E(code).name, sorted(seen)) == ("COORDINATOR_NOT_AVAILABLE", [5]), (
        "the unreplicated commit of 7: (its answer, what OffsetFetch saw meanwhile)")


def test_sync_group_is_not_acknowledged_while_the_isr_lacks_the_assignment(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, cluster_config(2, 60_000))
    _topic, group, coordinator, followers = setup(cluster)

    async def scenario() -> int:
        conn = connect(cluster, coordinator)
        try:
            join = JoinGroupRequest(
                group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000, member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
            joined = await until_answer(lambda: conn.send(join, version=3), lambda r: r.error_code == E.NONE,
                                        "the member joined")
            for node in followers:
                cluster.pause(node)
            try:
                synced: Any = await conn.send(SyncGroupRequest(
                    group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                    assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                        member_id=joined.member_id, assignment=b"assigned")]), version=3)
                return int(synced.error_code)
            finally:
                for node in followers:
                    cluster.resume(node)
        finally:
            await conn.close()

    code = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert code == E.COORDINATOR_NOT_AVAILABLE, f"the unreplicated assignment was answered {E(code).name}"


def _shrink_isr(cluster: ClusterProcess, group: str, coordinator: int, paused: int) -> None:
    """Pause follower ``paused`` until the coordinator's own metadata shows the ISR without it."""
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    cluster.pause(paused)
    cluster.wait_for(
        lambda: (p := cluster.partition(OFFSETS, offsets_partition, via=coordinator)) is not None
        and paused not in p.isr_nodes and len(p.isr_nodes) == 2,
        "the paused follower left the ISR")


def test_offset_commit_below_min_insync_replicas_is_refused_and_not_visible(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, cluster_config(3, 2000))
    topic, group, coordinator, followers = setup(cluster)

    async def first_commit() -> None:
        conn = connect(cluster, coordinator)
        try:
            await until_answer(lambda: commit(conn, group, topic, 5), lambda code: code == E.NONE,
                               "the first commit is acknowledged")
        finally:
            await conn.close()

    asyncio.run(first_commit())
    _shrink_isr(cluster, group, coordinator, followers[0])

    async def scenario() -> tuple[int, int]:
        conn = connect(cluster, coordinator)
        try:
            code = await commit(conn, group, topic, 9)
            return code, await fetched_offset(conn, group, topic)
        finally:
            await conn.close()

    try:
        code, visible = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        cluster.resume(followers[0])
    assert (E(code).name, visible) == ("COORDINATOR_NOT_AVAILABLE", 5), (
        "a commit of 9 below min.insync.replicas: (its answer, the offset OffsetFetch answers after it)")


def test_acknowledged_commit_with_one_follower_out_of_the_isr_survives_the_coordinator_kill(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, cluster_config(2, 2000))
    topic, group, coordinator, followers = setup(cluster)
    out_of_sync, in_sync = followers
    _shrink_isr(cluster, group, coordinator, out_of_sync)

    async def acknowledged() -> int:
        conn = connect(cluster, coordinator)
        try:
            return await commit(conn, group, topic, 11)
        finally:
            await conn.close()

    try:
        code = asyncio.run(asyncio.wait_for(acknowledged(), 60))
    finally:
        cluster.resume(out_of_sync)
    assert code == E.NONE, f"a commit the ISR (2 of min.insync.replicas 2) holds was answered {E(code).name}"
    cluster.kill(coordinator)
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    new_leader = cluster.wait_for(
        lambda: (p := cluster.partition(OFFSETS, offsets_partition, via=in_sync)) is not None
        and p.leader_id not in (-1, coordinator) and p.leader_id,
        "another node leads the group's partition", timeout=60)

    async def read_back() -> int:
        conn = connect(cluster, int(new_leader))
        try:
            wanted = [OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]
            response = await until_answer(
                lambda: conn.send(OffsetFetchRequest(group_id=group, topics=wanted), version=7),
                lambda r: r.error_code == E.NONE and r.topics[0].partitions[0].error_code == E.NONE,
                "the new coordinator answers OffsetFetch", timeout=60)
            return int(response.topics[0].partitions[0].committed_offset)
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(read_back(), 90)) == 11
