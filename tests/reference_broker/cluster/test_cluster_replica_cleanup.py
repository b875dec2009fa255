"""What a replicated cluster removes from its followers' disks, seen from outside: real node
processes, real kills, peer clients (confluent-kafka, kafka-python).

- DeleteRecords on an RF=3 partition is answered only once every live replica has moved its log
  start offset (Kafka's DelayedDeleteRecords), so killing the leader right after the answer
  leaves a new leader whose earliest offset is the deleted low watermark, a consumer from the
  beginning starts there, and the surviving replicas' directories hold no segment wholly below it.
  Only the leader deletes: a follower answers NOT_LEADER_OR_FOLLOWER.
- A reassignment that drops a broker from a partition's replicas removes that broker's partition
  directory (Kafka's ReplicaManager.applyDelta -> stopPartitions with delete), and the broker
  keeps serving its other partitions; assigned back, it copies the partition anew from its leader.
  A broker that was down while the partition moved, or while its topic was deleted (or deleted
  and re-created under the same name), moves its old log aside as ``-stray`` when it comes back
  (Kafka's stray detection at the first metadata publish once caught up); it keeps its own
  replicas, and a node has directories only for the partitions it replicates.
- Retention never moves a log start offset past the high watermark.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.testing import ClusterProcess
from tests.reference_broker.cluster.test_cluster_isr_eligibility import leader_and_follower

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

DEADLINE_S = 30.0
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
RECORDS = 60
DELETED_BEFORE = 30
#: every batch (one record of 100 bytes) gets its own segment
SMALL_SEGMENTS = {"internal.segment.bytes": "200"}


def until(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.1)


@pytest.fixture
def cluster() -> Iterator[ClusterProcess]:
    # A follower's fetch parks at the leader for up to replica.fetch.wait.max.ms: long enough that
    # a leader killed right after answering DeleteRecords dies before a parked fetch returns,
    # unless the answer itself waited for the followers.
    config = {
        "log.segment.delete.delay.ms": 100,
        "replica.fetch.wait.max.ms": 2000,
    }
    with ClusterProcess(3, config, proxy=False) as c:
        yield c


def segment_bases(cluster: ClusterProcess, node_id: int, topic: str) -> list[int]:
    directory = cluster.data_dir / f"node-{node_id}" / f"{topic}-0"
    return sorted(int(path.stem) for path in directory.glob("*.log"))


def produce_one_batch_each(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"%03d" % i + b"x" * 97)
        assert producer.flush(30) == 0


def create_topic(cluster: ClusterProcess, topic: str, assignment: list[int],
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[assignment], config=config or {})])[
        topic].result(30)
    until(lambda: cluster.partition(topic, 0) is not None
          and sorted(cluster.partition(topic, 0).isr_nodes) == sorted(assignment),
          f"{topic}-0 led with the full ISR {assignment}")


def earliest_via(bootstrap: str, topic: str) -> int:
    """The partition's earliest offset (ListOffsets to its leader), asked again while the
    cluster is still electing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    end = time.monotonic() + DEADLINE_S
    try:
        while True:
            try:
                return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[0])
            except KafkaException:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, end_offset: int) -> list[int]:
    """Offsets a consumer starting at the beginning reads up to ``end_offset``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    offsets: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while (not offsets or offsets[-1] < end_offset - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                offset = message.offset()
                assert offset is not None
                offsets.append(offset)
    finally:
        consumer.close()
    return offsets


def test_deleted_records_stay_deleted_after_the_leader_is_killed(cluster: ClusterProcess) -> None:
    topic = f"purged-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, [1, 2, 3], SMALL_SEGMENTS)
    produce_one_batch_each(cluster.bootstrap, topic, RECORDS)
    leader = cluster.leader_of(topic, 0)
    follower = next(n for n in (1, 2, 3) if n != leader)
    assert delete_records_error(cluster.node(follower).bootstrap, topic, 10) == NOT_LEADER_OR_FOLLOWER
    assert list_offset(cluster.node(leader).bootstrap, topic, -2) == 0

    admin = AdminClient({"bootstrap.servers": cluster.node(leader).bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, DELETED_BEFORE)], request_timeout=30)
    (deleted,) = [future.result(30) for future in futures.values()]
    cluster.kill(leader)

    assert deleted.low_watermark == DELETED_BEFORE
    survivors = [n for n in (1, 2, 3) if n != leader]
    until(lambda: cluster.leader_of(topic, 0) in survivors, "a surviving replica leading")
    bootstrap = ",".join(cluster.node(n).bootstrap for n in survivors)
    assert earliest_via(bootstrap, topic) == DELETED_BEFORE
    offsets = consume_all(bootstrap, topic, RECORDS)
    assert offsets == list(range(DELETED_BEFORE, RECORDS))
    for node in survivors:
        bases = segment_bases(cluster, node, topic)
        # the first segment may start below the low watermark only if it also holds it
        below = [base for base, nxt in itertools.pairwise(bases) if nxt <= DELETED_BEFORE]
        assert below == [], f"node {node} still holds segments {below} wholly below {DELETED_BEFORE}"


def test_delete_records_waits_for_a_live_follower_and_not_for_a_fenced_one(cluster: ClusterProcess) -> None:
    """Kafka's DelayedDeleteRecords: the answer waits for the replicas on alive brokers only;
    one that cannot fetch makes it time out until the controller fences its broker."""
    topic = f"stalled-{uuid.uuid4().hex[:8]}"
    # The replicas are the two nodes that are not the active controller: pausing a follower that
    # is also the controller makes the quorum fail over, and the leader's heartbeat, stuck on the
    # paused controller, may then miss the new controller's session (its node fenced a moment:
    # seen once in a loaded CI run as NOT_LEADER_OR_FOLLOWER).
    replicas = list(leader_and_follower(cluster))
    create_topic(cluster, topic, replicas, SMALL_SEGMENTS)
    produce_one_batch_each(cluster.bootstrap, topic, 10)
    leader = cluster.leader_of(topic, 0)
    follower = next(n for n in replicas if n != leader)
    bootstrap = cluster.node(leader).bootstrap

    cluster.pause(follower)
    try:
        assert delete_records(bootstrap, topic, 5, timeout_ms=500) == (REQUEST_TIMED_OUT, 0)
        assert list_offset(bootstrap, topic, -2) == 5, "the leader's own deletion is done"
        until(lambda: all(b.node_id != follower for b in cluster.metadata(via=leader).brokers),
              "the stopped follower fenced")
        assert delete_records(bootstrap, topic, 7) == (0, 7)
    finally:
        cluster.resume(follower)
    until(lambda: segment_bases(cluster, follower, topic)[:1] == [7],
          "the resumed follower drops the deleted records too")


def partition_dir(cluster: ClusterProcess, node_id: int, topic: str) -> Path:
    return cluster.data_dir / f"node-{node_id}" / f"{topic}-0"


def reassign(cluster: ClusterProcess, topic: str, replicas: list[int],
             via: tuple[int, ...] = (1, 2, 3)) -> None:
    """AlterPartitionReassignments of ``topic``-0 by kafka-python, bootstrapped from ``via``."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    bootstrap = [cluster.node(n).bootstrap for n in via]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): replicas})
    finally:
        admin.close()
    assert result == {KafkaTopicPartition(topic, 0): None}


