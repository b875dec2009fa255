"""Upgrading kraft.version from 0 to 1 on a static quorum (Kafka 4.1's KRaft upgrade: followers
announce themselves with UpdateRaftVoter, the leader keeps them in memory, and the upgrade
writes kraft.version 1 with that voter set), on sans-IO raft cores with messages delivered by
hand."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from reference_broker.raft import RaftCore, RaftTimeouts
from reference_broker.raft.core import FOLLOWER, LEADER, NotLeaderError
from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.messages import NONE, UpdateVoterRequest
from reference_broker.raft.voter_changes import KRaftUpgradeError, KRaftUpgradeStateError, VoterChanges
from reference_broker.raft.voter_set import NO_DIRECTORY, Endpoint, Voter, VoterSet
from sdk.protocol.messages import KRaftVersionRecord, VotersRecord
from tests.reference_broker.raft.test_core import deliver as exchange

pytestmark = pytest.mark.unit

DIRS = {i: uuid.UUID(int=2000 + i) for i in (1, 2, 3)}
ADDRESSES = {i: ("127.0.0.1", 9200 + i) for i in (1, 2, 3)}


def endpoint(node_id: int) -> Endpoint:
    return Endpoint("CONTROLLER", *ADDRESSES[node_id])


def make(tmp_path: Path, node_id: int) -> RaftCore:
    log = ReplicatedLog.open(tmp_path / f"n{node_id}")
    return RaftCore(node_id, VoterSet.static(ADDRESSES), log, log.directory, directory_id=DIRS[node_id],
                    endpoints=(endpoint(node_id),), rng=random.Random(node_id),
                    timeouts=RaftTimeouts(election_timeout_ms=100, fetch_timeout_ms=200))


class Quorum:
    """Three static voters; UpdateRaftVoter goes to the leader's one ``VoterChanges`` (the
    driver's, which keeps the in-memory voter set), unless the sender is cut off."""

    def __init__(self, tmp_path: Path):
        self.nodes = {i: make(tmp_path, i) for i in (1, 2, 3)}
        self.changes = {i: VoterChanges(n) for i, n in self.nodes.items()}
        self.cut_off: set[int] = set()
        self.announced: list[tuple[int, int]] = []  # (voter, the leader's error code)

    def run(self, now: int, rounds: int = 4) -> None:
        for _ in range(rounds):
            for i, node in self.nodes.items():
                if i not in self.cut_off:
                    node.poll(now)
            self.deliver(now)

    def deliver(self, now: int) -> None:
        live = {i: n for i, n in self.nodes.items() if i not in self.cut_off}
        for node in live.values():
            kept = []
            for out in node.take_outbox():
                req = out.request
                if isinstance(req, UpdateVoterRequest):
                    announced = Voter(req.voter_id, req.directory_id,
                                      tuple(Endpoint(*e) for e in req.endpoints), req.kraft_versions)
                    answer = self.changes[out.destination].update(announced, now)
                    self.announced.append((req.voter_id, answer.error))
                    node.handle_update_voter_response(answer.error, now)
                    continue
                kept.append(out)
            node.outbox.extend(kept)
        exchange(live, now)

    def leader(self) -> RaftCore:
        leaders = [n for i, n in self.nodes.items() if n.role == LEADER and i not in self.cut_off]
        assert len(leaders) == 1
        return leaders[0]

    def elect(self, start: int = 0, end: int = 1500) -> int:
        for now in range(start, end, 20):
            self.run(now, rounds=1)
        return end


@pytest.fixture
def quorum(tmp_path: Path) -> Quorum:
    return Quorum(tmp_path)


def test_followers_announce_themselves_once_per_epoch_at_kraft_version_0(quorum: Quorum) -> None:
    quorum.elect()
    leader = quorum.leader()
    assert leader.kraft_version == 0
    followers = sorted(i for i in quorum.nodes if i != leader.node_id)
    # each follower is taken in once (an early try before the leader's high watermark is
    # refused and sent again after a backoff), and does not announce itself again
    accepted = sorted(voter for voter, error in quorum.announced if error == NONE)
    assert accepted == followers
    count = len(quorum.announced)
    quorum.elect(1500, 3000)
    assert len(quorum.announced) == count
    volatile = quorum.changes[leader.node_id].volatile_voters()
    assert volatile == VoterSet({i: Voter(i, DIRS[i], (endpoint(i),), (0, 1)) for i in (1, 2, 3)})
    # the log holds no voter set at kraft.version 0
    assert leader.voter_history.latest_offset is None


