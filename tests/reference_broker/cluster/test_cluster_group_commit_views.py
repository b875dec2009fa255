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
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    DescribeGroupsRequest,
    JoinGroupRequest,
    SyncGroupRequest,
)
from tests.reference_broker.cluster.test_cluster_group_durability import (
    cluster_config,
    connect,
    setup,
    until_answer,
)

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
                views: set[tuple[str, tuple[tuple[str, bytes], ...]]] = set()
                while not pending.done():
                    state, members = await described(reader, group)
                    views.add((state, tuple(members)))
                    await asyncio.sleep(0.05)
                seen["while pending"] = sorted(views)
                seen["sync answer"] = E(int(pending.result().error_code)).name
                seen["after the failure"] = await described(reader, group)
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
