"""The SDK on a 3-node Apache Kafka cluster whose nodes are killed with SIGKILL while it works.

Users who outgrow one machine run the SDK against a Kafka cluster, and its hardest paths (leader
moves, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, coordinator moves mid-rebalance and
mid-transaction) need one. Each node is broker and controller; topics have replication factor 3
and ``min.insync.replicas=2``, so one node down at a time loses no acknowledged record.

Checked: an idempotent acks=all producer loses no acknowledged record, writes none twice and keeps
each partition in send order while partition leaders are killed; a group consumer misses nothing
while the group coordinator is killed; a transactional copier (read_committed consumer,
transactional producer, offsets in the transaction) copies exactly once while the transaction
coordinator, the group coordinator and an output partition's leader are killed in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.coordinator.group.records import partition_for
from sdk import Consumer, Producer, TopicPartition
from sdk.protocol.errors import KafkaError
from tests.apache_kafka import KafkaCluster, require_apache_kafka

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import itertools

from eos_copy import run_soak

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow]

PARTITIONS = 4
INTERNAL_PARTITIONS = 3
CLUSTER_CONFIG = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "num.partitions": PARTITIONS,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    "unclean.leader.election.enable": "false",
    # A killed node's replicas leave the ISR quickly, so acks=all writes go on with the other two.
    "replica.lag.time.max.ms": 5000,
    "group.initial.rebalance.delay.ms": 0,
    # A node restarted after SIGKILL registers anew only once the controller has expired its old
    # session (a duplicate registration is refused until then): each kill-and-restart waits out
    # this timeout, not Kafka's 9 s. Three heartbeats fit in it, so a busy machine fences no node.
    "broker.session.timeout.ms": 4500,
    "broker.heartbeat.interval.ms": 1500,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    require_apache_kafka()
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), 3, client_compiler=True, **CLUSTER_CONFIG)
    try:
        yield kafka.start()
    finally:
        kafka.kill()  # its data is thrown away: no controlled shutdown to wait for


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=PARTITIONS, replication_factor=3) for name in names]
    )
    for future in futures.values():
        future.result(30)


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    """The node id leading ``topic``/``partition`` now (waits while it has no leader)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is not None and partition in found.partitions and found.partitions[partition].leader >= 0:
            return int(found.partitions[partition].leader)
        time.sleep(0.2)
    raise TimeoutError(f"{topic}-{partition} has no leader")


class NodeKiller(threading.Thread):
    """Kills a node with SIGKILL and restarts it, ``kills`` times, one node down at a time."""

    def __init__(self, cluster: KafkaCluster, choose: Any, kills: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.choose = choose
        self.kills = kills
        self.every_s = every_s
        self.killed: list[int] = []
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.kills):
                if self.stopping.wait(self.every_s):
                    return
                node_id = self.choose()
                self.cluster.node(node_id).restart(kill=True)
                self.killed.append(node_id)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.finished.set()


