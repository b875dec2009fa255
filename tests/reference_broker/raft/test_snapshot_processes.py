"""Three combined-mode node processes snapshot their metadata often and delete the log before
their snapshots; a node down while many topics are created comes back behind the leader's
log start, downloads the leader's snapshot (FetchSnapshot), fetches on after it, and then serves
the same topics as the others. Kafka's DumpLogSegments reads the downloaded snapshot file and
``kafka-metadata-quorum describe --replication`` shows the three voters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerProcess
from tests.apache_kafka import unavailable_reason
from tests.oracles.kafka_tools import run_tool
from tests.reference_broker.raft.test_quorum_processes import (
    NODES,
    free_port,
    leader_seen_by_all,
    until,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow]

METADATA_DIR = "__cluster_metadata-0"


@pytest.fixture
def snapshotting_quorum(tmp_path: Path) -> Any:
    hosts = [f"127.0.1.{n}" for n in range(1, NODES + 1)]
    client_ports = [free_port(h) for h in hosts]
    controllers = [(h, free_port(h)) for h in hosts]
    voters = ",".join(f"{n}@{h}:{p}" for n, (h, p) in enumerate(controllers, 1))
    nodes = []
    for n in range(1, NODES + 1):
        host = hosts[n - 1]
        nodes.append(BrokerProcess(data_dir=tmp_path / f"node{n}", config={
            "node.id": n,
            "process.roles": "broker,controller",
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{host}:{client_ports[n - 1]},"
                         f"CONTROLLER://{host}:{controllers[n - 1][1]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "cluster.id": "cDVJ2f7NQWm0mzWq2i8Rtw",
            "metadata.log.max.record.bytes.between.snapshots": 1500,
            "metadata.log.segment.bytes": 2048,
            "metadata.max.retention.bytes": 0,
        }, host=host, port=client_ports[n - 1]))
    try:
        for node in nodes:
            node.start()
        yield nodes, controllers
    finally:
        for node in nodes:
            node.stop()


def metadata_dir(node: BrokerProcess) -> Path:
    return node.data_dir / METADATA_DIR


def log_start(node: BrokerProcess) -> int:
    """The base offset of the oldest segment of the node's metadata log."""
    bases = [int(p.stem) for p in metadata_dir(node).glob("*.log")]
    return min(bases) if bases else -1


def snapshots(node: BrokerProcess) -> list[Path]:
    return sorted(metadata_dir(node).glob("0*-0*.checkpoint"))


def topics_of(node: BrokerProcess) -> set[str] | None:
    try:
        listed = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=5)
    except Exception:
        return None
    return {name for name in listed.topics if not name.startswith("__")}


def test_a_node_behind_the_log_start_catches_up_through_the_leaders_snapshot(
        snapshotting_quorum: Any) -> None:
    nodes, controllers = snapshotting_quorum
    until(lambda: leader_seen_by_all(controllers, [0, 1, 2]), "the three nodes agree on a leader")
    lagging = nodes[2]
    lagging.kill()
    end_before = max(int(p.stem) for p in metadata_dir(lagging).glob("*.log"))
    live = nodes[:2]
    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in live)})

    def apply(futures: dict[str, Any]) -> None:
        for future in futures.values():
            future.result(timeout=90)  # two of three voters on a loaded machine

    names = [f"snap-{i}" for i in range(40)]
    for start in range(0, len(names), 10):
        apply(admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                   for t in names[start:start + 10]], operation_timeout=20))
    expected = set(names)
    until(lambda: all(topics_of(n) == expected for n in live), "the live nodes list the topics")
    until(lambda: all(log_start(n) > end_before and snapshots(n) for n in live),
          "the live nodes deleted the metadata segments before a snapshot")

    lagging.start()
    until(lambda: topics_of(lagging) == expected, "the restarted node lists the same topics",
          timeout=30)
    restarted_log = lagging.stderr().rpartition("--- start #2")[2]
    assert "downloaded from the leader" in restarted_log, restarted_log[-3000:]
    assert snapshots(lagging) and log_start(lagging) > end_before
    assert all(topics_of(n) == expected for n in nodes)

    def leader_sees_the_restarted_node_past_its_snapshot() -> bool:
        # the leader learns node 3's end offset from its next Fetch, and node 3 may have written
        # a newer snapshot of its own meanwhile: compare once the leader's view has caught up
        view = leader_seen_by_all(controllers, [0, 1, 2])
        if not view:
            return False
        ends = {v.replica_id: v.log_end_offset for v in view[2].current_voters}
        return set(ends) == {1, 2, 3} and ends[3] >= int(snapshots(lagging)[-1].name[:20])

    until(leader_sees_the_restarted_node_past_its_snapshot,
          "the leader sees the restarted node fetching past the snapshot it installed")

    if unavailable_reason() is not None:
        return
    dump = run_tool("kafka.tools.DumpLogSegments", "--cluster-metadata-decoder", "--files",
                    str(snapshots(lagging)[-1]))
    assert dump.returncode == 0, dump.stderr
    assert "SnapshotHeader" in dump.stdout and "SnapshotFooter" in dump.stdout
    assert all(f'"name":"{name}"' in dump.stdout for name in names)
    replication = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                           nodes[0].bootstrap, "describe", "--replication")
    assert replication.returncode == 0, replication.stderr
    rows = [line.split() for line in replication.stdout.splitlines()[1:] if line.strip()]
    assert {int(r[0]) for r in rows} >= {1, 2, 3}, replication.stdout
