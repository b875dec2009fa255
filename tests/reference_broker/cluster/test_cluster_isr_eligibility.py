"""Who may be in a partition's ISR (KIP-903), seen from outside a three-node cluster of real
processes: only a replica whose broker is registered, unfenced, and fetching in the broker epoch
of its current registration, and only once it has caught up.

- A follower paused (SIGSTOP) past ``broker.session.timeout.ms`` is fenced and leaves the ISR;
  resumed, it is back in the ISR only once it is unfenced again and holds every acknowledged
  record.
- A follower killed whose partition data is wiped (a lost data disk) comes back as a new
  incarnation with an empty log. A Fetch still carrying its previous incarnation's broker epoch and
  the offset its old log had reached (a request from before the crash, arriving late) must not
  count: the leader answers it NOT_LEADER_OR_FOLLOWER and does not propose the replica for the
  ISR; the replica joins only after really copying the log. Then, with the old leader killed,
  the replica leads and every acknowledged acks=all record is read back from it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reference_broker.network.peer import PeerConnection
from reference_broker.testing import ClusterFactory, ClusterProcess, wait_until
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeQuorumRequest, FetchRequest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SESSION_MS = 3000
DEADLINE_S = 60.0
CONFIG = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 300}


def isr(cluster: ClusterProcess, topic: str) -> set[int]:
    part = cluster.partition(topic, 0)
    return set() if part is None else set(part.isr_nodes)


def unfenced(cluster: ClusterProcess, via: int) -> set[int]:
    return cluster.registered_brokers(via=via)


def create_topic(cluster: ClusterProcess, topic: str, replicas: list[int] | None = None,
                 **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = (NewTopic(topic, 1, replica_assignment=[replicas], config=config) if replicas
           else NewTopic(topic, num_partitions=1, replication_factor=3, config=config))
    admin.create_topics([new])[topic].result(timeout=30)
    wanted = set(replicas or [1, 2, 3])
    wait_until(lambda: isr(cluster, topic) == wanted, f"{topic} has the ISR {wanted}", DEADLINE_S)


def produce(bootstrap: str, topic: str, first: int, count: int) -> list[int]:
    """``count`` records numbered from ``first``, acks=all; the numbers acknowledged."""
    acked: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value().split(b":")[0]))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 30_000})
    for n in range(first, first + count):
        producer.produce(topic, value=f"{n}:".encode() + b"x" * 500, partition=0,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def read_all(bootstrap: str, topic: str, expected: set[int]) -> set[int]:
    """Every record number readable from partition 0 of ``topic`` from its start (stops once
    ``expected`` are all seen, or at the deadline). Assigned, not subscribed: no group
    coordinator is needed while leaderships move."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    seen: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while not expected <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(int((msg.value() or b"").split(b":")[0]))
    finally:
        consumer.close()
    return seen


def log_end_offset(bootstrap: str, topic: str) -> int:
    """The partition's high watermark: its leader's log end once every append is acknowledged."""
    return watermarks(bootstrap, topic)[1]


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-{uuid.uuid4()}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def ask(cluster: ClusterProcess, via: int, request: Any) -> Any:
    """One request to node ``via``'s client listener (the test is a client, never cut)."""
    node = cluster.node(via)

    async def send() -> Any:
        conn = PeerConnection(node.host, node.port, client_id="kip-903-test", request_timeout_s=10)
        try:
            return await conn.send(request)
        finally:
            await conn.close()

    return asyncio.run(send())


def active_controller(cluster: ClusterProcess) -> int:
    request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata",
        partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
    return int(ask(cluster, 1, request).topics[0].partitions[0].leader_id)


def registered_epoch(cluster: ClusterProcess, node_id: int) -> int:
    """The broker epoch of node ``node_id``'s latest registration, from its own log."""
    log = cluster.node(node_id).process.stderr()
    found = re.findall(rf"broker {node_id} registered with epoch (\d+)", log)
    assert found, f"node {node_id} logged no registration"
    return int(found[-1])


def leader_and_follower(cluster: ClusterProcess) -> tuple[int, int]:
    """Two nodes that are not the active controller: pausing or killing the follower, or cutting
    it from the leader, leaves its heartbeats and the metadata quorum alone."""
    controller = active_controller(cluster)
    leader, follower = (n for n in (1, 2, 3) if n != controller)
    return leader, follower