def test_a_replica_reassigned_away_leaves_the_dropped_broker(cluster: ClusterProcess) -> None:
    moved = f"moved-{uuid.uuid4().hex[:8]}"
    stays = f"stays-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, moved, [1, 2])
    create_topic(cluster, stays, [1, 3])
    produce_one_batch_each(cluster.bootstrap, moved, 10)
    assert partition_dir(cluster, 1, moved).is_dir()

    reassign(cluster, moved, [2, 3])

    until(lambda: sorted(cluster.partition(moved, 0).replica_nodes) == [2, 3]
          and sorted(cluster.partition(moved, 0).isr_nodes) == [2, 3],
          "the reassignment completed")
    until(lambda: not partition_dir(cluster, 1, moved).exists(),
          "node 1's directory of the partition it no longer replicates removed")
    until(lambda: not list((cluster.data_dir / "node-1").glob(f"{moved}-0.*-delete")),
          "the renamed -delete directory removed after log.segment.delete.delay.ms")
    assert segment_bases(cluster, 3, moved), "the new replica holds the partition"
    produce_one_batch_each(cluster.node(1).bootstrap, stays, 5)
    produce_one_batch_each(cluster.bootstrap, moved, 5)
    assert consume_all(cluster.bootstrap, moved, 15) == list(range(15))
    assert consume_all(cluster.node(1).bootstrap, stays, 5) == list(range(5))

    # assigned back: the broker starts an empty log and copies the partition from its leader
    reassign(cluster, moved, [1, 2])
    until(lambda: sorted(cluster.partition(moved, 0).replica_nodes) == [1, 2]
          and sorted(cluster.partition(moved, 0).isr_nodes) == [1, 2],
          "the partition reassigned back to node 1 with node 1 in sync")
    assert segment_bases(cluster, 1, moved), "node 1 holds the partition again"
    cluster.kill(2)
    until(lambda: cluster.leader_of(moved, 0) == 1, "node 1 leading the partition")
    assert consume_all(cluster.node(1).bootstrap, moved, 15) == list(range(15))


