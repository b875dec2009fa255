"""Replication over the wire, before the controller drives it: a real broker (in-process, on a
loopback port) leads a partition through its ReplicaManager; a follower ReplicaManager with its own
PartitionLog in a temp dir fetches from it over TCP with PeerChannels. The transitions the metadata
publisher will make (become_leader / become_follower) are called directly, and the controller's
AlterPartition is a callback that commits every proposal.

Checked end to end: the follower's diverged suffix (records of an old epoch the leader never had)
is cut by the leader's diverging epoch; the follower ends byte-identical to the leader with the
same leader epochs; acks=all from a real producer (confluent-kafka) is answered once the follower
has the records; a follower that stops fetching is shrunk out of the ISR after
replica.lag.time.max.ms once the leader has records it lacks, and acks=all then gets
NOT_ENOUGH_REPLICAS (min.insync.replicas=2)."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from reference_broker.broker import Broker
from reference_broker.config import BrokerConfig
from reference_broker.handlers import produce
from reference_broker.log import PartitionLog
from reference_broker.network.peer import PeerChannels
from reference_broker.replication import IsrCommitted, IsrProposal, ReplicaManager, ReplicationConfig
from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest, ProduceRequest
from sdk.records import RecordBatchBuilder, iter_batches

confluent_kafka = pytest.importorskip("confluent_kafka")

CONFIG = ReplicationConfig(lag_time_max_ms=400, fetch_wait_max_ms=100, fetch_backoff_ms=50)


def batch(values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(1_000 + i, None, value)
    return builder.build()


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


async def produce_raw(host: str, port: int, topic: str, records: bytes, acks: int) -> int:
    """One Produce (v9) of ``records`` to partition 0; its error code."""
    request = ProduceRequest(acks=acks, timeout_ms=5_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = encode_request(request, 9, 1, "replication-test")
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, response = decode_response(ProduceRequest.API_KEY, 9, await reader.readexactly(size))
        return response.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]
    finally:
        writer.close()


async def list_latest(host: str, port: int, topic: str) -> int:
    """ListOffsets (v7) LATEST of partition 0; its error code."""
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = encode_request(request, 7, 1, "replication-test")
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, response = decode_response(ListOffsetsRequest.API_KEY, 7, await reader.readexactly(size))
        return response.topics[0].partitions[0].error_code  # type: ignore[attr-defined]
    finally:
        writer.close()


async def epoch_end(broker: Broker, epoch: int, current_epoch: int) -> tuple[int, int, int]:
    """OffsetForLeaderEpoch (v4) for partition 0 of "t": (error, epoch, end offset)."""
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=current_epoch, leader_epoch=epoch)])])
    reader, writer = await asyncio.open_connection(broker.host, broker.port)
    try:
        payload = encode_request(request, 4, 1, "replication-test")
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, response = decode_response(OffsetForLeaderEpochRequest.API_KEY, 4,
                                      await reader.readexactly(size))
        found = response.topics[0].partitions[0]  # type: ignore[attr-defined]
        return found.error_code, found.leader_epoch, found.end_offset
    finally:
        writer.close()


class Controller:
    def __init__(self) -> None:
        self.proposals: list[IsrProposal] = []

    async def __call__(self, proposal: IsrProposal) -> IsrCommitted:
        self.proposals.append(proposal)
        return IsrCommitted(proposal.leader_epoch, proposal.partition_epoch + 1, proposal.isr)


def all_bytes(plog: PartitionLog) -> bytes:
    return bytes(plog.read(plog.log_start_offset, 1 << 24, max_offset=plog.log_end_offset).data)


async def test_follower_truncates_replicates_and_acks_all_follows_the_isr(tmp_path: Path) -> None:
    config = BrokerConfig.build(tmp_path / "leader", port=0, node_id=1)
    async with Broker(config) as broker:
        broker.logs.create_topic("t", 1, {"min.insync.replicas": "2"})
        topic_id = broker.logs.topic("t").topic_id  # type: ignore[union-attr]
        leader_log = broker.logs.manager.get_log("t", 0)
        # Epoch 1 wrote offsets 0-4 on the leader; the follower has them and two more records of
        # epoch 1 (5-6) that never reached the leader before it lost leadership.
        leader_log.leader_epoch = 1
        leader_log.append(batch([b"a0", b"a1", b"a2"]), now_ms=1)
        leader_log.append(batch([b"a3", b"a4"]), now_ms=1)
        follower_log = PartitionLog.open(tmp_path / "follower" / "t-0", now_ms=1)
        follower_log.append_as_follower(all_bytes(leader_log), now_ms=1)
        follower_log.leader_epoch = 1
        follower_log.append(batch([b"lost5", b"lost6"]), now_ms=1)
        assert follower_log.log_end_offset == 7

        controller = Controller()
        leader_channels, follower_channels = PeerChannels("leader"), PeerChannels("follower")
        leader_rm = ReplicaManager(1, get_log=lambda tp: broker.logs.manager.get_log(*tp),
                                   channels=leader_channels, config=CONFIG,
                                   alter_partition=controller, notify=broker.waiters.notify,
                                   topic_id=lambda name: topic_id)
        broker.replica_manager = leader_rm
        produce.install(broker.registry)  # the cluster-mode Produce (acks=all waits)
        follower_rm = ReplicaManager(2, get_log=lambda tp: follower_log, channels=follower_channels,
                                     config=CONFIG, topic_id=lambda name: topic_id)
        follower_channels.update(1, broker.host, broker.port)
        await leader_rm.start()
        await follower_rm.start()
        try:
            assert leader_rm.become_leader(("t", 0), 2, 0, [1, 2], [1, 2])
            # Nothing of epoch 2 is committed until the follower fetches: LATEST is not known yet.
            assert await list_latest(broker.host, broker.port, "t") == ErrorCode.OFFSET_NOT_AVAILABLE
            assert follower_rm.become_follower(("t", 0), 1, 2, 0, [1, 2])
            await until(lambda: leader_log.high_watermark == 5, "the follower truncated and fetched")
            assert await list_latest(broker.host, broker.port, "t") == ErrorCode.NONE

            # A real producer's acks=all is answered once the follower has the records.
            producer = confluent_kafka.Producer({
                "bootstrap.servers": f"{broker.host}:{broker.port}", "acks": "all",
                "linger.ms": 0, "message.timeout.ms": 15_000})
            reports: list[tuple[object, int]] = []
            for i in range(3):
                producer.produce("t", b"b%d" % i, partition=0,
                                 on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            remaining = await asyncio.to_thread(producer.flush, 20)
            assert remaining == 0 and [e for e, _ in reports] == [None] * 3
            assert sorted(o for _, o in reports) == [5, 6, 7]

            await until(lambda: follower_log.log_end_offset == leader_log.log_end_offset == 8
                        and follower_log.high_watermark == 8, "the follower caught up")
            assert all_bytes(follower_log) == all_bytes(leader_log)
            values = [r.value for b in iter_batches(all_bytes(follower_log)) for r in b]
            assert b"lost5" not in values and values[5:] == [b"b0", b"b1", b"b2"]
            assert follower_log.leader_epoch_cache.entries == leader_log.leader_epoch_cache.entries
            assert [tuple(e) for e in leader_log.leader_epoch_cache.entries] == [(1, 0), (2, 5)]
            assert leader_rm.partition("t", 0).isr == (1, 2)  # type: ignore[union-attr]

            # The follower stops fetching. Having the whole log it stays in sync (an idle
            # partition keeps its ISR); once the leader has more, after replica.lag.time.max.ms
            # it is shrunk out, which commits what only the leader has, and acks=all with
            # min.insync.replicas=2 is then refused before anything is written.
            await follower_rm.stop()
            code = await produce_raw(broker.host, broker.port, "t", batch([b"c0"]), acks=1)
            assert code == ErrorCode.NONE
            assert leader_log.high_watermark == 8 < leader_log.log_end_offset == 9
            await until(lambda: leader_rm.partition("t", 0).isr == (1,),  # type: ignore[union-attr]
                        "the ISR shrank")
            assert controller.proposals[-1].isr == (1,)
            assert leader_log.high_watermark == 9
            code = await produce_raw(broker.host, broker.port, "t", batch([b"c1"]), acks=-1)
            assert code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert leader_log.log_end_offset == 9
        finally:
            await follower_rm.stop()
            await leader_rm.stop()
            await follower_channels.close()
            await leader_channels.close()
            broker.replica_manager = None
            follower_log.close()


async def test_a_leader_change_cuts_the_old_leaders_unreplicated_records(tmp_path: Path) -> None:
    """Two brokers replicate a partition; the leader writes two records with acks=1 that the
    follower never fetches; the follower is elected in epoch 2 and the old leader, now its
    follower, cuts those records (the diverging epoch of its first fetch) and copies the new
    leader's log exactly. The old leader refuses produces from then on."""
    topic_id = uuid.uuid4()
    controller = Controller()
    async with Broker(BrokerConfig.build(tmp_path / "a", port=0, node_id=1)) as a, \
            Broker(BrokerConfig.build(tmp_path / "b", port=0, node_id=2)) as b:
        managers = {}
        for broker in (a, b):
            broker.logs.manager.create_topic("t", 1, {}, topic_id=topic_id)
            channels = PeerChannels(f"node-{broker.node_id}")
            for peer in (a, b):
                channels.update(peer.node_id, peer.host, peer.port)
            managers[broker.node_id] = ReplicaManager(
                broker.node_id, get_log=lambda tp, broker=broker: broker.logs.manager.get_log(*tp),
                channels=channels, config=CONFIG, alter_partition=controller,
                notify=broker.waiters.notify, topic_id=lambda name: topic_id)
            broker.replica_manager = managers[broker.node_id]
            produce.install(broker.registry)
            await managers[broker.node_id].start()
        log_a, log_b = a.logs.manager.get_log("t", 0), b.logs.manager.get_log("t", 0)
        try:
            managers[1].become_leader(("t", 0), 1, 0, [1, 2], [1, 2])
            managers[2].become_follower(("t", 0), 1, 1, 0, [1, 2])
            assert await produce_raw(a.host, a.port, "t", batch([b"x0", b"x1", b"x2"]), acks=-1) == 0
            await until(lambda: log_b.high_watermark == 3, "b has the committed records")

            managers[2].stop_replica(("t", 0), delete=False)  # b stops fetching
            assert await produce_raw(a.host, a.port, "t", batch([b"only-a3", b"only-a4"]), acks=1) == 0
            assert log_a.log_end_offset == 5 and log_b.log_end_offset == 3

            # b is elected in epoch 2 and takes a write; a follows it.
            assert managers[2].become_leader(("t", 0), 2, 1, [1, 2], [2])
            assert await produce_raw(b.host, b.port, "t", batch([b"y3"]), acks=1) == 0
            assert managers[1].become_follower(("t", 0), 2, 2, 1, [1, 2])
            await until(lambda: log_a.log_end_offset == log_b.log_end_offset == 4
                        and log_a.high_watermark == 4, "a copied the new leader")
            assert all_bytes(log_a) == all_bytes(log_b)
            values = [r.value for batch_ in iter_batches(all_bytes(log_a)) for r in batch_]
            assert values == [b"x0", b"x1", b"x2", b"y3"]
            assert [tuple(e) for e in log_a.leader_epoch_cache.entries] == [(1, 0), (2, 3)]
            code = await produce_raw(a.host, a.port, "t", batch([b"z"]), acks=1)
            assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # OffsetForLeaderEpoch: the new leader says where epoch 1 ended; the old one is no
            # leader any more, and an older current epoch is fenced.
            assert await epoch_end(b, 1, 2) == (ErrorCode.NONE, 1, 3)
            assert await epoch_end(b, 2, 2) == (ErrorCode.NONE, 2, 4)
            assert (await epoch_end(b, 1, 1))[0] == ErrorCode.FENCED_LEADER_EPOCH
            assert (await epoch_end(a, 1, 2))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # b's ISR grows back once a caught up with it.
            await until(lambda: managers[2].partition("t", 0).isr == (1, 2),  # type: ignore[union-attr]
                        "a rejoined the ISR")
        finally:
            for broker in (a, b):
                manager = managers.get(broker.node_id)
                if manager is not None:
                    await manager.stop()
                    await manager.channels.close()
                broker.replica_manager = None


