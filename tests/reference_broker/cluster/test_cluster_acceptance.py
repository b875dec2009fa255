"""Acceptance of the replicated cluster: what must hold on three nodes while nodes die or are cut
off, checked on our cluster (``ClusterProcess``, each node behind the proxy) and on Apache Kafka's
own three-node cluster as the oracle, with the same scenario code.

* An idempotent acks=all producer writes numbered records to an RF=3, ``min.insync.replicas=2``
  topic while the partition leader is killed with SIGKILL and restarted: every acknowledged record
  is stored once, at the offset it was acknowledged with, in send order (read back by the SDK and
  by confluent-kafka).
* A transactional consume-transform-produce copy (the SDK's copier of ``benchmarks/eos_copy.py``)
  runs while the transaction coordinator, the group coordinator and an output partition's leader
  are killed in turn and the copier process too: the read_committed output is the input, exactly
  once.
* A node cut off (our proxy isolates it; Kafka's node is stopped, the nearest a plain Kafka
  cluster offers) leaves an RF=3 partition with ``min.insync.replicas=3`` too few in-sync
  replicas: acks=all produce is refused with NOT_ENOUGH_REPLICAS, and once the node is back the
  ISR grows to all three replicas again (Metadata and Kafka's ``kafka-topics --describe``).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reference_broker.coordinator.group.records import partition_for
from sdk import Consumer, Producer, TopicPartition
from tests.apache_kafka import require_apache_kafka
from tests.oracles.kafka_tools import run_tool
from tests.reference_broker.cluster.three_nodes import (
    INTERNAL_PARTITIONS,
    PARTITIONS,
    ThreeNodes,
    create_topic,
    partition_state,
    until,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import eos_copy  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]


# -- (a) idempotent acks=all producer across a leader crash --------------------------------------


async def produce_numbered(bootstrap: str, topic: str, minimum: int, kills_done: threading.Event,
                           start_kill: threading.Event) -> dict[int, list[tuple[int, bytes]]]:
    """Numbered records to every partition, at least ``minimum`` each and on until the kills are
    done; ``start_kill`` is set once a first stretch is acknowledged. The acknowledged (offset,
    value) per partition."""
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 90
    async with Producer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=5000,
        delivery_timeout_ms=60000,
        retry_backoff_max_ms=500,
    ) as producer:
        sent = 0
        while sent < minimum or (not kills_done.is_set() and time.monotonic() < deadline):
            futures = []
            for j in range(sent, sent + 25):
                for p in range(PARTITIONS):
                    value = f"{p}-{j:06d}".encode()
                    futures.append((p, value, await producer.send(topic, value, partition=p)))
            sent += 25
            for p, value, future in futures:
                metadata = await future
                acked[p].append((metadata.offset, value))
            if sent >= 200:
                start_kill.set()
            await asyncio.sleep(0.01)
    return acked


async def read_with_sdk(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        enable_auto_commit=False, fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        quiet_until = None
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=300)
            for tp, records in batches.items():
                got[tp.partition].extend((r.offset, r.value) for r in records)
            if sum(map(len, got.values())) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.5  # duplicates would show up too
                if time.monotonic() > quiet_until:
                    break
    return got


def read_with_confluent(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is not None and not message.error():
                got[message.partition()].append((message.offset(), message.value()))
            if sum(map(len, got.values())) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.5
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return got


def test_idempotent_acks_all_records_survive_a_leader_crash_exactly_once(nodes: ThreeNodes) -> None:
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic)
    start_kill, kills_done = threading.Event(), threading.Event()
    killed: list[int] = []
    errors: list[BaseException] = []

    def crash_the_leader() -> None:
        try:
            if start_kill.wait(60):
                leader = nodes.leader_of(topic, 0)
                nodes.crash_and_restart(leader)
                killed.append(leader)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            kills_done.set()

    killer = threading.Thread(target=crash_the_leader, daemon=True)
    killer.start()
    try:
        acked = asyncio.run(produce_numbered(nodes.bootstrap, topic, 600, kills_done, start_kill))
    finally:
        start_kill.set()
        killer.join(90)
    assert not errors, errors
    assert killed, "the leader was not killed while producing"
    per_partition = {p: len(acked[p]) for p in range(PARTITIONS)}
    total = sum(per_partition.values())

    for reader, stored in (
        ("sdk", asyncio.run(read_with_sdk(nodes.bootstrap, topic, total))),
        ("confluent-kafka", read_with_confluent(nodes.bootstrap, topic, total)),
    ):
        for p in range(PARTITIONS):
            expected = [f"{p}-{j:06d}".encode() for j in range(per_partition[p])]
            # Once each, in send order, at the offsets the producer was told.
            assert [v for _, v in stored[p]] == expected, f"{reader}: partition {p}"
            assert sorted(acked[p]) == stored[p], f"{reader}: partition {p}: acknowledged offsets differ"


# -- (b) transactional copy across coordinator and leader crashes --------------------------------


class RotatingCrashes:
    """``run_soak``'s broker: each ``restart(kill=True)`` crashes and restarts one node, in turn
    the leader of an output partition and the transaction and group coordinators (whichever node
    holds each at that moment)."""

    def __init__(self, nodes: ThreeNodes, output: str, transactional_id: str, group: str) -> None:
        self.nodes = nodes
        self.bootstrap = nodes.bootstrap
        self._targets = [
            (output, 0),
            ("__transaction_state", partition_for(transactional_id, INTERNAL_PARTITIONS)),
            ("__consumer_offsets", partition_for(group, INTERNAL_PARTITIONS)),
        ]
        self.killed: list[tuple[str, int]] = []

    def restart(self, *, kill: bool = True) -> None:
        topic, partition = self._targets[len(self.killed) % len(self._targets)]
        node_id = self.nodes.leader_of(topic, partition)
        self.nodes.crash_and_restart(node_id)
        self.killed.append((topic, node_id))


async def commit_across_leaders(bootstrap: str, topic: str) -> None:
    """One transaction writing to every partition of ``topic`` (led by different nodes), committed."""
    async with Producer(bootstrap_servers=bootstrap, transactional_id=f"probe-{uuid.uuid4().hex[:8]}",
                        request_timeout_ms=5000) as producer:
        await producer.begin_transaction()
        for p in range(PARTITIONS):
            await producer.send(topic, b"probe", partition=p)
        await producer.commit_transaction()


def test_transactional_copy_is_exactly_once_across_leader_and_coordinator_crashes(
    nodes: ThreeNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = {prefix: f"{prefix}-{uuid.uuid4().hex[:8]}" for prefix in ("eos-in", "eos-out", "eos-group")}
    create_topic(nodes.bootstrap, planned["eos-in"])
    create_topic(nodes.bootstrap, planned["eos-out"])
    probe = f"txn-probe-{uuid.uuid4().hex[:8]}"  # not the copy's output, which must hold only copies
    create_topic(nodes.bootstrap, probe)
    assert len({nodes.leader_of(probe, p) for p in range(PARTITIONS)}) == PARTITIONS
    asyncio.run(asyncio.wait_for(commit_across_leaders(nodes.bootstrap, probe), 60))
    monkeypatch.setattr(eos_copy, "unique", lambda prefix: planned[prefix])
    crashes = RotatingCrashes(
        nodes, planned["eos-out"], planned["eos-group"] + "-copier", planned["eos-group"]
    )

    result = eos_copy.run_soak(
        crashes,
        messages=3000,
        partitions=PARTITIONS,
        bounces=3,
        copier="sdk",
        log_dir=tmp_path,
        timeout_s=150,
        pause_ms=20,  # spreads the copy over the node restarts
    )
    # The output partition's leader and the transaction coordinator at least (the copy may outrun
    # the group coordinator's turn), and the copier process in between.
    assert result.broker_kills >= 2 and result.copier_kills >= 2, result
    assert [topic for topic, _ in crashes.killed[:2]] == [planned["eos-out"], "__transaction_state"]
    assert result.duplicates == 0, result
    assert result.missing == 0, result
    assert result.order_violations == 0, result
    assert result.reader_violations == 0, result


# -- (c) min.insync.replicas with a node cut off, and the ISR growing back -----------------------


def produce_once(bootstrap: str, topic: str, partition: int) -> Any:
    """One acks=all record with no retries: its delivery error (None when stored)."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "retries": 0,
        "enable.idempotence": False,
        "message.timeout.ms": 10000,
    })
    outcome: list[Any] = []
    producer.produce(topic, b"probe", partition=partition, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def describe_isr(bootstrap: str, topic: str) -> list[str]:
    """The ``Isr:`` column of Kafka's ``kafka-topics --describe``, one entry per partition."""
    described = run_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                         "--describe", "--topic", topic)
    assert described.returncode == 0, described.stderr
    lines = [line for line in described.stdout.splitlines() if "Partition: " in line]
    return [line.split("Isr:")[1].split()[0] for line in lines]