@pytest.fixture
def fast_retention_cluster() -> Iterator[ClusterProcess]:
    config = {"log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 100}
    with ClusterProcess(3, config, proxy=False) as c:
        yield c


def produce_dated(bootstrap: str, topic: str, count: int, *, acks: str, timestamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"%03d" % i + b"x" * 97, timestamp=timestamp_ms)
        assert producer.flush(30) == 0


def ask(bootstrap: str, request: Any, version: int) -> Any:
    """Send ``request`` to the node at ``bootstrap`` itself over a plain socket and decode the
    answer: a client library would route it (or its metadata requests) to other nodes."""
    from sdk.protocol.codec import decode_response, encode_request

    payload = encode_request(request, version, 1, "replica-cleanup-test")
    host, _, port = bootstrap.rpartition(":")
    frame = struct.Struct(">i")
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(frame.pack(len(payload)) + payload)
        size = frame.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    return decode_response(request.API_KEY, version, body)[1]


def list_offset(bootstrap: str, topic: str, timestamp: int) -> int:
    """ListOffsets (v7) of ``topic``-0 for ``timestamp`` (-2 earliest, -1 latest) answered by
    the node at ``bootstrap``."""
    from sdk.protocol.messages import ListOffsetsRequest

    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp,
                                                    current_leader_epoch=-1)])])
    (answer,) = ask(bootstrap, request, 7).topics[0].partitions
    assert answer.error_code == 0, answer
    return int(answer.offset)


def delete_records(bootstrap: str, topic: str, offset: int, timeout_ms: int = 10_000) -> tuple[int, int]:
    """(error code, low watermark) of a DeleteRecords (v2) of ``topic``-0 answered by the node
    at ``bootstrap``."""
    from sdk.protocol.messages import DeleteRecordsRequest

    request = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
            partition_index=0, offset=offset)])])
    (answer,) = ask(bootstrap, request, 2).topics[0].partitions
    return int(answer.error_code), int(answer.low_watermark)


def delete_records_error(bootstrap: str, topic: str, offset: int) -> int:
    return delete_records(bootstrap, topic, offset)[0]


def watermarks_via(bootstrap: str, topic: str) -> tuple[int, int]:
    """(earliest offset, high watermark) as the node at ``bootstrap`` answers them."""
    return list_offset(bootstrap, topic, -2), list_offset(bootstrap, topic, -1)


def leader_watermarks(cluster: ClusterProcess, topic: str) -> tuple[int, int] | None:
    """(earliest offset, high watermark) from the partition's current leader; None while it
    moves (a leader fenced on a loaded machine answers NOT_LEADER_OR_FOLLOWER until the next)."""
    try:
        return watermarks_via(cluster.node(cluster.leader_of(topic, 0)).bootstrap, topic)
    except (AssertionError, OSError, TimeoutError):
        return None