def read_all(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` as (offset, value) per partition, read with confluent-kafka."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            got[message.partition()].append((message.offset(), message.value()))
        # A quiet spell: anything beyond ``expected`` (duplicates) shows up too.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


async def produce_idempotently(
    bootstrap: str, topic: str, minimum: int, until: threading.Event
) -> dict[int, list[tuple[int, bytes]]]:
    """Send numbered records to each partition, at least ``minimum`` each and on until ``until`` is
    set (the kills are over), so a fast machine cannot finish before the first kill; the
    acknowledged (offset, value) per partition."""
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    async with Producer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=5000,
        delivery_timeout_ms=120000,
        retry_backoff_max_ms=500,
    ) as producer:
        sent = 0
        while sent < minimum or (not until.is_set() and time.monotonic() < deadline):
            futures = []
            for j in range(sent, sent + 50):
                for p in range(PARTITIONS):
                    value = f"{p}-{j:06d}".encode()
                    futures.append((p, value, await producer.send(topic, value, partition=p)))
            sent += 50
            for p, value, future in futures:
                metadata = await future
                acked[p].append((metadata.offset, value))
            await asyncio.sleep(0.01)  # spread the sends over the nodes' kills
    return acked


def test_idempotent_producer_and_group_survive_leader_and_coordinator_kills(cluster: KafkaCluster) -> None:
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap, topic)
    # Kill the leader of partition 0, then of 1, 2, ...: each kill moves some leaders.
    targets = iter(range(PARTITIONS))
    killer = NodeKiller(
        cluster, lambda: partition_leader(cluster.bootstrap, topic, next(targets)), kills=3, every_s=4
    )
    killer.start()
    try:
        acked = asyncio.run(produce_idempotently(cluster.bootstrap, topic, 3000, killer.finished))
    finally:
        killer.stopping.set()
        killer.join(120)
    assert killer.error is None, killer.error
    assert len(killer.killed) == 3, f"{len(killer.killed)} of 3 kills happened while producing"
    per_partition = len(acked[0])

    stored = read_all(cluster.bootstrap, topic, per_partition * PARTITIONS)
    for p in range(PARTITIONS):
        expected = [f"{p}-{j:06d}".encode() for j in range(per_partition)]
        # Every acknowledged record is stored at the offset it was acknowledged with, once, in order.
        assert [v for _, v in stored[p]] == expected, f"partition {p}"
        assert sorted(acked[p]) == stored[p], f"partition {p}: acknowledged offsets differ"

    # A group consumer reads it all while the group coordinator is killed under it.
    coordinator_partition = partition_for(group, INTERNAL_PARTITIONS)
    killer = NodeKiller(
        cluster,
        lambda: partition_leader(cluster.bootstrap, "__consumer_offsets", coordinator_partition),
        kills=2,
        every_s=2,
    )
    consumed = asyncio.run(consume_in_group(cluster.bootstrap, topic, group, per_partition, killer))
    assert killer.error is None, killer.error
    for p in range(PARTITIONS):
        values = [v for _, v in stored[p]]
        seen = consumed[p]
        assert set(seen) == set(values), f"partition {p}: {len(set(values) - set(seen))} missed"
        # Re-reads after a coordinator move restart from the last commit, never skip or reorder.
        first = {v: i for i, v in enumerate(values)}
        positions = [first[v] for v in seen]
        for previous, current in itertools.pairwise(positions):
            assert current == previous + 1 or current <= previous, f"partition {p} skipped"


async def consume_in_group(
    bootstrap: str, topic: str, group: str, per_partition: int, killer: NodeKiller
) -> dict[int, list[bytes]]:
    consumed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=200,
        request_timeout_ms=5000,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    ) as consumer:
        deadline = time.monotonic() + 180
        started = False
        while time.monotonic() < deadline:
            try:
                batches = await consumer.getmany(timeout_ms=500)
            except KafkaError:
                await asyncio.sleep(0.2)
                continue
            for tp, records in batches.items():
                consumed[tp.partition].extend(r.value for r in records)
            if batches:
                with contextlib.suppress(KafkaError):
                    await consumer.commit()
                if not started:
                    started = True
                    killer.start()
                await asyncio.sleep(0.05)
            committed_all = True
            for p in range(PARTITIONS):
                try:
                    if await consumer.committed(TopicPartition(topic, p)) != per_partition:
                        committed_all = False
                except KafkaError:
                    committed_all = False
            if committed_all and not killer.is_alive():
                break
        else:
            raise TimeoutError(f"consumed {sum(map(len, consumed.values()))} records")
    killer.join(120)
    return consumed


class RotatingNemesis:
    """``run_soak``'s broker: each ``restart(kill=True)`` kills one node of the cluster with SIGKILL
    and restarts it, in turn the transaction coordinator, the group coordinator and the leader of
    an output partition (whichever node holds each at that moment)."""

    def __init__(self, cluster: KafkaCluster, transactional_id: str, group: str) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self._targets = [
            ("__transaction_state", partition_for(transactional_id, INTERNAL_PARTITIONS)),
            ("__consumer_offsets", partition_for(group, INTERNAL_PARTITIONS)),
            (None, 0),
        ]
        self.output: str | None = None
        self.killed: list[tuple[str, int]] = []

    def restart(self, *, kill: bool = True) -> None:
        topic, partition = self._targets[len(self.killed) % len(self._targets)]
        topic = topic or self.output
        assert topic is not None
        node_id = partition_leader(self.bootstrap, topic, partition)
        self.cluster.node(node_id).restart(kill=kill)
        self.killed.append((topic, node_id))


def test_transactional_copy_is_exact_while_coordinators_and_leaders_are_killed(
    cluster: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import eos_copy

    names = iter(["eos-in", "eos-out", "eos-group"])
    chosen: dict[str, str] = {}

    def unique(prefix: str) -> str:
        chosen[prefix] = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return chosen[prefix]

    # Topics created up front with replication factor 3, under the names run_soak will choose.
    planned = {prefix: unique(prefix) for prefix in names}
    create_topics(cluster.bootstrap, planned["eos-in"], planned["eos-out"])
    monkeypatch.setattr(eos_copy, "unique", lambda prefix: planned[prefix])
    nemesis = RotatingNemesis(cluster, planned["eos-group"] + "-copier", planned["eos-group"])
    nemesis.output = planned["eos-out"]

    result = run_soak(
        nemesis,  # type: ignore[arg-type]
        messages=16000,
        partitions=PARTITIONS,
        bounces=3,
        copier="sdk",
        log_dir=tmp_path,
        timeout_s=400,
    )
    # The transaction coordinator and the group coordinator at least (the copy may outrun the third).
    assert result.broker_kills >= 2 and result.copier_kills >= 2, result
    assert nemesis.killed, "no node was killed"
    assert result.duplicates == 0, result
    assert result.missing == 0, result
    assert result.order_violations == 0, result
    assert result.reader_violations == 0, result


def test_clients_bootstrap_while_the_first_bootstrap_node_is_down(cluster: KafkaCluster) -> None:
    """The first address of the bootstrap list is a dead node: the producer and a group consumer
    start through the others and work, and the node rejoins afterwards."""
    topic = f"boot-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap, topic)
    first = cluster.nodes[0]
    first.kill()
    try:

        async def round_trip() -> list[bytes]:
            async with Producer(
                bootstrap_servers=cluster.bootstrap, acks="all", request_timeout_ms=5000
            ) as producer:
                for i in range(20):
                    await producer.send_and_wait(topic, b"%02d" % i, partition=i % PARTITIONS)
            got: list[bytes] = []
            async with Consumer(
                topic,
                bootstrap_servers=cluster.bootstrap,
                group_id=f"boot-{uuid.uuid4().hex[:8]}",
                auto_offset_reset="earliest",
                request_timeout_ms=5000,
            ) as consumer:
                deadline = time.monotonic() + 60
                while len(got) < 20 and time.monotonic() < deadline:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(r.value for r in records)
            return got

        assert sorted(asyncio.run(round_trip())) == [b"%02d" % i for i in range(20)]
    finally:
        first.start()