def lead_alone_and_read(cluster: ClusterProcess, topic: str, leader: int, follower: int,
                        expected: set[int]) -> None:
    """Kill ``leader``: ``follower``, the partition's only other replica, leads, and every
    acknowledged record must be readable from it."""
    cluster.kill(leader)
    wait_until(lambda: getattr(cluster.partition(topic, 0, via=follower), "leader_id", -1) == follower,
               f"node {follower} leads {topic}", DEADLINE_S)
    survivors = ",".join(cluster.node(n).bootstrap for n in (1, 2, 3) if n != leader)
    missing = expected - read_all(survivors, topic, expected)
    if missing:
        now = cluster.partition(topic, 0, via=follower)
        raise AssertionError(
            f"{len(missing)} acknowledged records not read back, e.g. {sorted(missing)[:10]};"
            f" the partition now: {now}, offsets {watermarks(survivors, topic)}")


def test_a_paused_follower_is_fenced_out_of_the_isr_and_back_only_once_unfenced_and_caught_up(
    reference_cluster: ClusterFactory,
) -> None:
    cluster = reference_cluster(3, CONFIG)
    leader, follower = leader_and_follower(cluster)
    topic = "paused-follower"
    create_topic(cluster, topic, [leader, follower], **{"min.insync.replicas": "1"})
    acked = produce(cluster.bootstrap, topic, 0, 200)

    cluster.pause(follower)
    wait_until(lambda: follower not in unfenced(cluster, leader) and follower not in isr(cluster, topic),
               f"paused node {follower} is fenced and out of the ISR", DEADLINE_S)
    acked += produce(cluster.node(leader).bootstrap, topic, 200, 300)  # the follower has none
    expected = set(acked)
    assert len(expected) == 500

    cluster.resume(follower)
    wait_until(lambda: follower in isr(cluster, topic), f"node {follower} is back in the ISR", DEADLINE_S)
    assert follower in unfenced(cluster, leader)  # the controller takes no fenced ISR member
    lead_alone_and_read(cluster, topic, leader, follower, expected)


def test_a_follower_that_lost_its_disk_joins_the_isr_only_after_copying_the_log(
    reference_cluster: ClusterFactory, tmp_path: Path,
) -> None:
    cluster = reference_cluster(3, CONFIG, data_dir=tmp_path)  # the nodes' logs outlive a failure
    leader, follower = leader_and_follower(cluster)
    topic = "lost-disk"
    # Only the leader and the follower hold the partition, so once the leader is killed the
    # follower is the only replica that can lead: whatever it lacks is lost.
    create_topic(cluster, topic, [leader, follower], **{"min.insync.replicas": "1"})
    acked = produce(cluster.bootstrap, topic, 0, 300)
    old_epoch = registered_epoch(cluster, follower)

    cluster.kill(follower)
    node_dir = cluster.data_dir / f"node-{follower}"
    lost = [p for p in node_dir.iterdir() if p.name.startswith(f"{topic}-")]
    assert lost, sorted(p.name for p in node_dir.iterdir())
    for path in lost:
        shutil.rmtree(path)
    acked += produce(cluster.node(leader).bootstrap, topic, 300, 300)  # acked by the leader alone
    expected = set(acked)
    assert len(expected) == 600

    # The follower's fetches to the leader are cut: it comes back, registers and is unfenced, but
    # cannot copy anything yet.
    cluster.cut(follower, leader)
    cluster.start_node(follower)
    wait_until(lambda: registered_epoch(cluster, follower) > old_epoch
               and follower in unfenced(cluster, leader),
               f"node {follower} is registered again and unfenced", DEADLINE_S)
    metadata = cluster.metadata([topic], via=leader)
    topic_id = metadata.topics[0].topic_id
    log_end = log_end_offset(cluster.node(leader).bootstrap, topic)

    # A late Fetch of the previous incarnation, claiming the old log reached the leader's end.
    claimed = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=log_end, last_fetched_epoch=-1,
        log_start_offset=0, partition_max_bytes=1 << 20)
    stale: Any = ask(cluster, leader, FetchRequest(
        replica_id=follower,
        replica_state=FetchRequest.ReplicaState(replica_id=follower, replica_epoch=old_epoch),
        max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[claimed])]))
    answer = stale.responses[0].partitions[0]
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, (
        f"a fetch in the old broker epoch {old_epoch} was answered {answer.error_code};"
        f" ISR now {sorted(isr(cluster, topic))}")
    assert follower not in isr(cluster, topic)

    cluster.heal(follower)
    wait_until(lambda: follower in isr(cluster, topic), f"node {follower} is back in the ISR", DEADLINE_S)
    lead_alone_and_read(cluster, topic, leader, follower, expected)