def test_retention_never_moves_the_log_start_past_the_high_watermark(
    fast_retention_cluster: ClusterProcess,
) -> None:
    """Retention deletes only segments wholly below the high watermark (Kafka's
    ``deletableSegments``): records a lagging follower has not copied yet stay, so the earliest
    offset never passes the high watermark and every record stays readable until committed."""
    cluster = fast_retention_cluster
    topic = f"expiring-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, [1, 2], {**SMALL_SEGMENTS, "retention.ms": "3600000"})
    leader = cluster.leader_of(topic, 0)
    follower = 3 - leader
    bootstrap = cluster.node(leader).bootstrap
    long_ago = int(time.time() * 1000) - 2 * 3_600_000
    produce_dated(bootstrap, topic, 10, acks="all", timestamp_ms=long_ago)
    until(lambda: watermarks_via(bootstrap, topic) == (10, 10), "the expired committed records deleted")

    cluster.pause(follower)
    try:
        produce_dated(bootstrap, topic, 10, acks="1", timestamp_ms=long_ago)
        # Retention runs every 100 ms; the high watermark stays at 10 until the stopped follower
        # is fenced (broker.session.timeout.ms) and leaves the ISR, and nothing above it may go.
        end = time.monotonic() + 2 * DEADLINE_S  # fencing, or a controller failover first
        high = 10
        while high < 20:
            assert time.monotonic() < end, "the stopped follower never left the ISR"
            marks = leader_watermarks(cluster, topic)
            if marks is None:
                continue
            low, high = marks
            assert low <= high, f"earliest offset {low} is past the high watermark {high}"
    finally:
        cluster.resume(follower)
    until(lambda: leader_watermarks(cluster, topic) == (20, 20),
          "the expired records deleted once the follower has them")


def test_a_broker_down_during_a_reassignment_moves_its_old_log_aside_on_return(
    cluster: ClusterProcess,
) -> None:
    topic = f"strayed-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, [1, 2])
    produce_one_batch_each(cluster.bootstrap, topic, 10)
    assert segment_bases(cluster, 1, topic)
    cluster.kill(1)
    # clients send AlterPartitionReassignments to the controller Metadata names: a live broker
    # once node 1 is fenced
    until(lambda: all(b.node_id != 1 for b in cluster.metadata(via=2).brokers), "node 1 fenced")

    reassign(cluster, topic, [2, 3], via=(2, 3))
    until(lambda: sorted(cluster.partition(topic, 0).replica_nodes) == [2, 3]
          and sorted(cluster.partition(topic, 0).isr_nodes) == [2, 3],
          "the reassignment completed without node 1")
    assert segment_bases(cluster, 1, topic), "node 1, stopped, still holds its old replica"

    cluster.start_node(1)
    until(lambda: not segment_bases(cluster, 1, topic), "node 1's old log gone after its return")
    assert len(stray_dirs(cluster, 1, topic)) == 1, "moved aside as -stray (Kafka's stray replica)"
    assert consume_all(cluster.node(1).bootstrap, topic, 10) == list(range(10))


def partition_dirs(cluster: ClusterProcess, node_id: int, topic: str) -> set[int]:
    """The partitions of ``topic`` whose live directory ``<topic>-<n>`` node ``node_id`` has."""
    root = cluster.data_dir / f"node-{node_id}"
    return {int(path.name.rsplit("-", 1)[1]) for path in root.glob(f"{topic}-*")
            if path.is_dir() and path.name.rsplit("-", 1)[1].isdigit()}


def stray_dirs(cluster: ClusterProcess, node_id: int, topic: str) -> list[Path]:
    return sorted((cluster.data_dir / f"node-{node_id}").glob(f"{topic}-0.*-stray"))


