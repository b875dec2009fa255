"""The metadata image written as a raft snapshot and loaded back: a one-voter raft core commits
metadata batches, the loader replays them, the generator snapshots the image by bytes or by
time, and a fresh loader given the snapshot file has the same image."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from reference_broker import internal_records as rec
from reference_broker.metadata.loader import MetadataLoader
from reference_broker.metadata.snapshot_generator import SnapshotGenerator
from reference_broker.raft import RaftCore, RaftTimeouts
from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.snapshot import SnapshotReader
from tests.reference_broker.metadata.test_delta import register

pytestmark = pytest.mark.unit


class Node:
    """One voter: its own leader, so every append commits at once."""

    def __init__(self, tmp_path: Path, *, max_bytes: int, interval_ms: int = 0) -> None:
        self.core = RaftCore(1, {1}, ReplicatedLog.open(tmp_path), tmp_path,
                             timeouts=RaftTimeouts(election_timeout_ms=1), rng=random.Random(1))
        self.core.poll(10_000)
        assert self.core.is_leader
        self.loader = MetadataLoader()
        self.clock_s = 0.0
        self.generator = SnapshotGenerator(self.core, self.loader, max_bytes_between=max_bytes,
                                           max_interval_ms=interval_ms, clock=lambda: self.clock_s)

    def commit(self, *records: object) -> None:
        self.core.append(list(records), self.core.epoch, 10_000)  # type: ignore[arg-type]
        for batch in self.core.committed_batches():
            self.loader.handle_commit(batch)
            self.generator.handle_commit(batch)


def topic_records(name: str, partitions: int = 2) -> list[object]:
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    out: list[object] = [rec.TopicRecord(name=name, topic_id=topic_id)]
    for p in range(partitions):
        out.append(rec.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1, 2],
                                       isr=[1, 2], leader=1 + p % 2, leader_epoch=3,
                                       partition_epoch=4))
    return out


def loaded(node: Node) -> MetadataLoader:
    latest = node.core.log.latest_snapshot
    assert latest is not None
    fresh = MetadataLoader()
    fresh.handle_load_snapshot(SnapshotReader.open(node.core.log.directory, latest))
    return fresh


def test_the_image_snapshotted_by_bytes_loads_back_equal(tmp_path: Path) -> None:
    node = Node(tmp_path, max_bytes=400)
    node.commit(rec.FeatureLevelRecord(name="metadata.version", feature_level=27))
    node.commit(register(1, 10, fenced=False), register(2, 11))
    node.commit(*topic_records("kept"))
    node.commit(*topic_records("gone"))
    node.commit(rec.ConfigRecord(resource_type=2, resource_name="kept", name="retention.ms",
                                 value="1000"))
    node.commit(rec.RemoveTopicRecord(topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, "gone")))
    assert node.generator.written, "400 bytes of batches were committed: a snapshot is due"
    while node.generator.bytes_since_snapshot:  # end on a snapshot of the final image
        node.commit(rec.NoOpRecord())
    assert node.generator.written[-1] == node.loader.image.offset + 1
    image = loaded(node).image
    assert image == node.loader.image
    assert image.topic("gone") is None and image.topic("kept") is not None
    assert image.configs[(2, "kept")] == {"retention.ms": "1000"}


def test_a_snapshot_by_time_needs_records_since_the_last_one(tmp_path: Path) -> None:
    node = Node(tmp_path, max_bytes=1 << 30, interval_ms=60_000)
    node.commit(*topic_records("a"))
    assert node.generator.written == []
    node.clock_s += 61
    node.commit(*topic_records("b"))
    assert node.generator.written == [node.loader.image.offset + 1]
    node.clock_s += 61
    assert node.generator.bytes_since_snapshot == 0  # nothing new: no snapshot is due
    assert loaded(node).image == node.loader.image
