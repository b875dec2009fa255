"""What a classic group shows while the leader's SyncGroup assignment is not committed, and after
that write fails, on a three-node cluster (Kafka 4.1's ``GroupMetadataManager``: the SyncGroup
record is appended without replay and the assignment is set on the members, the group made
Stable, only in the write's append future once committed; a failed append resets the members'
assignments, answers every waiting SyncGroup with the mapped error and prepares a rebalance).

``ClassicGroup``'s fields are plain (not timeline-backed), so DescribeGroups shows the group's
current in-memory state: CompletingRebalance without the assignment while the write waits,
PreparingRebalance once it failed. The window is made certain by pausing (SIGSTOP) both
followers of the group's ``__consumer_offsets`` partition (the ISR still names them, so nothing
can be committed until ``offsets.commit.timeout.ms`` fails the write).

A KIP-848 ``ConsumerGroup`` is timeline-backed: ConsumerGroupDescribe, ListGroups and
OffsetFetch's member check read it at the partition's last committed offset
(``scheduleReadOperation``), so a member whose join is not committed is not shown, and is shown
once its records commit (a write that timed out is not reverted: only its request failed).
OffsetFetch with require_stable is a write operation instead: it checks the member as written
last and answers once the partition's writes are committed. A node that takes a partition over
loads its log to the end but shows the records past its high watermark only as they commit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from reference_broker.coordinator.group.records import partition_for
from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterFactory, ClusterProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    DescribeQuorumRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from tests.reference_broker.cluster.test_cluster_group_durability import (
    OFFSETS,
    OFFSETS_PARTITIONS,
    cluster_config,
    connect,
    setup,
    until_answer,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def join_request(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000, member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"meta")])


async def described(conn: PeerConnection, group: str) -> tuple[str, list[tuple[str, bytes]]]:
    """The group's state and its members' (id, assignment) as DescribeGroups answers them."""
    response: Any = await conn.send(DescribeGroupsRequest(groups=[group]), version=5)
    found = response.groups[0]
    assert found.error_code == E.NONE, response
    return found.group_state, [(m.member_id, bytes(m.member_assignment)) for m in found.members]


def test_uncommitted_assignment_is_not_shown_and_its_failure_makes_the_member_rejoin(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, cluster_config(2, 60_000))
    _topic, group, coordinator, followers = setup(cluster)

    async def scenario() -> dict[str, Any]:
        conn, reader = connect(cluster, coordinator), connect(cluster, coordinator)
        seen: dict[str, Any] = {}
        try:
            joined = await until_answer(lambda: conn.send(join_request(group), version=3),
                                        lambda r: r.error_code == E.NONE, "the member joined")
            member = joined.member_id
            for node in followers:
                cluster.pause(node)
            try:
                pending = asyncio.ensure_future(conn.send(SyncGroupRequest(
                    group_id=group, generation_id=joined.generation_id, member_id=member,
                    assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                        member_id=member, assignment=b"assigned")]), version=3))
                views: list[tuple[str, tuple[tuple[str, bytes], ...]]] = []
                while not pending.done():
                    state, members = await described(reader, group)
                    views.append((state, tuple(members)))
                    await asyncio.sleep(0.05)
                seen["sync answer"] = E(int(cast(Any, pending.result()).error_code)).name
                seen["after the failure"] = await described(reader, group)
                failed_view = (seen["after the failure"][0], tuple(seen["after the failure"][1]))
                if views and views[-1] == failed_view:
                    # The last DescribeGroups may be answered after the write failed and before
                    # the SyncGroup's answer reached the client (two connections, no order).
                    views.pop()
                seen["while pending"] = sorted(set(views))
            finally:
                for node in followers:
                    cluster.resume(node)
            rejoined = await until_answer(lambda: conn.send(join_request(group, member), version=3),
                                          lambda r: r.error_code == E.NONE, "the member rejoined")
            seen["rejoined generation"] = rejoined.generation_id - joined.generation_id
            synced = await until_answer(lambda: conn.send(SyncGroupRequest(
                group_id=group, generation_id=rejoined.generation_id, member_id=member,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member, assignment=b"second")]), version=3),
                lambda r: r.error_code == E.NONE, "the second assignment is answered")
            seen["second assignment"] = bytes(synced.assignment)
            seen["after the commit"] = await described(reader, group)
            seen["member"] = member
        finally:
            await conn.close()
            await reader.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(scenario(), 120))
    member = seen["member"]
    assert seen["while pending"] == [("CompletingRebalance", ((member, b""),))], seen
    assert seen["sync answer"] == "COORDINATOR_NOT_AVAILABLE", seen
    assert seen["after the failure"] == ("PreparingRebalance", [(member, b"")]), seen
    assert seen["rejoined generation"] == 1, seen
    assert seen["second assignment"] == b"second", seen
    assert seen["after the commit"] == ("Stable", [(member, b"second")]), seen


def test_new_coordinator_shows_the_committed_assignment_not_the_pending_one(
    reference_cluster: ClusterFactory,
) -> None:
    """An assignment committed in generation 1, a second one written in generation 2 while the
    followers are paused, then the coordinator killed: the node that takes the partition over
    loads the group as its log holds it (Kafka's loader replays the new leader's log), Stable
    with one whole assignment. Which one is not fixed, in Kafka as here: a follower's fetch
    waiting at the leader is answered with the second record as it is appended, and a paused
    follower reads that answer when it resumes, so the new leader may hold and commit it."""
    cluster = reference_cluster(3, cluster_config(2, 60_000))
    _topic, group, coordinator, followers = setup(cluster)

    async def write_two_generations() -> str:
        conn, reader = connect(cluster, coordinator), connect(cluster, coordinator)
        try:
            joined = await until_answer(lambda: conn.send(join_request(group), version=3),
                                        lambda r: r.error_code == E.NONE, "the member joined")
            member = joined.member_id
            await until_answer(lambda: conn.send(SyncGroupRequest(
                group_id=group, generation_id=joined.generation_id, member_id=member,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member, assignment=b"first")]), version=3),
                lambda r: r.error_code == E.NONE, "the first assignment is committed")
            rejoined = await until_answer(lambda: conn.send(join_request(group, member), version=3),
                                          lambda r: r.error_code == E.NONE, "the leader rejoined")
            assert rejoined.generation_id == joined.generation_id + 1, rejoined
            for node in followers:
                cluster.pause(node)
            pending = asyncio.ensure_future(conn.send(SyncGroupRequest(
                group_id=group, generation_id=rejoined.generation_id, member_id=member,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member, assignment=b"second")]), version=3))
            for _ in range(3):  # the SyncGroup is on its way before the coordinator dies
                assert (await described(reader, group))[0] == "CompletingRebalance"
            assert not pending.done(), pending
            pending.cancel()
            return str(member)
        finally:
            await conn.close()
            await reader.close()

    try:
        member = asyncio.run(asyncio.wait_for(write_two_generations(), 90))
        cluster.kill(coordinator)
    finally:
        for node in followers:
            cluster.resume(node)
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    new_leader = cluster.wait_for(
        lambda: (p := cluster.partition(OFFSETS, offsets_partition, via=followers[0])) is not None
        and p.leader_id not in (-1, coordinator) and p.leader_id,
        "another node leads the group's partition", timeout=60)

    async def read_back() -> tuple[str, list[tuple[str, bytes]]]:
        conn = connect(cluster, int(new_leader))
        try:
            answer = await until_answer(
                lambda: conn.send(DescribeGroupsRequest(groups=[group]), version=5),
                lambda r: r.groups[0].error_code == E.NONE, "the new coordinator describes the group",
                timeout=60)
            found = answer.groups[0]
            return found.group_state, [(m.member_id, bytes(m.member_assignment)) for m in found.members]
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(read_back(), 90)) in (
        ("Stable", [(member, b"first")]), ("Stable", [(member, b"second")]))


@dataclass
class PendingJoin:
    """What a probe saw while a second member's join of a consumer group was not committed, and
    after the write committed once the followers resumed."""

    #: every distinct answer of the probe while the join waited
    while_pending: list[Any]
    #: the join's ConsumerGroupHeartbeat answer
    answer: str
    #: the probe's answer once ConsumerGroupDescribe shows the second member
    after_commit: Any
    #: ConsumerGroupDescribe's (member id, member epoch) then
    members: list[tuple[str, int]]


def second_member_joins_uncommitted(
    cluster: ClusterFactory, probe: Callable[[PeerConnection, str, str], Awaitable[Any]],
) -> PendingJoin:
    """A consumer group's member "first" joins (committed); "second" joins while both followers
    of the group's ``__consumer_offsets`` partition are paused, so its records cannot commit
    and the heartbeat fails after ``offsets.commit.timeout.ms``. ``probe(reader, group, topic)``
    runs against the coordinator throughout the window and again once the followers resumed and
    the records committed (Kafka's runtime does not revert a write that timed out: its records
    stay in the log and commit later)."""
    process = cluster(3, cluster_config(2, 60_000))
    topic, group, coordinator, followers = setup(process)

    def join(member: str) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic], topic_partitions=[])

    async def described(conn: PeerConnection) -> list[tuple[str, int]]:
        answer: Any = await conn.send(ConsumerGroupDescribeRequest(group_ids=[group]), version=0)
        return sorted((m.member_id, m.member_epoch) for m in answer.groups[0].members)

    async def scenario() -> PendingJoin:
        conn, reader = connect(process, coordinator), connect(process, coordinator)
        try:
            await until_answer(lambda: conn.send(join("first"), version=0),
                               lambda r: r.error_code == E.NONE, "the first member joined")
            for node in followers:
                process.pause(node)
            try:
                pending = asyncio.ensure_future(conn.send(join("second"), version=0))
                views: list[Any] = []
                while not pending.done():
                    seen = await probe(reader, group, topic)
                    if seen not in views:
                        views.append(seen)
                    await asyncio.sleep(0.05)
                answer = E(int(cast(Any, pending.result()).error_code)).name
            finally:
                for node in followers:
                    process.resume(node)
            members = await until_answer(lambda: described(reader), lambda m: len(m) == 2,
                                         "the second member's records committed")
            return PendingJoin(views, answer, await probe(reader, group, topic), members)
        finally:
            await conn.close()
            await reader.close()

    return asyncio.run(asyncio.wait_for(scenario(), 90))


def test_consumer_group_member_joining_uncommitted_is_not_described(
    reference_cluster: ClusterFactory,
) -> None:
    """KIP-848: a second member's join, written while both followers are paused, is not shown by
    ConsumerGroupDescribe until committed (Kafka's ``scheduleReadOperation`` reads the timeline
    at ``lastCommittedOffset``); its heartbeat is answered COORDINATOR_NOT_AVAILABLE, and the
    member is described once its records commit."""

    async def members(conn: PeerConnection, group: str, _topic: str) -> list[str]:
        answer: Any = await conn.send(ConsumerGroupDescribeRequest(group_ids=[group]), version=0)
        return sorted(m.member_id for m in answer.groups[0].members)

    seen = second_member_joins_uncommitted(reference_cluster, members)
    assert seen.while_pending == [["first"]], seen
    assert seen.answer == "COORDINATOR_NOT_AVAILABLE", seen
    assert seen.after_commit == ["first", "second"], seen


def test_list_groups_shows_the_consumer_group_state_as_committed(
    reference_cluster: ClusterFactory,
) -> None:
    """ListGroups reads the groups at the last committed offset (Kafka's ``listGroups`` through
    ``scheduleReadAllOperation``): the group stays Stable while the second member's join, which
    makes it Reconciling (the first member must give partitions up), is not committed."""

    async def listed(conn: PeerConnection, group: str, _topic: str) -> list[tuple[str, str]]:
        answer: Any = await conn.send(ListGroupsRequest(types_filter=["consumer"]), version=5)
        assert answer.error_code == E.NONE, answer
        return [(g.group_type, g.group_state) for g in answer.groups if g.group_id == group]

    seen = second_member_joins_uncommitted(reference_cluster, listed)
    assert seen.while_pending == [[("consumer", "Stable")]], seen
    assert seen.answer == "COORDINATOR_NOT_AVAILABLE", seen
    assert seen.after_commit == [("consumer", "Reconciling")], seen


def test_offset_fetch_checks_the_member_as_committed(
    reference_cluster: ClusterFactory,
) -> None:
    """OffsetFetch v9 checks its member id and epoch against the group at the last committed
    offset (Kafka's ``ConsumerGroup.validateOffsetFetch`` in a read operation): the second member,
    with the epoch its uncommitted join gives it, is UNKNOWN_MEMBER_ID until the join commits."""

    async def fetched(conn: PeerConnection, group: str, topic: str) -> tuple[str, str]:
        codes = []
        for member, epoch in (("first", 1), ("second", 2)):
            wanted = OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group, member_id=member, member_epoch=epoch,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])
            answer: Any = await conn.send(OffsetFetchRequest(groups=[wanted]), version=9)
            codes.append(E(int(answer.groups[0].error_code)).name)
        return codes[0], codes[1]

    seen = second_member_joins_uncommitted(reference_cluster, fetched)
    assert seen.members == [("first", 1), ("second", 2)], seen
    assert seen.while_pending == [("NONE", "UNKNOWN_MEMBER_ID")], seen
    assert seen.answer == "COORDINATOR_NOT_AVAILABLE", seen
    assert seen.after_commit == ("NONE", "NONE"), seen


def test_stable_offset_fetch_waits_for_the_partition_writes_to_commit(
    reference_cluster: ClusterFactory,
) -> None:
    """OffsetFetch with require_stable is Kafka's write operation (``fetchOffsets`` through
    ``scheduleWriteOperation``): "second"'s join, written while both followers are paused, lets
    its member check pass, but the answer waits for the partition's writes to commit. Kept
    paused past ``offsets.commit.timeout.ms`` the fetch is NOT_COORDINATOR (Kafka's
    ``handleOffsetFetchException``); asked again and the followers resumed, it answers once the
    join commits. A fetch without require_stable reads the committed group meanwhile."""
    cluster = reference_cluster(3, cluster_config(2, 60_000))
    topic, group, coordinator, followers = setup(cluster)

    def fetch(member: str, epoch: int, stable: bool) -> OffsetFetchRequest:
        return OffsetFetchRequest(require_stable=stable, groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, member_id=member, member_epoch=epoch,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])])

    async def code(answer: Awaitable[Any]) -> str:
        return E(int((await answer).groups[0].error_code)).name

    async def scenario() -> dict[str, Any]:
        conn, reader = connect(cluster, coordinator), connect(cluster, coordinator)
        seen: dict[str, Any] = {}
        try:
            await until_answer(lambda: conn.send(ConsumerGroupHeartbeatRequest(
                group_id=group, member_id="first", member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_names=[topic], topic_partitions=[]), version=0),
                lambda r: r.error_code == E.NONE, "the first member joined")
            for node in followers:
                cluster.pause(node)
            try:
                joining = asyncio.ensure_future(conn.send(ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="second", member_epoch=0, rebalance_timeout_ms=30_000,
                    subscribed_topic_names=[topic], topic_partitions=[]), version=0))
                await asyncio.sleep(0.5)  # the join's records are appended
                started = time.monotonic()
                seen["stable, kept paused"] = await code(reader.send(fetch("second", 2, True), version=9))
                seen["waited"] = time.monotonic() - started >= 4.0
                seen["join answer"] = E(int(cast(Any, await joining).error_code)).name
                seen["committed view"] = await code(reader.send(fetch("second", 2, False), version=9))
                stable = asyncio.ensure_future(code(reader.send(fetch("second", 2, True), version=9)))
                await asyncio.sleep(1.0)
                seen["answered while paused"] = stable.done()
            finally:
                for node in followers:
                    cluster.resume(node)
            seen["stable, resumed"] = await stable
            seen["committed view, resumed"] = await code(reader.send(fetch("second", 2, False), version=9))
        finally:
            await conn.close()
            await reader.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert seen == {
        "stable, kept paused": "NOT_COORDINATOR", "waited": True,
        "join answer": "COORDINATOR_NOT_AVAILABLE", "committed view": "UNKNOWN_MEMBER_ID",
        "answered while paused": False,
        "stable, resumed": "NONE", "committed view, resumed": "NONE",
    }, seen


def active_controller(cluster: ClusterProcess) -> int:
    """The metadata quorum's leader, as node 1 describes it."""

    async def ask() -> int:
        conn = connect(cluster, 1)
        try:
            answer: Any = await conn.send(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata",
                partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]))
            return int(answer.topics[0].partitions[0].leader_id)
        finally:
            await conn.close()

    return asyncio.run(ask())


