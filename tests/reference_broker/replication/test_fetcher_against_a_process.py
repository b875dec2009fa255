"""A follower's ReplicaFetcher against a real broker process: it copies the leader's log exactly
(offsets, batches, epochs, high watermark) over the wire, and keeps going after the leader process
is killed with -9 and restarted (its connection fails, it backs off, reconnects and resumes from
its own log end)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from reference_broker.log import PartitionLog
from reference_broker.network.peer import PeerChannels
from reference_broker.replication import ReplicaManager, ReplicationConfig
from reference_broker.testing import BrokerProcess
from sdk.protocol.messages import MetadataRequest
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

CONFIG = ReplicationConfig(fetch_wait_max_ms=100, fetch_backoff_ms=50)
FOLLOWER_ID = 2


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(20) == 0


def leader_facts(bootstrap: str, topic: str) -> tuple[int, uuid.UUID, bytes]:
    """The broker's node id, the topic's id and every stored batch of partition 0."""
    with WireClient(bootstrap) as wire:
        meta = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        return meta.brokers[0].node_id, meta.topics[0].topic_id, wire.fetch_all(topic)


async def test_fetcher_copies_a_leader_process_and_survives_its_kill(tmp_path: Path) -> None:
    topic = "replicated"
    leader = await asyncio.to_thread(BrokerProcess(tmp_path / "leader").start)
    follower_log = PartitionLog.open(tmp_path / "follower" / f"{topic}-0")
    channels = PeerChannels("follower")
    manager = None
    try:
        admin = AdminClient({"bootstrap.servers": leader.bootstrap})
        await asyncio.to_thread(lambda: admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30))
        await asyncio.to_thread(produce, leader.bootstrap, topic, [b"a%d" % i for i in range(200)])
        leader_id, topic_id, _ = await asyncio.to_thread(leader_facts, leader.bootstrap, topic)
        channels.update(leader_id, leader.host, leader.port)
        manager = ReplicaManager(FOLLOWER_ID, get_log=lambda tp: follower_log, channels=channels,
                                 config=CONFIG, topic_id=lambda name: topic_id)
        await manager.start()
        assert manager.become_follower((topic, 0), leader_id, 0, 0, [leader_id, FOLLOWER_ID])
        await until(lambda: follower_log.high_watermark == 200, "the follower caught up")

        await asyncio.to_thread(leader.restart, kill=True)  # kill -9, then the same data and port
        await asyncio.to_thread(produce, leader.bootstrap, topic, [b"b%d" % i for i in range(50)])
        await until(lambda: follower_log.high_watermark == 250, "the follower resumed")
        _, _, stored = await asyncio.to_thread(leader_facts, leader.bootstrap, topic)
        copied = follower_log.read(0, 1 << 24, max_offset=follower_log.log_end_offset).data
        assert bytes(copied) == stored
        assert [tuple(e) for e in follower_log.leader_epoch_cache.entries] == [(0, 0)]
    finally:
        if manager is not None:
            await manager.stop()
        await channels.close()
        follower_log.close()
        await asyncio.to_thread(leader.stop)