def test_acks_all_is_refused_below_min_insync_replicas_and_the_isr_grows_back(nodes: ThreeNodes) -> None:
    topic = f"minisr-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, topic, partitions=1, **{"min.insync.replicas": 3})
    assert produce_once(nodes.bootstrap, topic, 0) is None
    victim = next(n for n in (1, 2, 3) if n != nodes.leader_of(topic, 0))
    others = nodes.bootstrap_without(victim)

    def refused() -> bool:
        error = produce_once(others, topic, 0)
        assert error is not None, "acks=all stored a record while the ISR is below min.insync.replicas"
        return bool(error.code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS)

    nodes.cut_off(victim)
    try:
        until(lambda: (s := partition_state(others, topic, 0, leader_needed=True)) and victim not in s.isrs,
              f"node {victim} leaves the ISR", 30)
        until(refused, "acks=all is refused with NOT_ENOUGH_REPLICAS", 30)
    finally:
        nodes.bring_back(victim)
    until(lambda: (s := partition_state(nodes.bootstrap, topic, 0, leader_needed=True))
          and sorted(s.isrs) == [1, 2, 3], "the ISR grows back to all three replicas", 60)
    until(lambda: produce_once(nodes.bootstrap, topic, 0) is None, "acks=all is stored again", 30)
    require_apache_kafka()  # Kafka's jars for kafka-topics (skipped without them, failed under CI)
    assert sorted(describe_isr(nodes.bootstrap, topic)[0].split(",")) == ["1", "2", "3"]
