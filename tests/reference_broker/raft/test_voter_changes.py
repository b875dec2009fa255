"""KIP-853 voter changes on sans-IO raft cores (Kafka's AddVoterHandler, RemoveVoterHandler,
UpdateVoterHandler and KRaftControlRecordStateMachine): node 1 formatted ``--standalone``, nodes
2 and 3 without initial controllers, messages delivered by hand."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from reference_broker.raft import RaftCore, RaftTimeouts, wire
from reference_broker.raft.bootstrap import (
    BOOTSTRAP_SNAPSHOT_ID,
    bootstrap_checkpoint_path,
    write_bootstrap_checkpoint,
)
from reference_broker.raft.core import FOLLOWER, LEADER, RESIGNED, UNATTACHED
from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.messages import (
    DUPLICATE_VOTER,
    INVALID_REQUEST,
    NONE,
    REQUEST_TIMED_OUT,
    UNSUPPORTED_VERSION,
    VOTER_NOT_FOUND,
    BeginQuorumEpochRequest,
    FetchResponse,
    UpdateVoterRequest,
    VoteRequest,
)
from reference_broker.raft.snapshot import SnapshotReader
from reference_broker.raft.voter_changes import VoterChanges
from reference_broker.raft.voter_set import Endpoint, Voter, VoterHistory, VoterSet
from sdk.protocol.messages import KRaftVersionRecord, VotersRecord
from tests.reference_broker.raft.test_core import deliver as exchange

pytestmark = pytest.mark.unit

DIRS = {i: uuid.UUID(int=1000 + i) for i in (1, 2, 3)}
#: controller.quorum.bootstrap.servers: every node's controller, -N for node N (Kafka's ids)
BOOTSTRAP = (-1, -2, -3)


def voter(node_id: int, directory: uuid.UUID | None = None,
          versions: tuple[int, int] = (0, 1)) -> Voter:
    return Voter(node_id, directory or DIRS[node_id],
                 (Endpoint("CONTROLLER", f"127.0.1.{node_id}", 9100 + node_id),), versions)


def make(tmp_path: Path, node_id: int, standalone: bool = False) -> RaftCore:
    d = tmp_path / f"n{node_id}"
    if standalone:
        write_bootstrap_checkpoint(d, VoterSet({node_id: voter(node_id)}))
    log = ReplicatedLog.open(d)
    return RaftCore(node_id, set(), log, log.directory, directory_id=DIRS[node_id],
                    bootstrap_ids=tuple(b for b in BOOTSTRAP if b != -node_id), rng=random.Random(node_id),
                    timeouts=RaftTimeouts(election_timeout_ms=100, fetch_timeout_ms=200))


def deliver(nodes: dict[int, RaftCore], now: int) -> None:
    """test_core's exchange, with bootstrap ids routed to their nodes and UpdateRaftVoter answered
    by the leader's VoterChanges (both only ever queued by ``poll``)."""
    for node in nodes.values():
        kept = []
        for out in node.take_outbox():
            req = out.request
            if isinstance(req, UpdateVoterRequest):
                announced = Voter(req.voter_id, req.directory_id,
                                  tuple(Endpoint(*e) for e in req.endpoints), req.kraft_versions)
                answer = VoterChanges(nodes[out.destination]).update(announced, now)
                node.handle_update_voter_response(answer.error, now)
                continue
            if out.destination in BOOTSTRAP:
                out.destination = -out.destination
            kept.append(out)
        node.outbox.extend(kept)
    exchange(nodes, now)


def run(nodes: dict[int, RaftCore], now: int, rounds: int = 4) -> None:
    for _ in range(rounds):
        for n in nodes.values():
            n.poll(now)
        deliver(nodes, now)


@pytest.fixture
def quorum(tmp_path: Path) -> dict[int, RaftCore]:
    """Node 1 leads alone (standalone); 2 and 3 follow it as observers."""
    nodes = {1: make(tmp_path, 1, standalone=True), 2: make(tmp_path, 2), 3: make(tmp_path, 3)}
    nodes[1].poll(nodes[1].next_deadline_ms())
    assert nodes[1].role == LEADER
    for now in range(300, 1001, 20):  # the observers find the leader through bootstrap servers
        run(nodes, now, rounds=1)
    return nodes


