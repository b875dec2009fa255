"""The raft core's rules (Kafka's KafkaRaftClient) on real metadata logs, messages delivered by
hand between three or one in-process cores."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from reference_broker.internal_records import TopicRecord
from reference_broker.raft import NotLeaderError, RaftCore, RaftTimeouts
from reference_broker.raft.core import CANDIDATE, FOLLOWER, LEADER, UNATTACHED
from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    NONE,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochResponse,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from reference_broker.raft.quorum_state import read_quorum_state

pytestmark = pytest.mark.unit

VOTERS = {1, 2, 3}


def make(tmp_path: Path, node_id: int, voters: set[int] = VOTERS, seed: int = 0) -> RaftCore:
    d = tmp_path / f"n{node_id}"
    return RaftCore(node_id, voters, ReplicatedLog.open(d), d,
                    timeouts=RaftTimeouts(election_timeout_ms=100, fetch_timeout_ms=200),
                    rng=random.Random(seed + node_id))


def deliver(nodes: dict[int, RaftCore], now: int) -> None:
    """Send every queued request and hand back each answer, until nothing is queued."""
    for _ in range(50):
        pending = [(src, out) for src, n in nodes.items() for out in n.take_outbox()]
        if not pending:
            return
        for src, out in pending:
            dst = nodes.get(out.destination)
            if dst is None:
                continue
            req = out.request
            if isinstance(req, VoteRequest):
                nodes[src].handle_vote_response(out.destination,
                                                dst.handle_vote_request(req, now), now)
            elif isinstance(req, BeginQuorumEpochRequest):
                nodes[src].handle_epoch_response(dst.handle_begin_quorum_epoch(req, now), now)
            elif isinstance(req, EndQuorumEpochRequest):
                nodes[src].handle_epoch_response(dst.handle_end_quorum_epoch(req, now), now)
            elif isinstance(req, FetchRequest):
                nodes[src].handle_fetch_response(out.destination,
                                                 dst.handle_fetch_request(req, now), now)


def topic(name: str) -> TopicRecord:
    return TopicRecord(name=name, topic_id=uuid.uuid4())


def name_of(record: object) -> str:
    assert isinstance(record, TopicRecord)
    return record.name


def elect(nodes: dict[int, RaftCore], node_id: int, now: int) -> None:
    node = nodes[node_id]
    node._deadline_ms = now  # its election timeout (or fetch timeout) expires now
    node._last_fetch_ms = now - node.timeouts.fetch_timeout_ms
    node.poll(now)
    deliver(nodes, now)


def replicate(nodes: dict[int, RaftCore], now: int, rounds: int = 3) -> None:
    for _ in range(rounds):
        for n in nodes.values():
            n.poll(now)
        deliver(nodes, now)


@pytest.fixture
def trio(tmp_path: Path) -> dict[int, RaftCore]:
    return {i: make(tmp_path, i) for i in VOTERS}


def test_single_voter_elects_itself_and_commits_its_appends(tmp_path: Path) -> None:
    core = make(tmp_path, 1, {1})
    core.poll(core.next_deadline_ms())
    assert core.role == LEADER and core.epoch == 1
    assert core.high_watermark == 1  # the LeaderChangeMessage
    last = core.append([topic("a"), topic("b")], 1, 0)
    assert last == 2 and core.high_watermark == 3
    [batch] = core.committed_batches()
    assert (batch.base_offset, batch.last_offset, batch.epoch) == (1, 2, 1)
    assert [name_of(r) for r in batch.records] == ["a", "b"]
    assert core.committed_batches() == []


def test_election_by_majority_then_followers_learn_the_leader(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 1000)
    assert trio[1].role == LEADER and trio[1].epoch == 1
    for i in (2, 3):
        assert (trio[i].role, trio[i].leader_id, trio[i].epoch) == (FOLLOWER, 1, 1)
    assert read_quorum_state(trio[1].state_dir).leader_id == 1  # type: ignore[union-attr]


def test_vote_is_given_once_per_epoch(trio: dict[int, RaftCore]) -> None:
    voter = trio[3]
    assert voter.handle_vote_request(VoteRequest(1, 1, 0, 0), 0).granted
    assert not voter.handle_vote_request(VoteRequest(1, 2, 0, 0), 0).granted
    assert voter.handle_vote_request(VoteRequest(1, 1, 0, 0), 0).granted  # the same candidate
    assert read_quorum_state(voter.state_dir).voted_id == 1  # type: ignore[union-attr]


def test_the_vote_survives_a_restart(tmp_path: Path) -> None:
    voter = make(tmp_path, 3)
    assert voter.handle_vote_request(VoteRequest(4, 1, 0, 0), 0).granted
    voter.log.close()
    again = make(tmp_path, 3)
    assert again.epoch == 4
    assert not again.handle_vote_request(VoteRequest(4, 2, 0, 0), 0).granted


def test_the_vote_is_for_a_replica_id_and_directory(tmp_path: Path) -> None:
    """Kafka votes for a replica key: the same id with another disk is another candidate; a v0
    candidate (no directory id) matches the vote of its id. The key survives a restart."""
    voter = make(tmp_path, 3)
    disk, other = uuid.UUID(int=11), uuid.UUID(int=12)
    assert voter.handle_vote_request(VoteRequest(2, 1, 0, 0, disk), 0).granted
    assert not voter.handle_vote_request(VoteRequest(2, 1, 0, 0, other), 0).granted
    assert voter.handle_vote_request(VoteRequest(2, 1, 0, 0), 0).granted
    stored = read_quorum_state(voter.state_dir)
    assert stored is not None and (stored.voted_id, stored.voted_directory_id) == (1, disk)
    voter.log.close()
    again = make(tmp_path, 3)
    assert not again.handle_vote_request(VoteRequest(2, 1, 0, 0, other), 0).granted
    assert again.handle_vote_request(VoteRequest(2, 1, 0, 0, disk), 0).granted


def test_vote_refused_to_a_candidate_with_a_shorter_or_older_log(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    trio[1].append([topic("a")], 1, 0)
    replicate(trio, 0)
    voter = trio[3]
    assert voter.log.end_offset == 2 and voter.log.last_fetched_epoch == 1
    assert not voter.handle_vote_request(VoteRequest(2, 2, 1, 1), 0).granted  # shorter
    assert not voter.handle_vote_request(VoteRequest(3, 2, 0, 5), 0).granted  # older epoch
    assert voter.handle_vote_request(VoteRequest(4, 2, 1, 2), 0).granted


def test_a_lower_epoch_vote_is_fenced(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    answer = trio[2].handle_vote_request(VoteRequest(0, 3, 5, 5), 0)
    assert (answer.error, answer.epoch, answer.leader_id, answer.granted) == (
        FENCED_LEADER_EPOCH, 1, 1, False)


def test_a_known_leader_means_no_vote_in_that_epoch(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    assert not trio[2].handle_vote_request(VoteRequest(1, 3, 9, 9), 0).granted


def test_candidate_times_out_and_stands_again_in_a_higher_epoch(tmp_path: Path) -> None:
    nodes = {i: make(tmp_path, i) for i in VOTERS}
    lonely = nodes[1]
    lonely.poll(lonely.next_deadline_ms())
    assert lonely.role == CANDIDATE and lonely.epoch == 1
    lonely.take_outbox()  # nobody answers
    lonely.poll(lonely.next_deadline_ms())
    assert lonely.role == CANDIDATE and lonely.epoch == 2


def test_higher_epoch_vote_response_turns_a_candidate_back(trio: dict[int, RaftCore]) -> None:
    c = trio[1]
    c.poll(c.next_deadline_ms())
    c.take_outbox()
    c.handle_vote_response(2, VoteResponse(NONE, 5, None, False), 0)
    assert (c.role, c.epoch, c.voted_id) == (UNATTACHED, 5, None)


def test_high_watermark_waits_for_an_entry_of_the_leaders_epoch(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    leader = trio[1]
    assert leader.high_watermark is None  # only the leader has its LeaderChangeMessage
    leader.append([topic("a")], 1, 0)
    # Follower 2 fetched from 0: nothing of epoch 1 is on a majority yet.
    leader.handle_fetch_request(FetchRequest(1, 2, 0, 0), 0)
    assert leader.high_watermark is None
    leader.handle_fetch_request(FetchRequest(1, 2, 1, 1), 0)
    assert leader.high_watermark == 1
    leader.handle_fetch_request(FetchRequest(1, 3, 2, 1), 0)
    assert leader.high_watermark == 2  # majority of {2, 2, 1}


def test_followers_replicate_and_deliver_commits(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    trio[1].append([topic("a")], 1, 0)
    trio[1].append([topic("b")], 1, 0)
    replicate(trio, 0)
    for n in trio.values():
        assert n.log.end_offset == 3 and n.high_watermark == 3
        assert [name_of(b.records[0]) for b in n.committed_batches()] == ["a", "b"]


def test_old_leader_truncates_its_uncommitted_tail_by_the_diverging_epoch(
        trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    replicate(trio, 0)
    old = trio.pop(1)
    old.append([topic("lost")], 1, 0)  # never replicated
    assert old.log.end_offset == 2
    elect(trio, 2, 0)
    trio[2].append([topic("kept")], 2, 0)
    assert trio[2].epoch == 2
    trio[1] = old
    answer = old.handle_begin_quorum_epoch(BeginQuorumEpochRequest(2, 2), 0)
    assert answer.error == NONE and old.role == FOLLOWER
    replicate(trio, 0, rounds=4)
    assert old.log.end_offset == trio[2].log.end_offset == 3
    names = [name_of(b.records[0]) for b in old.committed_batches()]
    assert names == ["kept"]


def test_leader_answers_fetch_of_a_diverged_log_with_its_epoch_end(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    leader = trio[1]
    answer = leader.handle_fetch_request(FetchRequest(1, 2, 7, 0), 0)
    assert answer.diverging == (0, 0)


def test_fetch_epoch_checks(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    assert trio[1].handle_fetch_request(FetchRequest(0, 2, 0, 0), 0).error == FENCED_LEADER_EPOCH
    assert trio[1].handle_fetch_request(FetchRequest(2, 2, 0, 0), 0).error == 75
    assert trio[2].handle_fetch_request(FetchRequest(1, 3, 0, 0), 0).error == 6


def test_begin_quorum_epoch_of_an_older_epoch_is_fenced(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    assert trio[2].handle_begin_quorum_epoch(BeginQuorumEpochRequest(0, 3), 0) == EpochResponse(
        FENCED_LEADER_EPOCH, 1, 1)


def test_resign_sends_end_quorum_epoch_and_a_successor_elects_at_once(
        trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    trio[1].resign(0)
    deliver(trio, 0)
    # Kafka's followers keep the resigning leader until their shortened fetch timeout ends: at
    # once for the first preferred successor, the strict exponential backoff for the next
    assert [(trio[i].role, trio[i].leader_id) for i in (2, 3)] == [(FOLLOWER, 1), (FOLLOWER, 1)]
    assert trio[2].next_deadline_ms() == 0
    assert trio[3].next_deadline_ms() == trio[3].timeouts.election_backoff_max_ms // 2
    del trio[1]
    trio[2].poll(0)
    deliver(trio, 0)
    assert trio[2].role == LEADER and trio[2].epoch == 2


@pytest.mark.parametrize(("successors", "backoffs"), [
    ([2, 3], {2: 0, 3: 500}),
    ([3, 2], {2: 500, 3: 0}),
    ([3], {2: 1000, 3: 0}),  # a voter the leader does not name waits the longest
])
def test_end_quorum_epoch_shortens_each_followers_fetch_timeout_by_its_place(
        trio: dict[int, RaftCore], successors: list[int], backoffs: dict[int, int]) -> None:
    """Kafka's strictExponentialElectionBackoffMs (election_backoff_max_ms 1000 here): 0 for the
    first successor, max >> (n - 1) << (position - 1) for the others, max when not named."""
    elect(trio, 1, 0)
    for i in (2, 3):
        trio[i].handle_end_quorum_epoch(EndQuorumEpochRequest(1, 1, successors), 10)
        assert trio[i].next_deadline_ms() == 10 + backoffs[i]


def test_end_quorum_epoch_of_a_newer_epoch_makes_its_sender_the_leader_to_follow(
        trio: dict[int, RaftCore]) -> None:
    """A voter that missed the epoch's BeginQuorumEpoch learns the leader from its
    EndQuorumEpoch (Kafka's maybeTransition) before shortening its fetch timeout."""
    node = trio[3]
    assert node.handle_end_quorum_epoch(EndQuorumEpochRequest(4, 1, [3, 2]), 10) == EpochResponse(NONE, 4, 1)
    assert (node.role, node.epoch, node.leader_id, node.next_deadline_ms()) == (FOLLOWER, 4, 1, 10)


def test_follower_stands_for_election_after_the_fetch_timeout(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    follower = trio[2]
    follower.poll(199)
    follower.take_outbox()
    follower._fetch_in_flight = False
    follower.poll(200)
    assert follower.role == CANDIDATE and follower.epoch == 2


def test_append_off_the_leader_is_refused(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    with pytest.raises(NotLeaderError):
        trio[2].append([topic("x")], 1, 0)
    with pytest.raises(NotLeaderError):
        trio[1].append([topic("x")], 0, 0)


def test_observer_finds_the_leader_and_follows(tmp_path: Path) -> None:
    nodes = {i: make(tmp_path, i) for i in VOTERS}
    elect(nodes, 1, 0)
    nodes[1].append([topic("a")], 1, 0)
    observer = make(tmp_path, 9)
    nodes[9] = observer
    replicate(nodes, 0, rounds=4)
    assert observer.leader_id == 1 and observer.log.end_offset == 2
    assert not observer.handle_vote_request(VoteRequest(5, 1, 9, 9), 0).granted


def test_leader_resends_begin_quorum_epoch_to_voters_that_never_fetched(
        trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    leader = trio[1]
    leader.handle_fetch_request(FetchRequest(1, 2, 1, 1), 50)
    leader.poll(100)  # half the fetch timeout
    assert [(o.destination, type(o.request)) for o in leader.take_outbox()] == [
        (3, BeginQuorumEpochRequest)]


def test_leader_without_a_fetching_majority_resigns_and_later_stands_again(
        trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 0)
    leader = trio[1]
    leader.take_outbox()
    leader.handle_fetch_request(FetchRequest(1, 2, 1, 1), 250)
    leader.poll(300)  # node 2 fetched within 1.5 fetch timeouts: a majority
    assert leader.role == LEADER
    leader.take_outbox()
    leader.poll(551)
    assert leader.role == "resigned"
    assert EndQuorumEpochRequest in {type(o.request) for o in leader.take_outbox()}
    leader.poll(leader.next_deadline_ms())
    assert leader.role == CANDIDATE and leader.epoch == 2


def test_fetch_answered_with_an_error_is_retried_after_a_backoff(tmp_path: Path) -> None:
    observer = make(tmp_path, 9)
    observer.poll(0)
    [first] = observer.take_outbox()
    observer.handle_fetch_response(first.destination, FetchResponse(6, 0, None), 10)
    observer.poll(20)
    assert observer.take_outbox() == []
    observer.poll(110)
    assert [type(o.request) for o in observer.take_outbox()] == [FetchRequest]


def test_an_idle_leaders_next_deadline_is_ahead_so_its_loop_sleeps(trio: dict[int, RaftCore]) -> None:
    elect(trio, 1, 1_000)
    replicate(trio, 1_000)
    leader = trio[1]
    assert leader.role == LEADER
    for now in range(1_000, 3_000, 150):  # long after its election deadline, voters fetching
        replicate(trio, now, rounds=1)
        assert leader.role == LEADER
        assert now < leader.next_deadline_ms() <= now + leader.timeouts.fetch_timeout_ms
