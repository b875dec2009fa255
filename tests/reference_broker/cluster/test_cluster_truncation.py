"""A leader cut off from the other nodes (its clients still reach it) keeps taking acks=1 writes
that nobody replicates; the others elect a new leader, which takes acks=all writes. Once the link
heals, the old leader finds where its log diverges (leader epochs: OffsetForLeaderEpoch / the
Fetch's diverging epoch, KIP-101 and KIP-279), truncates its unreplicated records, follows, and
ends byte-equal to the new leader: the same segment bytes and the same leader-epoch checkpoint.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import ClusterFactory, ClusterProcess
from tests.reference_broker.cluster.three_nodes import until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CONFIG: dict[str, Any] = {
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "replica.lag.time.max.ms": 3000,
}


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str) -> list[Any]:
    """Send ``values`` to partition 0; the delivery errors (None for each stored one)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks,
                                         "message.timeout.ms": 20000, "enable.idempotence": False})
    outcomes: list[Any] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, _m: outcomes.append(err))
    producer.flush(30)
    return outcomes


def segment_bytes(cluster: ClusterProcess, node: int, topic: str) -> bytes:
    directory = cluster.data_dir / f"node-{node}" / f"{topic}-0"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def epochs(cluster: ClusterProcess, node: int, topic: str) -> str:
    return (cluster.data_dir / f"node-{node}" / f"{topic}-0" / "leader-epoch-checkpoint").read_text()


def test_a_cut_off_leader_truncates_its_unreplicated_records_and_ends_byte_equal(
    reference_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = reference_cluster(3, CONFIG, data_dir=tmp_path / "cluster")
    topic = f"diverge-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    until(lambda: (p := cluster.partition(topic, 0)) is not None and len(p.isr_nodes) == 3,
          f"{topic}-0 has three replicas in sync", 60)
    before = [f"before-{i}".encode() for i in range(50)]
    assert produce(cluster.bootstrap, topic, before, "all") == [None] * len(before)

    old = cluster.leader_of(topic, 0)
    others = [n for n in (1, 2, 3) if n != old]
    for other in others:
        cluster.cut(old, other)  # both ways; clients still reach the old leader
    lost = [f"unreplicated-{i}".encode() for i in range(20)]
    outcomes = produce(cluster.node(old).bootstrap, topic, lost, "1")
    assert any(error is None for error in outcomes), "the cut-off leader took no acks=1 write"

    def new_leader() -> int | None:  # asked of a survivor: the cut-off node still thinks it leads
        part = cluster.partition(topic, 0, via=others[0])
        return part.leader_id if part is not None and part.leader_id not in (-1, old) else None

    new = until(new_leader, "the other nodes elect a new leader", 60)
    after = [f"after-{i}".encode() for i in range(30)]
    survivors = ",".join(cluster.node(n).bootstrap for n in others)
    assert produce(survivors, topic, after, "all") == [None] * len(after)

    cluster.heal()
    until(lambda: (p := cluster.partition(topic, 0)) is not None and sorted(p.isr_nodes) == [1, 2, 3],
          f"node {old} is back in the ISR", 60)
    until(lambda: segment_bytes(cluster, old, topic) == segment_bytes(cluster, new, topic),
          f"node {old}'s log is byte-equal to the new leader's", 30)
    assert epochs(cluster, old, topic) == epochs(cluster, new, topic)
    stored = segment_bytes(cluster, old, topic)
    assert all(value not in stored for value in lost), "an unreplicated record survived the truncation"
    assert all(value in stored for value in before + after)
