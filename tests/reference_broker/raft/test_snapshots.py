"""KRaft snapshots on real metadata logs, in process: the file as Kafka lays it out, the leader's
Fetch answer naming a snapshot for a position before its log start, FetchSnapshot in chunks,
retention that keeps the latest snapshot, and a restarted core loading its latest snapshot."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from reference_broker.internal_records import TopicRecord
from reference_broker.raft import RaftCore, RaftTimeouts
from reference_broker.raft.core import LEADER
from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.messages import (
    SNAPSHOT_NOT_FOUND,
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
)
from reference_broker.raft.serde import batch_records, build_control_record_batch
from reference_broker.raft.snapshot import (
    SnapshotError,
    SnapshotId,
    SnapshotReader,
    SnapshotWriter,
    scan_snapshots,
)
from sdk.protocol.messages import SnapshotFooterRecord, SnapshotHeaderRecord
from sdk.records.batch import iter_batches

pytestmark = pytest.mark.unit

VOTERS = {1, 2, 3}
CHUNK = 100  # FetchSnapshot answers this many bytes at most, so a snapshot takes many


def make(tmp_path: Path, node_id: int) -> RaftCore:
    d = tmp_path / f"n{node_id}"
    return RaftCore(node_id, VOTERS, ReplicatedLog.open(d, segment_bytes=400), d,
                    timeouts=RaftTimeouts(election_timeout_ms=100, fetch_timeout_ms=200),
                    rng=random.Random(node_id))


def deliver(nodes: dict[int, RaftCore], now: int) -> list[tuple[int, object]]:
    """Send every queued request to the nodes present (others are down), hand back the answers;
    returns what was sent, in order."""
    sent: list[tuple[int, object]] = []
    seen = None
    for _ in range(500):
        pending = [(src, out) for src, n in nodes.items() for out in n.take_outbox()]
        state = [(n.role, n.epoch, n.log.end_offset, n.high_watermark, n._download is None)
                 for n in nodes.values()]
        only_fetches = all(isinstance(out.request, FetchRequest) for _, out in pending)
        if not pending or (only_fetches and state == seen):
            for src, _ in pending:  # followers fetch on forever: settled once nothing changes
                nodes[src].fetch_failed()
            return sent
        seen = state
        for src, out in pending:
            dst = nodes.get(out.destination)
            if dst is None:
                if isinstance(out.request, (FetchRequest, FetchSnapshotRequest)):
                    nodes[src].fetch_failed()
                continue
            req = out.request
            sent.append((src, req))
            if isinstance(req, VoteRequest):
                nodes[src].handle_vote_response(out.destination, dst.handle_vote_request(req, now), now)
            elif isinstance(req, BeginQuorumEpochRequest):
                nodes[src].handle_epoch_response(dst.handle_begin_quorum_epoch(req, now), now)
            elif isinstance(req, FetchRequest):
                nodes[src].handle_fetch_response(out.destination, dst.handle_fetch_request(req, now), now)
            elif isinstance(req, FetchSnapshotRequest):
                nodes[src].handle_fetch_snapshot_response(
                    out.destination, dst.handle_fetch_snapshot_request(req, now, CHUNK), now)
            else:
                dst_answer = dst.handle_end_quorum_epoch(req, now)
                nodes[src].handle_epoch_response(dst_answer, now)
        for n in nodes.values():
            n.poll(now)
    raise AssertionError("the messages never settled")


def topic(name: str) -> TopicRecord:
    return TopicRecord(name=name, topic_id=uuid.uuid4())


def names(records: Sequence[object]) -> list[str]:
    return [r.name for r in records if isinstance(r, TopicRecord)]


def elect_one(nodes: dict[int, RaftCore], now: int) -> RaftCore:
    first = nodes[min(nodes)]
    first._deadline_ms = now
    first.poll(now)
    deliver(nodes, now)
    assert first.role == LEADER
    return first


def test_snapshot_file_name_and_layout_as_kafka_writes_them(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, SnapshotId(12, 3), last_contained_log_timestamp=1234)
    writer.append([topic(f"t{i}") for i in range(2500)])
    path = writer.freeze()
    assert path.name == "00000000000000000012-0000000003.checkpoint"
    batches = list(iter_batches(path.read_bytes()))
    assert batches[0].is_control and batches[-1].is_control
    assert [b.partition_leader_epoch for b in batches] == [3] * len(batches)
    assert [b.base_offset for b in batches] == [0, 1, 1001, 2001, 2501]  # offsets from 0 in the file
    reader = SnapshotReader.open(tmp_path, SnapshotId(12, 3))
    assert (reader.last_contained_offset, reader.epoch, reader.last_contained_log_timestamp) == (11, 3, 1234)
    assert names(reader.records) == [f"t{i}" for i in range(2500)]
    assert isinstance(batch_records(batches[0])[0], SnapshotHeaderRecord)
    assert isinstance(batch_records(batches[-1])[0], SnapshotFooterRecord)


def test_a_cut_snapshot_is_refused_and_leftovers_are_removed_at_start(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, SnapshotId(5, 1), 0)
    writer.append([topic("a")])
    data = writer.freeze().read_bytes()
    with pytest.raises(SnapshotError):
        SnapshotReader.parse(SnapshotId(5, 1), data[:-10])
    with pytest.raises(SnapshotError):  # no footer
        SnapshotReader.parse(SnapshotId(5, 1), data[: len(data) - len(list(iter_batches(data))[-1].raw)])
    (tmp_path / "00000000000000000009-0000000001.checkpoint.part").write_bytes(b"x")
    (tmp_path / "00000000000000000001-0000000001.checkpoint.deleted").write_bytes(b"x")
    assert scan_snapshots(tmp_path) == [SnapshotId(5, 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000005-0000000001.checkpoint"]


def commit_topics(nodes: dict[int, RaftCore], leader: RaftCore, first: int, count: int,
                  now: int) -> None:
    for i in range(first, first + count):
        leader.append([topic(f"t{i}")], leader.epoch, now)
        for n in nodes.values():
            n.poll(now)
        deliver(nodes, now)


def snapshot_at_hw(node: RaftCore, records: list[object]) -> SnapshotId:
    """Snapshot ``node``'s log up to the last data batch below its high watermark."""
    assert node.high_watermark is not None
    last = None
    for batch in node.log.batches(node.log.start_offset, node.high_watermark):
        if not batch.is_control:
            last = batch
    assert last is not None
    writer = node.create_snapshot(last.last_offset, last.partition_leader_epoch, 7)
    assert writer is not None
    writer.append(records)  # type: ignore[arg-type]
    writer.freeze()
    return writer.snapshot_id