def test_upgrade_writes_kraft_version_1_with_the_announced_voters(quorum: Quorum) -> None:
    now = quorum.elect()
    leader = quorum.leader()
    changes = quorum.changes[leader.node_id]
    end = leader.log.end_offset
    assert changes.upgrade_kraft_version(leader.epoch, 1, True, now) is False  # validate only
    assert leader.log.end_offset == end and leader.kraft_version == 0
    assert changes.upgrade_kraft_version(leader.epoch, 1, False, now) is True
    assert leader.kraft_version == 1 and leader.log.end_offset == end + 2
    expected = VoterSet({i: Voter(i, DIRS[i], (endpoint(i),), (0, 1)) for i in (1, 2, 3)})
    assert leader.voter_set == expected
    kraft, voters = (r for b in leader.log.batches(end, end + 2) for r in _records(b))
    assert isinstance(kraft, KRaftVersionRecord) and kraft.k_raft_version == 1
    assert isinstance(voters, VotersRecord) and VoterSet.from_record(voters) == expected
    quorum.run(now)
    for node in quorum.nodes.values():  # replicated: every node reads it from its log
        assert node.kraft_version == 1 and node.voter_set == expected
        assert node.log.end_offset == leader.log.end_offset
    assert leader.high_watermark == leader.log.end_offset
    # the same level again changes nothing; a downgrade is refused
    assert changes.upgrade_kraft_version(leader.epoch, 1, False, now) is False
    with pytest.raises(KRaftUpgradeError, match="because the new version is a downgrade"):
        changes.upgrade_kraft_version(leader.epoch, 0, False, now)


def test_upgrade_survives_a_restart_and_a_new_leader(quorum: Quorum, tmp_path: Path) -> None:
    now = quorum.elect()
    leader = quorum.leader()
    quorum.changes[leader.node_id].upgrade_kraft_version(leader.epoch, 1, False, now)
    quorum.run(now)
    restarted = make(tmp_path, leader.node_id)  # the same log directory, read again
    assert restarted.kraft_version == 1 and restarted.voter_set == leader.voter_set
    quorum.cut_off.add(leader.node_id)
    quorum.elect(now, now + 2000)
    assert quorum.leader().node_id != leader.node_id and quorum.leader().kraft_version == 1


def test_a_voter_that_never_announced_itself_blocks_the_upgrade(quorum: Quorum) -> None:
    quorum.cut_off.add(3)
    now = quorum.elect()
    leader = quorum.leader()
    changes = quorum.changes[leader.node_id]
    with pytest.raises(KRaftUpgradeError,
                       match=r"Invalid upgrade of kraft\.version to KRAFT_VERSION_1 because not all of"
                             r" the voters support it"):
        changes.upgrade_kraft_version(leader.epoch, 1, False, now)
    assert leader.kraft_version == 0
    # once it is back and announces itself, the upgrade goes through
    quorum.cut_off.clear()
    now = quorum.elect(now, now + 600)
    assert quorum.nodes[3].role == FOLLOWER
    leader = quorum.leader()
    assert quorum.changes[leader.node_id].upgrade_kraft_version(leader.epoch, 1, False, now) is True


def test_a_voter_announced_without_a_directory_id_blocks_the_upgrade(quorum: Quorum) -> None:
    now = quorum.elect()
    leader = quorum.leader()
    changes = quorum.changes[leader.node_id]
    other = next(i for i in quorum.nodes if i != leader.node_id)
    answer = changes.update(Voter(other, NO_DIRECTORY, (endpoint(other),), (0, 1)), now)
    assert answer.error == NONE
    with pytest.raises(KRaftUpgradeStateError, match="Directory id must be known for all of the voters"):
        changes.upgrade_kraft_version(leader.epoch, 1, False, now)


def test_only_the_leader_of_that_epoch_upgrades(quorum: Quorum) -> None:
    now = quorum.elect()
    leader = quorum.leader()
    with pytest.raises(NotLeaderError, match="is stale"):
        quorum.changes[leader.node_id].upgrade_kraft_version(leader.epoch - 1, 1, False, now)
    follower = next(n for n in quorum.nodes.values() if n.role == FOLLOWER)
    with pytest.raises(NotLeaderError):
        quorum.changes[follower.node_id].upgrade_kraft_version(leader.epoch, 1, False, now)


def _records(batch: object) -> list[object]:
    from reference_broker.raft.serde import batch_records

    return list(batch_records(batch))
