"""Three combined-mode node processes on 127.0.1.1-3 elect one raft leader, which DescribeQuorum
names on each controller listener and on a broker listener (forwarded to the leader); killed
with -9, the leader is replaced by another voter in a higher epoch, and back again it follows
the new leader and catches up."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.network.peer import PeerConnection, PeerConnectionError
from reference_broker.testing import BrokerProcess
from sdk.protocol.messages import DescribeClusterRequest, DescribeQuorumRequest
from tests.apache_kafka import unavailable_reason
from tests.oracles.kafka_tools import run_tool

pytestmark = [pytest.mark.interop, pytest.mark.slow]

NODES = 3


def _cpu_seconds(pid: int | None) -> float:
    """User and system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def until(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def describe_cluster(host: str, port: int, endpoint_type: int) -> Any:
    async def ask() -> Any:
        conn = PeerConnection(host, port, client_id="quorum-test", connect_timeout_s=2,
                              request_timeout_s=2)
        try:
            return await conn.send(DescribeClusterRequest(endpoint_type=endpoint_type))
        finally:
            await conn.close()

    return asyncio.run(ask())


def describe_quorum(host: str, port: int) -> Any:
    async def ask() -> Any:
        conn = PeerConnection(host, port, client_id="quorum-test", connect_timeout_s=2,
                              request_timeout_s=2)
        try:
            request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata",
                partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
            response: Any = await conn.send(request)
            return response.topics[0].partitions[0]
        finally:
            await conn.close()

    try:
        return asyncio.run(ask())
    except (PeerConnectionError, OSError):
        return None


@pytest.fixture
def quorum(tmp_path: Any) -> Iterator[tuple[list[BrokerProcess], list[tuple[str, int]]]]:
    hosts = [f"127.0.1.{n}" for n in range(1, NODES + 1)]
    client_ports = [free_port(h) for h in hosts]
    controllers = [(h, free_port(h)) for h in hosts]
    voters = ",".join(f"{n}@{h}:{p}" for n, (h, p) in enumerate(controllers, 1))
    nodes = []
    for n in range(1, NODES + 1):
        host = hosts[n - 1]
        nodes.append(BrokerProcess(config={
            "node.id": n,
            "process.roles": "broker,controller",
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{host}:{client_ports[n - 1]},"
                         f"CONTROLLER://{host}:{controllers[n - 1][1]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "cluster.id": "cDVJ2f7NQWm0mzWq2i8Rtw",
        }, host=host, port=client_ports[n - 1]))
    try:
        for node in nodes:
            node.start()
        yield nodes, controllers
    finally:
        for node in nodes:
            node.stop()


def leader_seen_by_all(controllers: list[tuple[str, int]], alive: list[int]) -> Any:
    """(leader id, epoch) when the leader's DescribeQuorum answers and every live node agrees."""
    answers = [describe_quorum(*controllers[i]) for i in alive]
    if any(a is None for a in answers):
        return None
    views = {(a.leader_id, a.leader_epoch) for a in answers}
    if len(views) != 1:
        return None
    leader, epoch = views.pop()
    if leader < 0:
        return None
    led = [a for a in answers if a.error_code == 0]
    if len(led) != 1 or led[0].high_watermark < 1:
        return None
    return leader, epoch, led[0]


def test_one_leader_then_a_new_one_in_a_higher_epoch_after_kill(quorum: Any) -> None:
    nodes, controllers = quorum
    leader, epoch, described = until(
        lambda: leader_seen_by_all(controllers, [0, 1, 2]), "the three nodes agree on a leader")
    assert {v.replica_id for v in described.current_voters} == {1, 2, 3}
    # Idle, no node spins: the leader's loop sleeps until its timers and it holds the voters'
    # Fetches (a busy loop or Fetches answered at once took 0.2-0.8 CPU s per second). A spin
    # costs that in every window, while one-off work (what is left of startup, a collection, a
    # timer late on a loaded runner) lands in one: each node is measured over up to three 3 s
    # windows and is judged by its quietest.
    quietest: dict[int | None, float] = {}
    windows: list[dict[int | None, float]] = []
    while len(windows) < 3 and not (quietest and all(s < 0.3 for s in quietest.values())):
        before = {node.pid: _cpu_seconds(node.pid) for node in nodes}
        time.sleep(3)
        windows.append({pid: _cpu_seconds(pid) - seconds for pid, seconds in before.items()})
        quietest = {pid: min(w[pid] for w in windows) for pid in windows[-1]}
    assert all(s < 0.3 for s in quietest.values()), f"CPU seconds per 3 s idle window: {windows}"
    follower = nodes[leader % NODES]  # a broker listener of a node that does not lead
    via_broker = describe_quorum(follower.host, follower.port)
    assert (via_broker.error_code, via_broker.leader_id, via_broker.leader_epoch) == (0, leader, epoch)
    # DescribeCluster on a controller listener describes the registered controllers (KIP-919:
    # each registers itself once caught up) at their controller endpoints
    described_cluster = until(
        lambda: (answer := describe_cluster(*controllers[leader % NODES], endpoint_type=2))
        and len(answer.brokers) == NODES and answer,
        "the three controllers are registered")
    assert (described_cluster.error_code, described_cluster.endpoint_type,
            described_cluster.controller_id) == (0, 2, leader)
    assert [(b.broker_id, b.host, b.port) for b in described_cluster.brokers] == [
        (n, h, p) for n, (h, p) in enumerate(controllers, 1)]
    assert describe_cluster(*controllers[0], endpoint_type=1).error_code == 114  # MISMATCHED
    if unavailable_reason() is None:  # Kafka's own tools, when its jars are there
        status = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                          follower.bootstrap, "describe", "--status")
        assert status.returncode == 0, status.stderr
        assert f"LeaderId:               {leader}\n" in status.stdout
        assert '[{"id": 1}, {"id": 2}, {"id": 3}]' in status.stdout
        host, port = controllers[leader % NODES]
        a_controller = f"{host}:{port}"
        via_controller = run_tool("org.apache.kafka.tools.MetadataQuorumCommand",
                                  "--bootstrap-controller", a_controller, "describe", "--status")
        assert via_controller.returncode == 0, via_controller.stderr
        assert f"LeaderId:               {leader}\n" in via_controller.stdout
        features = run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-controller",
                            a_controller, "describe")
        assert features.returncode == 0, features.stderr
        assert "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3" in features.stdout
        assert "FinalizedVersionLevel: 4.1-IV1" in features.stdout, features.stdout
    nodes[leader - 1].kill()
    alive = [i for i in range(NODES) if i != leader - 1]
    new_leader, new_epoch, _ = until(
        lambda: (lambda v: v if v and v[0] != leader else None)(
            leader_seen_by_all(controllers, alive)),
        "the two live nodes elect another leader")
    assert new_leader != leader and new_epoch > epoch

    nodes[leader - 1].start()  # the old leader comes back from its quorum-state and log

    def rejoined() -> Any:
        view = leader_seen_by_all(controllers, [0, 1, 2])
        if not view or view[:2] != (new_leader, new_epoch):
            return None
        ends = {v.replica_id: v.log_end_offset for v in view[2].current_voters}
        return len(set(ends.values())) == 1 and ends[leader] > 0

    until(rejoined, "the old leader follows the new one and has caught up")