def test_a_follower_behind_the_leaders_log_start_downloads_the_snapshot_then_fetches_on(
        tmp_path: Path) -> None:
    nodes = {n: make(tmp_path, n) for n in VOTERS}
    now = 1000
    leader = elect_one(nodes, now)
    lagging = nodes.pop(3)  # down while the others commit
    lagging_end = lagging.log.end_offset
    commit_topics(nodes, leader, 0, 40, now)
    first = snapshot_at_hw(leader, [topic(f"t{i}") for i in range(20)])
    commit_topics(nodes, leader, 40, 10, now)
    second = snapshot_at_hw(leader, [topic(f"t{i}") for i in range(50)])
    assert first < second
    assert leader.log.clean(retention_bytes=0, retention_ms=-1, now_ms=now)
    # Kafka keeps the latest snapshot; the log starts at it, segments before it are gone
    assert leader.log.snapshots == [second]
    assert leader.log.start_offset == second.end_offset > lagging_end
    assert [p.name for p in leader.log.directory.glob("0*.checkpoint")] == [second.file_name]
    segments = sorted(int(p.stem) for p in leader.log.directory.glob("*.log"))
    assert segments[0] <= second.end_offset and segments[0] > 0  # older segments deleted
    commit_topics(nodes, leader, 50, 3, now)

    nodes[3] = lagging
    lagging.poll(now)
    sent = deliver(nodes, now)
    from_lagging = [req for src, req in sent if src == 3]
    assert isinstance(from_lagging[0], FetchRequest)
    chunks = [r for r in from_lagging if isinstance(r, FetchSnapshotRequest)]
    assert len(chunks) > 2 and chunks[0].position == 0
    assert {c.snapshot_id for c in chunks} == {(second.end_offset, second.epoch)}
    assert isinstance(from_lagging[-1], FetchRequest)
    assert lagging.log.snapshots == [second]
    assert lagging.log.start_offset == second.end_offset
    assert lagging.log.end_offset == leader.log.end_offset
    assert lagging.take_snapshot_to_load() == second
    assert names(lagging.log.read_snapshot(second).records) == [f"t{i}" for i in range(50)]
    delivered = [name for b in lagging.committed_batches() for name in names(b.records)]
    assert delivered == ["t50", "t51", "t52"]  # only what follows the snapshot