def add(changes: VoterChanges, new: Voter, now: int) -> tuple[int, str | None]:
    """AddRaftVoter as the driver runs it: the checks, ApiVersions (answered), the append."""
    refused = changes.begin_add(new.node_id, new.directory_id, now)
    if refused is not None:
        return refused.error, refused.message
    changes.finish_add(new, NONE, now)
    pending = changes.pending
    if pending is None or pending.last_offset is None:
        raise AssertionError("finish_add settles at once only on an error")
    return -1, None


def settle(nodes: dict[int, RaftCore], changes: VoterChanges, now: int) -> int:
    pending = changes.pending
    assert pending is not None
    run(nodes, now)
    assert changes.poll(now) is pending and pending.answer is not None
    return pending.answer.error


def test_bootstrap_checkpoint_holds_kraft_version_1_and_the_voters(tmp_path: Path) -> None:
    path = write_bootstrap_checkpoint(tmp_path, VoterSet({1: voter(1)}))
    assert path == bootstrap_checkpoint_path(tmp_path)
    assert path.name == "00000000000000000000-0000000000.checkpoint"
    reader = SnapshotReader.open(path.parent, BOOTSTRAP_SNAPSHOT_ID)
    kraft, voters = reader.control
    assert isinstance(kraft, KRaftVersionRecord) and kraft.k_raft_version == 1
    assert isinstance(voters, VotersRecord)
    assert VoterSet.from_record(voters) == VoterSet({1: voter(1)})
    assert reader.records == []


def test_standalone_leads_and_observers_learn_voters_from_the_log(
        quorum: dict[int, RaftCore]) -> None:
    leader = quorum[1]
    assert leader.voters == {1} and leader.kraft_version == 1 and leader.epoch == 1
    for i in (2, 3):
        node = quorum[i]
        assert not node.is_voter and node.role == FOLLOWER and node.leader_id == 1
        assert node.voters == {1} and node.kraft_version == 1  # read from the fetched log
        assert node.log.end_offset == leader.log.end_offset
    # the observers' Fetches carry their directory ids (Fetch v17 ReplicaDirectoryId)
    assert leader.replica_states()[2].directory_id == DIRS[2]