def test_new_coordinator_shows_the_records_past_its_high_watermark_only_once_committed(
    reference_cluster: ClusterFactory,
) -> None:
    """The node taking a ``__consumer_offsets`` partition over reads its log to the end, but
    ConsumerGroupDescribe reads the groups at the high watermark (Kafka's timeline starts its
    last committed offset there) and shows the rest as the high watermark passes it.

    The group's partition has the replicas [coordinator, successor, controller]. The active
    controller may not open connections to the other two nodes (its replicas fetch nothing;
    the quorum and the heartbeats flow the other way), so "second"'s join, written by the
    coordinator, reaches the successor's log only, and is not committed: the controller is in
    the ISR (``replica.lag.time.max.ms`` is long) without it. The coordinator is killed, the
    successor leads and loads the join past its high watermark; healed, the controller fetches
    the join from it and it commits."""
    cluster = reference_cluster(3, {**cluster_config(2, 60_000), "offsets.topic.num.partitions": 6})
    controller = active_controller(cluster)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(30)

    async def create_offsets_topic() -> None:
        conn = connect(cluster, 1)
        try:
            await until_answer(lambda: conn.send(FindCoordinatorRequest(key="any", key_type=0), version=3),
                               lambda r: r.error_code == E.NONE, "__consumer_offsets exists")
        finally:
            await conn.close()

    asyncio.run(create_offsets_topic())

    def placed(index: int) -> list[int] | None:
        part = cluster.partition(OFFSETS, index)
        if part is None or len(part.isr_nodes) != 3 or part.leader_id != part.replica_nodes[0]:
            return None
        return list(part.replica_nodes)

    layouts = cluster.wait_for(lambda: (found := [placed(i) for i in range(6)]) and all(found) and found,
                               "every __consumer_offsets partition has its three replicas in sync")
    wanted = next((i for i, r in enumerate(layouts) if controller not in r[:2]), None)
    assert wanted is not None, f"no partition led by another node than {controller} first: {layouts}"
    coordinator, successor = layouts[wanted][:2]
    names = (f"g-{uuid.uuid4().hex[:8]}" for _ in range(1000))
    group = next(g for g in names if partition_for(g, 6) == wanted)

    def join(member: str) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic], topic_partitions=[])

    async def write_uncommitted_join() -> None:
        conn = connect(cluster, coordinator)
        try:
            await until_answer(lambda: conn.send(join("first"), version=0),
                               lambda r: r.error_code == E.NONE, "the first member joined")
            for node in (coordinator, successor):
                cluster.cut(controller, node, both_ways=False)
            pending = asyncio.ensure_future(conn.send(join("second"), version=0))
            await asyncio.sleep(1.0)  # the successor fetches the join
            assert not pending.done(), pending
            pending.cancel()
        finally:
            await conn.close()

    async def members(conn: PeerConnection) -> list[str]:
        answer: Any = await conn.send(ConsumerGroupDescribeRequest(group_ids=[group]), version=0)
        found = answer.groups[0]
        assert found.error_code == E.NONE, answer
        return sorted(m.member_id for m in found.members)

    async def read_back() -> dict[str, Any]:
        conn = connect(cluster, successor)
        seen: dict[str, Any] = {}
        try:
            await until_answer(lambda: conn.send(ConsumerGroupDescribeRequest(group_ids=[group]), version=0),
                               lambda r: r.groups[0].error_code == E.NONE, "the successor loaded the group",
                               timeout=60)
            views = []
            for _ in range(5):
                views.append(await members(conn))
                await asyncio.sleep(0.1)
            seen["loaded"] = views
            cluster.heal(controller)
            seen["committed"] = await until_answer(lambda: members(conn), lambda m: len(m) == 2,
                                                   "the join commits", timeout=60)
        finally:
            await conn.close()
        return seen

    try:
        asyncio.run(asyncio.wait_for(write_uncommitted_join(), 60))
        cluster.kill(coordinator)
        cluster.wait_for(lambda: getattr(cluster.partition(OFFSETS, wanted, via=successor), "leader_id", -1)
                         == successor, f"node {successor} leads {OFFSETS}-{wanted}", timeout=60)
        seen = asyncio.run(asyncio.wait_for(read_back(), 120))
    finally:
        cluster.heal()
    assert seen == {"loaded": [["first"]] * 5, "committed": ["first", "second"]}, seen