def test_fetch_positions_before_the_log_start_are_answered_with_the_latest_snapshot(
        tmp_path: Path) -> None:
    nodes = {n: make(tmp_path, n) for n in VOTERS}
    leader = elect_one(nodes, 1000)
    commit_topics(nodes, leader, 0, 30, 1000)
    snap = snapshot_at_hw(leader, [])
    assert leader.log.delete_before_snapshot(snap)
    start = leader.log.start_offset
    assert start == snap.end_offset
    validate = leader.log.validate_offset_and_epoch
    assert validate(0, 0) == ("snapshot", snap.end_offset, snap.epoch)
    assert validate(start - 1, snap.epoch) == ("snapshot", snap.end_offset, snap.epoch)
    assert validate(start, snap.epoch) == ("valid", start, snap.epoch)
    assert validate(start, snap.epoch - 1) == ("snapshot", snap.end_offset, snap.epoch)
    answer = leader.handle_fetch_request(FetchRequest(leader.epoch, 2, 0, 0), 1000)
    assert answer.snapshot_id == (snap.end_offset, snap.epoch) and not len(answer.records)
    missing = leader.handle_fetch_snapshot_request(
        FetchSnapshotRequest(leader.epoch, 2, (snap.end_offset + 1, snap.epoch), 0), 1000)
    assert missing.error == SNAPSHOT_NOT_FOUND


def test_snapshots_above_the_high_watermark_or_not_newer_are_refused(tmp_path: Path) -> None:
    nodes = {n: make(tmp_path, n) for n in VOTERS}
    leader = elect_one(nodes, 1000)
    commit_topics(nodes, leader, 0, 3, 1000)
    assert leader.high_watermark is not None
    with pytest.raises(ValueError, match="high watermark"):
        leader.create_snapshot(leader.high_watermark, leader.epoch, 0)
    snap = snapshot_at_hw(leader, [])
    assert leader.create_snapshot(snap.end_offset - 1, snap.epoch, 0) is None


def test_a_restarted_node_loads_its_latest_snapshot_before_the_batches_after_it(tmp_path: Path) -> None:
    nodes = {n: make(tmp_path, n) for n in VOTERS}
    leader = elect_one(nodes, 1000)
    commit_topics(nodes, leader, 0, 10, 1000)
    snap = snapshot_at_hw(nodes[2], [topic("from-snapshot")])
    commit_topics(nodes, leader, 10, 2, 1000)
    nodes[2].log.close()
    again = make(tmp_path, 2)
    assert again.take_snapshot_to_load() == snap
    assert again.log.start_offset == 0  # no retention asked: the log stays whole
    again.high_watermark = again.log.end_offset
    delivered = [name for b in again.committed_batches() for name in names(b.records)]
    assert delivered == ["t10", "t11"]


def test_control_record_values_are_the_bare_message_as_kafka_writes_them() -> None:
    """Kafka writes a KRaft control record's value with ``MessageUtil.toByteBuffer`` at the
    control type's current version (0): no version prefix; the message's own ``version`` field
    comes first."""
    batch = next(iter_batches(build_control_record_batch(
        SnapshotHeaderRecord(version=0, last_contained_log_timestamp=0x0102030405060708),
        base_offset=0, epoch=1, timestamp_ms=0)))
    (record,) = list(batch.iter_records())
    assert record.value == b"\x00\x00" + bytes(range(1, 9)) + b"\x00"
    assert isinstance(batch_records(batch)[0], SnapshotHeaderRecord)


def test_a_downloaded_snapshot_that_is_not_whole_is_dropped_and_the_log_kept(tmp_path: Path) -> None:
    follower = make(tmp_path, 2)
    follower.handle_begin_quorum_epoch(BeginQuorumEpochRequest(1, 1), 0)
    follower.handle_fetch_response(1, FetchResponse(0, 1, 1, 0, snapshot_id=(50, 1)), 0)
    follower.poll(0)
    (out,) = follower.take_outbox()
    assert isinstance(out.request, FetchSnapshotRequest) and out.request.position == 0
    follower.handle_fetch_snapshot_response(
        1, FetchSnapshotResponse(0, 1, 1, (50, 1), 4, 0, b"junk"), 0)
    assert follower.log.snapshots == [] and follower.take_snapshot_to_load() is None
    assert not list(follower.log.directory.glob("0*-0*.checkpoint*"))
    follower.poll(0)
    (again,) = follower.take_outbox()
    assert isinstance(again.request, FetchRequest)  # starts over with a Fetch