def test_add_voters_one_at_a_time_then_commit_by_the_new_majority(
        quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    assert add(changes, voter(2), 1050) == (-1, None)
    assert quorum[1].voters == {1, 2}  # in force once appended, before it commits
    # a second change waits for the first
    error, message = add(changes, voter(3), 1050)
    assert error == REQUEST_TIMED_OUT and "previous add or remove" in (message or "")
    assert settle(quorum, changes, 1050) == NONE
    assert quorum[2].is_voter and quorum[2].voters == {1, 2}
    assert add(changes, voter(3), 1100) == (-1, None)
    assert settle(quorum, changes, 1100) == NONE
    assert all(n.voters == {1, 2, 3} for n in quorum.values())


def test_bad_adds_get_kafkas_errors(quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    error, message = add(changes, voter(1), 1050)
    assert error == DUPLICATE_VOTER and "already part of the set of voters" in (message or "")
    # ApiVersions to the new voter failed: Kafka answers REQUEST_TIMED_OUT
    assert changes.begin_add(2, DIRS[2], 1050) is None
    pending = changes.pending
    changes.finish_add(voter(2), UNSUPPORTED_VERSION, 1050)
    assert pending is not None and pending.answer is not None
    assert pending.answer.error == REQUEST_TIMED_OUT and changes.pending is None
    assert quorum[1].voters == {1}


def test_add_errors_in_detail(quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    outcomes = []
    for new in (voter(2, uuid.UUID(int=7)), Voter(4, uuid.UUID(int=4), voter(2).endpoints, (0, 1)),
                voter(2, versions=(0, 0))):
        assert changes.begin_add(new.node_id, new.directory_id, 1050) is None
        pending = changes.pending
        assert pending is not None
        changes.finish_add(new, NONE, 1050)
        assert pending.answer is not None
        outcomes.append((pending.answer.error, pending.answer.message or ""))
    assert outcomes[0][0] == REQUEST_TIMED_OUT and "lagging behind" in outcomes[0][1]
    assert outcomes[1][0] == REQUEST_TIMED_OUT and "lagging behind" in outcomes[1][1]
    assert outcomes[2][0] == INVALID_REQUEST and "kraft.version range" in outcomes[2][1]


def test_a_pending_add_expires_with_request_timed_out(quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1], request_timeout_ms=500)
    assert changes.begin_add(2, DIRS[2], 1050) is None  # ApiVersions never answers
    settled = changes.poll(1600)
    assert settled is not None and settled.answer is not None
    assert settled.answer.error == REQUEST_TIMED_OUT and changes.pending is None


def test_changes_need_kraft_version_1(tmp_path: Path) -> None:
    d = tmp_path / "static"
    log = ReplicatedLog.open(d)
    core = RaftCore(1, {1}, log, log.directory)
    core.poll(core.next_deadline_ms())
    assert core.role == LEADER and core.kraft_version == 0
    changes = VoterChanges(core)
    refused = changes.begin_add(2, DIRS[2], 5000)
    assert refused is not None and refused.error == UNSUPPORTED_VERSION
    refused = changes.remove(1, uuid.UUID(int=0), 5000)
    assert refused is not None and refused.error == UNSUPPORTED_VERSION


def test_remove_checks_the_directory_id_and_the_leader_resigns_after_its_own_removal(
        quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    for i, now in ((2, 1050), (3, 1100)):
        add(changes, voter(i), now)
        assert settle(quorum, changes, now) == NONE
    refused = changes.remove(2, uuid.UUID(int=7), 1150)
    assert refused is not None and refused.error == VOTER_NOT_FOUND
    refused = changes.remove(9, uuid.UUID(int=9), 1150)
    assert refused is not None and refused.error == VOTER_NOT_FOUND
    assert changes.remove(1, DIRS[1], 1150) is None
    assert quorum[1].voters == {2, 3} and quorum[1].role == LEADER  # leads until it commits
    assert settle(quorum, changes, 1150) == NONE
    assert quorum[1].role == RESIGNED
    for now in range(1200, 3000, 20):  # the remaining voters elect (EndQuorumEpoch, timeouts)
        run(quorum, now, rounds=1)
    new_leader = [n for n in quorum.values() if n.role == LEADER]
    assert [n.node_id for n in new_leader] in ([2], [3])
    assert not quorum[1].is_voter
    # the old leader goes on as an observer of the new one, from the bootstrap servers
    for now in range(3000, 4000, 20):
        run(quorum, now, rounds=1)
    assert (quorum[1].role, quorum[1].leader_id) == (FOLLOWER, new_leader[0].node_id)
    assert quorum[1].log.end_offset == new_leader[0].log.end_offset


def test_truncation_past_a_voters_record_reverts_the_voter_set(
        quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    add(changes, voter(2), 1050)
    offset = changes.pending.last_offset if changes.pending else None
    assert offset is not None
    quorum[3].poll(1050)  # node 3 fetches the uncommitted VotersRecord
    deliver({1: quorum[1], 3: quorum[3]}, 1050)
    assert quorum[3].voters == {1, 2}
    node = quorum[3]
    node.handle_fetch_response(1, FetchResponse(NONE, node.epoch, 1, offset,
                                                diverging=(node.epoch, offset)), 1050)
    assert node.log.end_offset == offset and node.voters == {1}


def test_voter_history_follows_appends_and_truncations() -> None:
    history = VoterHistory(VoterSet.static({1: ("h", 1)}))
    assert history.latest.ids == {1} and history.kraft_version == 0
    history.handle_control(5, KRaftVersionRecord(version=0, k_raft_version=1))
    history.handle_control(6, VoterSet({1: voter(1), 2: voter(2)}).to_record())
    history.handle_control(9, VoterSet({2: voter(2)}).to_record())
    assert history.latest.ids == {2} and history.at(8).ids == {1, 2} and history.at(4).ids == {1}
    history.truncate_new_entries(9)
    assert history.latest.ids == {1, 2} and history.latest_offset == 6
    history.truncate_new_entries(5)
    assert history.latest.ids == {1} and history.kraft_version == 0


def test_update_voter_replaces_endpoints(quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    add(changes, voter(2), 1050)
    settle(quorum, changes, 1050)
    moved = Voter(2, DIRS[2], (Endpoint("CONTROLLER", "127.0.1.2", 9999),), (0, 1))
    assert changes.update(moved, 1100).error == NONE
    assert quorum[1].voter_set.voters[2].endpoints[0].port == 9999
    assert changes.update(Voter(2, uuid.UUID(int=7), moved.endpoints, (0, 1)), 1100).error in (
        REQUEST_TIMED_OUT, VOTER_NOT_FOUND)
    run(quorum, 1150)
    assert changes.update(Voter(2, uuid.UUID(int=7), moved.endpoints, (0, 1)),
                          1150).error == VOTER_NOT_FOUND
    assert changes.update(Voter(2, DIRS[2], moved.endpoints, (0, 0)), 1150).error == INVALID_REQUEST
    assert quorum[2].role in (FOLLOWER, UNATTACHED)


def test_a_voter_on_new_ports_announces_them_with_update_raft_voter(
        quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    add(changes, voter(2), 1050)
    settle(quorum, changes, 1050)
    moved = (Endpoint("CONTROLLER", "127.0.1.2", 9999),)
    quorum[2].endpoints = moved  # as after a restart on another port
    run(quorum, 1100)
    assert quorum[1].voter_set.voters[2].endpoints == moved
    run(quorum, 1150)  # the new voter set reaches node 2 and 3; nothing more is sent
    assert quorum[2].voter_set.voters[2].endpoints == moved
    assert quorum[3].voter_set.voters[2].endpoints == moved
    quorum[2].poll(1160)
    assert not [o for o in quorum[2].take_outbox() if isinstance(o.request, UpdateVoterRequest)]


def test_vote_and_begin_quorum_epoch_v1_name_the_replica_they_are_for(
        quorum: dict[int, RaftCore]) -> None:
    changes = VoterChanges(quorum[1])
    add(changes, voter(2), 1050)
    settle(quorum, changes, 1050)
    leader = quorum[1]
    leader.endpoints = voter(1).endpoints
    vote = wire.to_request(VoteRequest(5, 1, 1, 10, DIRS[1]), "c", 2, leader)
    part = vote.topics[0].partitions[0]
    assert (vote.voter_id, part.voter_directory_id, part.candidate_directory_id) == (
        2, DIRS[2], DIRS[1])
    begin = wire.to_request(BeginQuorumEpochRequest(5, 1), "c", 2, leader)
    assert begin.voter_id == 2 and begin.topics[0].partitions[0].voter_directory_id == DIRS[2]
    assert [(e.name, e.host, e.port) for e in begin.leader_endpoints] == [
        ("CONTROLLER", "127.0.1.1", 9101)]
    assert not wire.invalid_voter_key(quorum[2], vote)
    assert wire.invalid_voter_key(quorum[3], vote)  # another node id
    part.voter_directory_id = uuid.UUID(int=7)
    assert wire.invalid_voter_key(quorum[2], vote)  # node 2 with another disk


def test_snapshots_carry_the_voter_set_and_a_restart_reads_it_then_the_log(
        quorum: dict[int, RaftCore], tmp_path: Path) -> None:
    changes = VoterChanges(quorum[1])
    add(changes, voter(2), 1050)
    settle(quorum, changes, 1050)
    leader = quorum[1]
    hw = leader.high_watermark
    assert hw is not None
    writer = leader.create_snapshot(hw - 1, leader.epoch, 0)
    assert writer is not None
    kraft, voters = writer.control  # Kafka's snapshots carry the kraft version and voter set
    assert isinstance(kraft, KRaftVersionRecord) and kraft.k_raft_version == 1
    assert isinstance(voters, VotersRecord) and VoterSet.from_record(voters).ids == {1, 2}
    writer.freeze()
    add(changes, voter(3), 1100)  # after the snapshot: only in the log
    settle(quorum, changes, 1100)
    leader.log.close()
    again = make(tmp_path, 1)
    assert again.voters == {1, 2, 3} and again.kraft_version == 1
    offsets = again.voter_history.offsets
    assert offsets == sorted(offsets) and again.voter_history.at(hw - 1).ids == {1, 2}