def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` values of ``topic``-0 a consumer from the beginning reads (fewer if
    the partition has fewer within the deadline)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(bytes(message.value() or b""))
    finally:
        consumer.close()
    return values


def test_a_node_has_directories_only_for_its_own_replicas(cluster: ClusterProcess) -> None:
    topic = f"spread-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 6, replication_factor=2)])[topic].result(30)
    until(lambda: all((p := cluster.partition(topic, n)) is not None and len(p.isr_nodes) == 2
                      for n in range(6)), f"{topic}'s six partitions led with two replicas in sync")
    assignment = {n: set(cluster.partition(topic, n).replica_nodes) for n in range(6)}
    for node_id in (1, 2, 3):
        # a replica's log appears once its node applied the metadata (the ISR above is the
        # controller's initial one, not proof that every node has published it yet)
        hosted = {n for n, replicas in assignment.items() if node_id in replicas}
        until(lambda node_id=node_id, hosted=hosted: partition_dirs(cluster, node_id, topic) == hosted,
              f"node {node_id} has exactly the directories of its replicas {sorted(hosted)}")
        assert partition_dirs(cluster, node_id, topic) == hosted, (node_id, assignment)

    # after a restart too: the node does not recreate directories of partitions it does not host
    cluster.kill(1)
    cluster.start_node(1)
    hosted_by_1 = next(n for n, replicas in assignment.items() if 1 in replicas)
    until(lambda: (p := cluster.partition(topic, hosted_by_1, via=2)) is not None and 1 in p.isr_nodes,
          "node 1 back in sync")
    assert partition_dirs(cluster, 1, topic) == {n for n, r in assignment.items() if 1 in r}


def test_a_node_back_from_down_moves_its_stray_replicas_aside(cluster: ClusterProcess) -> None:
    """Kafka's first metadata publish after start (BrokerMetadataPublisher ->
    LogManager.isStrayKraftReplica): a log whose topic id the image does not know (topic deleted,
    or deleted and re-created under the same name) or whose partition no longer lists the node is
    renamed ``-stray``, kept and never served; the node's own replicas are untouched."""
    suffix = uuid.uuid4().hex[:8]
    gone, reborn, moved, kept = (f"{name}-{suffix}" for name in ("gone", "reborn", "moved", "kept"))
    for topic, replicas in ((gone, [1, 2]), (reborn, [1, 2]), (moved, [1, 2]), (kept, [1, 3])):
        create_topic(cluster, topic, replicas)
        produce_one_batch_each(cluster.bootstrap, topic, 10)
    cluster.kill(1)
    until(lambda: all(b.node_id != 1 for b in cluster.metadata(via=2).brokers), "node 1 fenced")

    admin = AdminClient({"bootstrap.servers": cluster.node(2).bootstrap})
    for future in admin.delete_topics([gone, reborn]).values():
        future.result(30)
    until(lambda: cluster.partition(reborn, 0, via=2) is None, f"{reborn} deleted")
    admin.create_topics([NewTopic(reborn, 1, replica_assignment=[[1, 2]])])[reborn].result(30)
    until(lambda: cluster.partition(reborn, 0, via=2) is not None
          and cluster.partition(reborn, 0, via=2).leader_id == 2, f"{reborn} re-created, led by 2")
    producer = Producer({"bootstrap.servers": cluster.node(2).bootstrap, "acks": "all"})
    for i in range(3):
        producer.produce(reborn, value=b"new-%d" % i)
    assert producer.flush(30) == 0
    reassign(cluster, moved, [2, 3], via=(2, 3))
    until(lambda: sorted(cluster.partition(moved, 0, via=2).isr_nodes) == [2, 3],
          "the reassignment completed without node 1")
    assert partition_dirs(cluster, 1, gone) == {0}, "node 1, stopped, still holds the deleted topic"

    cluster.start_node(1)
    until(lambda: 1 in cluster.partition(reborn, 0, via=2).isr_nodes,
          "node 1 a replica in sync of the re-created topic")
    for topic in (gone, reborn, moved):
        assert len(stray_dirs(cluster, 1, topic)) == 1, f"node 1's old {topic}-0 moved aside"
        assert list(stray_dirs(cluster, 1, topic)[0].glob("*.log")), "a stray log is kept"
    assert partition_dirs(cluster, 1, gone) == set()
    assert partition_dirs(cluster, 1, moved) == set()
    assert partition_dirs(cluster, 1, kept) == {0}
    assert segment_bases(cluster, 1, kept), "node 1's own replica untouched"

    # the node's real replicas serve their data; the re-created topic has only its new records
    assert consume_all(cluster.node(1).bootstrap, kept, 10) == list(range(10))
    cluster.kill(2)
    until(lambda: cluster.leader_of(reborn, 0) == 1, f"node 1 leading {reborn}")
    assert read_values(cluster.node(1).bootstrap, reborn, 13) == [b"new-0", b"new-1", b"new-2"]