async def test_fetch_from_the_closest_replica(tmp_path: Path) -> None:
    """KIP-392 with ``replica.selector.class``: the leader (rack r1) answers a consumer in rack r2
    with the follower there as its preferred read replica and no records; the follower serves
    that consumer's Fetch (v11+) up to its own high watermark, and refuses an older Fetch, which
    names no rack, with NOT_LEADER_OR_FOLLOWER."""
    from tests.reference_broker.wire import WireClient, fetch_request

    topic_id = uuid.uuid4()
    racks = {1: "r1", 2: "r2"}
    config = ReplicationConfig(fetch_wait_max_ms=100, fetch_backoff_ms=50, select_closest_replica=True)
    async with Broker(BrokerConfig.build(tmp_path / "a", port=0, node_id=1)) as a, \
            Broker(BrokerConfig.build(tmp_path / "b", port=0, node_id=2)) as b:
        managers = {}
        for broker in (a, b):
            broker.logs.manager.create_topic("t", 1, {}, topic_id=topic_id)
            channels = PeerChannels(f"node-{broker.node_id}")
            channels.update(1, a.host, a.port)
            managers[broker.node_id] = ReplicaManager(
                broker.node_id, get_log=lambda tp, broker=broker: broker.logs.manager.get_log(*tp),
                channels=channels, config=config, alter_partition=Controller(),
                notify=broker.waiters.notify, topic_id=lambda name: topic_id, rack_of=racks.get)
            broker.replica_manager = managers[broker.node_id]
            produce.install(broker.registry)
            await managers[broker.node_id].start()
        try:
            managers[1].become_leader(("t", 0), 1, 0, [1, 2], [1, 2])
            managers[2].become_follower(("t", 0), 1, 1, 0, [1, 2])
            assert await produce_raw(a.host, a.port, "t", batch([b"v0", b"v1"]), acks=-1) == 0
            log_b = b.logs.manager.get_log("t", 0)
            await until(lambda: log_b.high_watermark == 2, "the follower has the records")

            def fetch(broker: Broker, version: int, rack: str) -> object:
                request = fetch_request("t", topic_id=topic_id)
                request.rack_id = rack
                for t in request.topics:
                    for p in t.partitions:
                        p.current_leader_epoch = 1
                with WireClient(f"{broker.host}:{broker.port}") as wire:
                    return wire.request(request, version).responses[0].partitions[0]

            at_leader = await asyncio.to_thread(fetch, a, 13, "r2")
            assert (at_leader.error_code, at_leader.preferred_read_replica) == (0, 2)  # type: ignore[attr-defined]
            assert not at_leader.records  # type: ignore[attr-defined]
            same_rack = await asyncio.to_thread(fetch, a, 13, "r1")
            assert same_rack.preferred_read_replica == -1 and same_rack.records  # type: ignore[attr-defined]
            at_follower = await asyncio.to_thread(fetch, b, 13, "r2")
            assert at_follower.error_code == 0 and at_follower.high_watermark == 2  # type: ignore[attr-defined]
            values = [r.value for bt in iter_batches(bytes(at_follower.records)) for r in bt]  # type: ignore[attr-defined]
            assert values == [b"v0", b"v1"]
            old_client = await asyncio.to_thread(fetch, b, 10, "")
            assert old_client.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER  # type: ignore[attr-defined]
        finally:
            for broker in (a, b):
                manager = managers.get(broker.node_id)
                if manager is not None:
                    await manager.stop()
                    await manager.channels.close()
                broker.replica_manager = None
