"""The raft state machine without I/O, as Kafka's ``KafkaRaftClient`` and ``QuorumState``.

Roles: unattached (an epoch, no leader known, maybe a vote cast), candidate, leader, follower,
resigned (a leader shutting down) and observer (a node outside ``voters``: it only follows).
Time comes in as ``now_ms``; requests to send accumulate in :attr:`RaftCore.outbox`; answers
to requests come back through ``handle_*_response``. The invariants:

- the epoch never goes back, and a voter votes at most once per epoch (both persisted in the
  ``quorum-state`` file before any answer that depends on them leaves);
- a vote is granted only to a candidate whose log (last epoch, end offset) is at least as
  up to date as the voter's;
- a new leader appends a LeaderChangeMessage in its epoch; the high watermark is the offset a
  majority of voters have reached, and moves only once that covers an entry of the leader's
  own epoch (an older epoch's entries are committed by it, never counted on their own);
- a follower whose log diverges (Fetch's diverging epoch) truncates to the leader's end offset
  of that epoch before fetching again;
- a follower whose fetch position is before the leader's log start is answered with the
  leader's latest snapshot id; it downloads that snapshot (FetchSnapshot, in chunks), restarts
  its log empty at the snapshot's end offset, hands the snapshot to the listeners and fetches on
  from there. Listeners always get the latest snapshot before any batch after it.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from reference_broker.raft.log import ReplicatedLog
from reference_broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    POSITION_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    BeginQuorumEpochRequest,
    CommittedBatch,
    EndQuorumEpochRequest,
    EpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderAndEpoch,
    Outbound,
    UpdateVoterRequest,
    VoteRequest,
    VoteResponse,
)
from reference_broker.raft.quorum_state import ElectionState, read_quorum_state, write_quorum_state
from reference_broker.raft.serde import batch_records
from reference_broker.raft.snapshot import SnapshotDownload, SnapshotError, SnapshotId, SnapshotWriter
from reference_broker.raft.voter_set import (
    NO_DIRECTORY,
    SUPPORTED_KRAFT_VERSIONS,
    Endpoint,
    Voter,
    VoterHistory,
    VoterSet,
)
from sdk.protocol.messages import KRaftVersionRecord, LeaderChangeMessage, Message

UNATTACHED = "unattached"
CANDIDATE = "candidate"
LEADER = "leader"
FOLLOWER = "follower"
RESIGNED = "resigned"
OBSERVER_ROLE_NAMES = (UNATTACHED, FOLLOWER)
#: how long a Fetch answered with an error waits before the next (Kafka's retry backoff)
FETCH_RETRY_BACKOFF_MS = 100


class NotLeaderError(Exception):
    """An append on a node that is not the leader of the epoch asked for."""


@dataclass(frozen=True)
class RaftTimeouts:
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000


@dataclass
class ReplicaState:
    """What the leader knows of one replica's log: the end offset its last Fetch asked from."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    #: the replica's directory id as its last Fetch named it (the zero uuid before kraft.version 1)
    directory_id: uuid.UUID = NO_DIRECTORY
    #: when the replica last reached the leader's log end (Kafka's lastCaughtUpTimestamp)
    caught_up_ms: int = -1
    #: the leader's log end offset when this replica last fetched
    leader_end_at_fetch: int = -1
    #: the high watermark the leader last answered this replica's Fetch with
    sent_high_watermark: int | None = None
    #: whether the last answer told it a high watermark it had not been told (not to be held)
    high_watermark_news: bool = False


@dataclass
class _Leader:
    epoch_start_offset: int
    elected_ms: int
    replicas: dict[int, ReplicaState] = field(default_factory=dict)  # voters and observers
    #: when BeginQuorumEpoch goes again to the voters that have not fetched in this epoch
    begin_resend_ms: int = 0
    #: when check-quorum next looks at the voters' Fetches
    check_quorum_ms: int = 0


class RaftCore:
    """One node's raft state; see the module docstring."""

    def __init__(
        self,
        node_id: int,
        voters: set[int] | VoterSet,
        log: ReplicatedLog,
        state_dir: Path,
        *,
        timeouts: RaftTimeouts | None = None,
        now_ms: int = 0,
        rng: random.Random | None = None,
        directory_id: uuid.UUID = NO_DIRECTORY,
        bootstrap_ids: tuple[int, ...] = (),
        endpoints: tuple[Endpoint, ...] = (),
    ) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        #: this node's controller listeners as it advertises them now (a voter set of an older
        #: run may name other ports: a new leader writes these in, as Kafka's)
        self.endpoints = endpoints
        #: ids the driver maps to ``controller.quorum.bootstrap.servers`` (negative, as Kafka's):
        #: where an observer that knows no voter fetches from
        self.bootstrap_ids = bootstrap_ids
        static = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        #: the voter sets of the log; the static set of ``controller.quorum.voters`` before any
        self.voter_history = VoterHistory(static)
        self.log = log
        self.state_dir = Path(state_dir)
        self.timeouts = timeouts or RaftTimeouts()
        self.rng = rng or random.Random()
        self.outbox: list[Outbound] = []
        self.role = UNATTACHED
        self.epoch = 0
        self.leader_id: int | None = None
        self.voted_id: int | None = None
        #: the voted-for candidate's directory id (Kafka's voted ReplicaKey); zero when unknown
        self.voted_directory_id = NO_DIRECTORY
        self.granted: set[int] = set()
        self._leader: _Leader | None = None
        self._deadline_ms = 0
        self._fetch_in_flight = False
        self._fetch_not_before_ms = 0  # a Fetch answered with an error waits a retry backoff
        self._update_sent_epoch = -1  # the epoch this voter last sent UpdateRaftVoter in
        self._update_not_before_ms = 0
        self._leader_hw_epoch = -1  # the last epoch whose leader's Fetch answer had a high watermark
        self._last_fetch_ms = now_ms
        #: the follower's fetch timeout from _last_fetch_ms (shortened by EndQuorumEpoch)
        self._fetch_timeout_ms = self.timeouts.fetch_timeout_ms
        self.high_watermark: int | None = None
        latest = log.latest_snapshot
        #: the snapshot the listeners must load next (the latest one at start, a downloaded one)
        self.snapshot_to_load: SnapshotId | None = latest
        self._delivered = 0 if latest is None else latest.end_offset  # next offset for listeners
        self._download: SnapshotDownload | None = None  # a snapshot being fetched from the leader
        self.downloaded: SnapshotId | None = None  # the last snapshot that came from the leader
        self._load_voter_history()
        stored = read_quorum_state(self.state_dir)
        if stored is not None:
            self.epoch = stored.epoch
            self.voted_id = stored.voted_id
            self.voted_directory_id = stored.voted_directory_id
            # A leader restarting does not lead again without an election: it resigns into
            # unattached (Kafka's ResignedState then unattached); a follower follows on.
            if stored.leader_id is not None and stored.leader_id != node_id:
                self.leader_id = stored.leader_id
                self.role = FOLLOWER
        self._reset_election_deadline(now_ms)

    # -- the voter set in the log ---------------------------------------------------------------

    def _load_voter_history(self) -> None:
        """Read the voter sets of the latest snapshot and of the whole log (at start and after a
        snapshot replaced the log)."""
        self.voter_history.clear()
        latest = self.log.latest_snapshot
        start = self.log.start_offset
        if latest is not None:
            for record in self.log.read_snapshot(latest).control:
                self.voter_history.handle_control(latest.end_offset - 1, record)
            start = max(start, latest.end_offset)  # the log before it is in the snapshot
        self._scan_control(start, self.log.end_offset)

    def _scan_control(self, start: int, end: int) -> None:
        """Take in the KRaftVersion and Voters records of the log in ``[start, end)``."""
        if start >= end:
            return
        for batch in self.log.batches(start, end):
            if batch.is_control:
                for offset, record in zip(range(batch.base_offset, batch.last_offset + 1),
                                          batch_records(batch), strict=False):
                    self.voter_history.handle_control(offset, record)

    def _truncate(self, offset: int) -> None:
        """Truncate the log to ``offset``; voter sets appended after it no longer hold."""
        self.log.truncate_to(offset)
        self.voter_history.truncate_new_entries(self.log.end_offset)

    @property
    def voters(self) -> frozenset[int]:
        """The ids of the voter set in force: the latest in the log, else the static one."""
        return self.voter_history.latest.ids

    @property
    def voter_set(self) -> VoterSet:
        return self.voter_history.latest

    @property
    def kraft_version(self) -> int:
        return self.voter_history.kraft_version

    def append_voters(self, voters: VoterSet, now_ms: int) -> int:
        """Leader only: append a VotersRecord (in force at once); its offset."""
        if self.role != LEADER:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        start, _ = self.log.append_control(voters.to_record(), self.epoch, now_ms)
        self.voter_history.handle_control(start, voters.to_record())
        for v in voters.ids:
            self._leader_replica(v)
        self._update_high_watermark()
        return start

    # -- views ---------------------------------------------------------------------------------

    @property
    def is_voter(self) -> bool:
        return self.voter_set.is_voter(self.node_id, self.directory_id)

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leader_id, self.epoch)

    def replica_states(self) -> dict[int, ReplicaState]:
        """The leader's view of each replica's log end (its own included); empty elsewhere."""
        if self._leader is None:
            return {}
        self._leader.replicas[self.node_id].end_offset = self.log.end_offset
        return dict(self._leader.replicas)

    def committed_in_epoch(self) -> bool:
        """Leader only: whether an entry of its own epoch is committed (Kafka's leader has a
        high watermark only then; every older voter change is settled by it)."""
        leader = self._leader
        return (leader is not None and self.high_watermark is not None
                and self.high_watermark > leader.epoch_start_offset)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    # -- state changes ------------------------------------------------------------------------

    def _persist(self) -> None:
        write_quorum_state(self.state_dir, ElectionState(self.epoch, self.leader_id, self.voted_id,
                                                         self.voted_directory_id))

    def _reset_election_deadline(self, now_ms: int) -> None:
        base = self.timeouts.election_timeout_ms
        self._deadline_ms = now_ms + base + self.rng.randrange(base + 1)

    def _abandon_download(self) -> None:
        if self._download is not None:
            self._download.abandon()
            self._download = None

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self._abandon_download()
        self.role = UNATTACHED
        self.epoch = epoch
        self.leader_id = None
        self.voted_id, self.voted_directory_id = None, NO_DIRECTORY
        self._leader = None
        self.granted = set()
        self._persist()
        self._reset_election_deadline(now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        same_epoch = epoch == self.epoch
        if not same_epoch or leader_id != self.leader_id:
            self._abandon_download()
        self.role = FOLLOWER
        self.epoch = epoch
        self.leader_id = leader_id
        if not same_epoch:
            self.voted_id, self.voted_directory_id = None, NO_DIRECTORY
        self._leader = None
        self.granted = set()
        self._fetch_in_flight = False
        self._reset_fetch_timer(now_ms)
        self._persist()

    def _become_candidate(self, now_ms: int) -> None:
        self._abandon_download()
        self.role = CANDIDATE
        self.epoch += 1
        self.leader_id = None
        self.voted_id, self.voted_directory_id = self.node_id, self.directory_id
        self.granted = {self.node_id}
        self._leader = None
        self._persist()
        self._reset_election_deadline(now_ms)
        request = VoteRequest(self.epoch, self.node_id, self.log.last_fetched_epoch,
                              self.log.end_offset, self.directory_id)
        self.outbox.extend(Outbound(v, request) for v in sorted(self.voters - {self.node_id}))
        self._maybe_win(now_ms)

    def _maybe_win(self, now_ms: int) -> None:
        if self.role == CANDIDATE and len(self.granted & self.voters) >= self.majority():
            self._become_leader(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self.role = LEADER
        self.leader_id = self.node_id
        self._persist()
        message = LeaderChangeMessage(
            leader_id=self.node_id,
            voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(self.voters)],
            granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(self.granted)],
        )
        start, _ = self.log.append_control(message, self.epoch, now_ms)
        if self.kraft_version >= 1:
            self._append_start_of_epoch_voters(now_ms)
        self._leader = _Leader(start, now_ms, {v: ReplicaState() for v in self.voters},
                               now_ms + self.timeouts.fetch_timeout_ms // 2)
        self._leader_replica(self.node_id).end_offset = self.log.end_offset
        request = BeginQuorumEpochRequest(self.epoch, self.node_id)
        self.outbox.extend(Outbound(v, request) for v in sorted(self.voters - {self.node_id}))
        self._update_high_watermark()

    def _append_start_of_epoch_voters(self, now_ms: int) -> None:
        """Kafka's appendStartOfEpochControlRecords: voters known only from the bootstrap
        checkpoint go into the log (where observers and new voters read them), and so does the
        voter set with this leader's current endpoints when they changed since it was written."""
        voters = self.voter_set
        mine = voters.voters.get(self.node_id)
        if mine is not None and self.endpoints and mine.endpoints != self.endpoints:
            voters = voters.update(Voter(self.node_id, mine.directory_id, self.endpoints,
                                         SUPPORTED_KRAFT_VERSIONS)) or voters
        if self.voter_history.latest_offset != -1 and voters == self.voter_set:
            return
        self._append_kraft_and_voters(self.kraft_version, voters, now_ms)

    def _append_kraft_and_voters(self, kraft_version: int, voters: VoterSet, now_ms: int) -> int:
        """Append a KRaftVersionRecord and a VotersRecord (in force at once); the latter's offset."""
        kraft = KRaftVersionRecord(version=0, k_raft_version=kraft_version)
        start, _ = self.log.append_control(kraft, self.epoch, now_ms)
        self.voter_history.handle_control(start, kraft)
        record = voters.to_record()
        start, _ = self.log.append_control(record, self.epoch, now_ms)
        self.voter_history.handle_control(start, record)
        return start

    def append_kraft_upgrade(self, kraft_version: int, voters: VoterSet, now_ms: int) -> int:
        """Leader only: append the upgrade to ``kraft_version`` with the voter set it starts
        from (Kafka writes both at once); the VotersRecord's offset."""
        if self.role != LEADER:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        offset = self._append_kraft_and_voters(kraft_version, voters, now_ms)
        for v in voters.ids:
            self._leader_replica(v)
        self._update_high_watermark()
        return offset

    def _leader_replica(self, replica_id: int) -> ReplicaState:
        assert self._leader is not None
        return self._leader.replicas.setdefault(replica_id, ReplicaState())

    def resign(self, now_ms: int) -> None:
        """A leader shutting down: tell the other voters to elect at once (EndQuorumEpoch)."""
        if self.role != LEADER:
            return
        self.role = RESIGNED
        self._reset_election_deadline(now_ms)
        successors = sorted(self.voters - {self.node_id})
        request = EndQuorumEpochRequest(self.epoch, self.node_id, successors)
        self.outbox.extend(Outbound(v, request) for v in successors)

    # -- time ----------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> None:
        """Act on expired timers: elections, fetch timeouts, a follower's next Fetch."""
        role = self.role
        if role == LEADER:
            self._poll_leader(now_ms)
            return
        if role in (UNATTACHED, CANDIDATE, RESIGNED) and now_ms >= self._deadline_ms:
            if self.is_voter:
                self._become_candidate(now_ms)
            elif role == RESIGNED:  # a leader that removed itself goes on as an observer
                self._become_unattached(self.epoch, now_ms)
        elif role == FOLLOWER and now_ms - self._last_fetch_ms >= self._fetch_timeout_ms:
            if self.is_voter:
                self._become_candidate(now_ms)
            else:
                self.role = UNATTACHED
                self.leader_id = None
        self._maybe_update_voter(now_ms)
        if now_ms < self._fetch_not_before_ms:
            return
        if self.role == FOLLOWER and not self._fetch_in_flight and self.leader_id is not None:
            self._send_fetch(self.leader_id)
        elif self.role == UNATTACHED and not self.is_voter and not self._fetch_in_flight:
            # An observer without a leader asks a bootstrap server (Kafka's observers do; a voter
            # set of an older run may name old ports), a voter without bootstrap servers
            targets = list(self.bootstrap_ids) or sorted(self.voters - {self.node_id})
            if targets:
                self._send_fetch(self.rng.choice(targets))

    def _maybe_update_voter(self, now_ms: int) -> None:
        """Kafka's voters send UpdateRaftVoter to the leader: at kraft.version 0 once per epoch
        (the leader learns their directory ids and kraft.version ranges, which an upgrade to 1
        needs), at 1 when the voter set names other listeners or kraft.version range than theirs
        (a restart on other ports); again after a backoff if it failed. Only once the leader
        answered a Fetch with its high watermark: before that it refuses every update."""
        if (self.role != FOLLOWER or self.leader_id is None or not self.endpoints
                or self._update_sent_epoch == self.epoch or now_ms < self._update_not_before_ms
                or self._leader_hw_epoch != self.epoch):
            return
        mine = self.voter_set.voters.get(self.node_id)
        if mine is None:
            return
        if self.kraft_version >= 1 and (
                mine.directory_id != self.directory_id
                or (mine.endpoints == self.endpoints and mine.kraft_versions == SUPPORTED_KRAFT_VERSIONS)):
            return
        self._update_sent_epoch = self.epoch
        self.outbox.append(Outbound(self.leader_id, UpdateVoterRequest(
            self.epoch, self.node_id, self.directory_id,
            tuple((e.name, e.host, e.port) for e in self.endpoints), SUPPORTED_KRAFT_VERSIONS)))

    def handle_update_voter_response(self, error: int, now_ms: int) -> None:
        """The leader's answer to UpdateRaftVoter: on an error, try again after a backoff, a
        short one for REQUEST_TIMED_OUT (the leader is still settling its epoch: its high
        watermark, or the previous voter change, commits within a fetch round or two)."""
        if error != NONE:
            self._update_sent_epoch = -1
            backoff = (FETCH_RETRY_BACKOFF_MS if error == REQUEST_TIMED_OUT
                       else self.timeouts.fetch_timeout_ms // 2)
            self._update_not_before_ms = now_ms + backoff

    def _send_fetch(self, destination: int) -> None:
        self._fetch_in_flight = True
        download = self._download
        if download is not None:
            snapshot_id = download.snapshot_id
            self.outbox.append(Outbound(destination, FetchSnapshotRequest(
                self.epoch, self.node_id, (snapshot_id.end_offset, snapshot_id.epoch),
                download.size)))
            return
        self.outbox.append(Outbound(destination, FetchRequest(
            self.epoch, self.node_id, self.log.end_offset, self.log.last_fetched_epoch,
            self.directory_id)))

    def _poll_leader(self, now_ms: int) -> None:
        """Kafka's leader timers: BeginQuorumEpoch again to voters not fetching in this epoch,
        and check-quorum: a leader without Fetches from a majority within 1.5 fetch timeouts
        resigns (a partitioned leader must not keep answering as leader)."""
        leader = self._leader
        assert leader is not None
        others = sorted(self.voters - {self.node_id})
        if now_ms >= leader.begin_resend_ms:
            leader.begin_resend_ms = now_ms + self.timeouts.fetch_timeout_ms // 2
            request = BeginQuorumEpochRequest(self.epoch, self.node_id)
            self.outbox.extend(Outbound(v, request) for v in others
                               if self._leader_replica(v).last_fetch_ms < 0)
        window = self.timeouts.fetch_timeout_ms * 3 // 2
        # A voter's Fetch older than ``window`` is noticed at most a quarter window late.
        leader.check_quorum_ms = now_ms + max(1, window // 4)
        if now_ms - leader.elected_ms < window:
            return
        heard = int(self.is_voter) + sum(
            1 for v in others if self._leader_replica(v).last_fetch_ms >= now_ms - window)
        if heard < self.majority():
            self.resign(now_ms)

    def fetch_failed(self) -> None:
        """The Fetch in flight got no answer: the next poll sends another."""
        self._fetch_in_flight = False

    def next_deadline_ms(self) -> int:
        """When :meth:`poll` next has something to do (the driver sleeps until then)."""
        if self.role == FOLLOWER:
            return self._last_fetch_ms + self._fetch_timeout_ms
        if self.role == LEADER and self._leader is not None:
            # Not the election deadline, long past for a leader: its loop would never sleep.
            return min(self._leader.begin_resend_ms, self._leader.check_quorum_ms)
        return self._deadline_ms

    # -- epochs of incoming messages ------------------------------------------------------------

    def _observe_epoch(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        """A message from a higher epoch (or naming the current epoch's leader) moves us on."""
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._become_follower(epoch, leader_id, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
        elif (epoch == self.epoch and leader_id is not None and leader_id != self.node_id
              and self.role in (UNATTACHED, CANDIDATE)):
            self._become_follower(epoch, leader_id, now_ms)

    # -- Vote ----------------------------------------------------------------------------------

    def handle_vote_request(self, request: VoteRequest, now_ms: int) -> VoteResponse:
        if request.epoch < self.epoch:
            return VoteResponse(FENCED_LEADER_EPOCH, self.epoch, self.leader_id, False)
        if request.epoch > self.epoch:
            self._become_unattached(request.epoch, now_ms)
        granted = self._may_grant(request)
        if granted and self.voted_id is None:
            self.voted_id, self.voted_directory_id = request.candidate_id, request.candidate_directory_id
            self._persist()
            self._reset_election_deadline(now_ms)
        return VoteResponse(NONE, self.epoch, self.leader_id, granted)

    def _may_grant(self, request: VoteRequest) -> bool:
        if not self.is_voter or request.candidate_id not in self.voters:
            return False
        if self.role in (LEADER, RESIGNED, FOLLOWER) or self.leader_id is not None:
            return False  # a leader is known in this epoch
        other_directory = (self.voted_directory_id != NO_DIRECTORY
                           and request.candidate_directory_id not in (NO_DIRECTORY, self.voted_directory_id))
        if self.voted_id is not None and (self.voted_id != request.candidate_id or other_directory):
            return False  # voted in this epoch for another replica (Kafka compares replica keys)
        mine = (self.log.last_fetched_epoch, self.log.end_offset)
        return (request.last_epoch, request.last_offset) >= mine

    def handle_vote_response(self, source: int, response: VoteResponse, now_ms: int) -> None:
        if response.error == NONE and response.epoch == self.epoch and self.role == CANDIDATE:
            if response.granted:
                self.granted.add(source)
                self._maybe_win(now_ms)
            return
        self._observe_epoch(response.epoch, response.leader_id, now_ms)

    # -- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------

    def handle_begin_quorum_epoch(self, request: BeginQuorumEpochRequest,
                                  now_ms: int) -> EpochResponse:
        if request.epoch < self.epoch:
            return EpochResponse(FENCED_LEADER_EPOCH, self.epoch, self.leader_id)
        if request.epoch == self.epoch and self.role in (LEADER, RESIGNED):
            return EpochResponse(FENCED_LEADER_EPOCH, self.epoch, self.leader_id)
        if (request.epoch > self.epoch or self.role != FOLLOWER
                or self.leader_id != request.leader_id):
            self._become_follower(request.epoch, request.leader_id, now_ms)
        return EpochResponse(NONE, self.epoch, self.leader_id)

    def handle_end_quorum_epoch(self, request: EndQuorumEpochRequest,
                                now_ms: int) -> EpochResponse:
        if request.epoch < self.epoch:
            return EpochResponse(FENCED_LEADER_EPOCH, self.epoch, self.leader_id)
        self._observe_epoch(request.epoch, request.leader_id, now_ms)
        if self.role == FOLLOWER and self.leader_id == request.leader_id:
            # The leader is going away: the follower keeps it as leader (and goes on fetching)
            # but stands for election once a shortened fetch timeout ends, the first preferred
            # successor at once, the others later the further down the list (Kafka's
            # endEpochElectionBackoff); a successful fetch meanwhile restores the full timeout.
            self._reset_fetch_timer(now_ms, self._end_epoch_backoff_ms(request.preferred_successors))
        return EpochResponse(NONE, self.epoch, self.leader_id)

    def _end_epoch_backoff_ms(self, successors: list[int]) -> int:
        """Kafka's strictExponentialElectionBackoffMs for this node's place in ``successors``."""
        backoff_max = self.timeouts.election_backoff_max_ms
        if self.node_id not in successors:
            return backoff_max
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        return min(backoff_max, (backoff_max >> (len(successors) - 1)) << (position - 1))

    def _reset_fetch_timer(self, now_ms: int, timeout_ms: int | None = None) -> None:
        self._last_fetch_ms = now_ms
        self._fetch_timeout_ms = self.timeouts.fetch_timeout_ms if timeout_ms is None else timeout_ms

    def handle_epoch_response(self, response: EpochResponse, now_ms: int) -> None:
        if response.error != NONE:
            self._observe_epoch(response.epoch, response.leader_id, now_ms)

    # -- Fetch ---------------------------------------------------------------------------------

    def _fetch_leader(self, epoch: int) -> _Leader | int:
        """The leader state serving a Fetch or FetchSnapshot in ``epoch``, or the error code: only
        the leader of this very epoch serves them (a newer epoch is not known yet, an older one
        is fenced)."""
        if epoch > self.epoch:
            return UNKNOWN_LEADER_EPOCH
        if epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if self.role != LEADER or self._leader is None:
            return NOT_LEADER_OR_FOLLOWER
        return self._leader

    def handle_fetch_request(self, request: FetchRequest, now_ms: int,
                             max_bytes: int = 1 << 20) -> FetchResponse:
        leader = self._fetch_leader(request.epoch)
        if isinstance(leader, int):
            return FetchResponse(leader, self.epoch, self.leader_id)
        hw = self.high_watermark if self.high_watermark is not None else 0
        replica = leader.replicas.setdefault(request.replica_id, ReplicaState())
        previous_fetch_ms, replica.last_fetch_ms = replica.last_fetch_ms, now_ms  # check-quorum
        kind, offset, epoch = self.log.validate_offset_and_epoch(request.fetch_offset,
                                                                 request.last_fetched_epoch)
        if kind == "snapshot":
            return FetchResponse(NONE, self.epoch, self.node_id, hw, snapshot_id=(offset, epoch))
        if kind == "diverging":
            return FetchResponse(NONE, self.epoch, self.node_id, hw, diverging=(epoch, offset))
        if request.fetch_offset > self.log.end_offset or request.fetch_offset < 0:
            return FetchResponse(NONE, self.epoch, self.node_id, hw,
                                 diverging=(self.log.last_fetched_epoch, self.log.end_offset))
        replica.end_offset = request.fetch_offset
        replica.directory_id = request.replica_directory_id
        # Kafka's ReplicaState: caught up when it reached the log end, or the end it had when
        # this replica last fetched (then it was caught up at that fetch)
        if request.fetch_offset >= self.log.end_offset:
            replica.caught_up_ms = now_ms
        elif 0 <= replica.leader_end_at_fetch <= request.fetch_offset:
            replica.caught_up_ms = previous_fetch_ms
        replica.leader_end_at_fetch = self.log.end_offset
        self._update_high_watermark()
        hw = self.high_watermark if self.high_watermark is not None else 0
        replica.high_watermark_news = replica.sent_high_watermark != hw
        replica.sent_high_watermark = hw
        return FetchResponse(NONE, self.epoch, self.node_id, hw,
                             self.log.read(request.fetch_offset, max_bytes))

    def high_watermark_news(self, replica_id: int) -> bool:
        """Whether the last Fetch answer to ``replica_id`` carried a high watermark it had not
        been told: such an answer goes at once (Kafka replies immediately when the high watermark
        moved), an empty one without news is held."""
        leader = self._leader
        replica = None if leader is None else leader.replicas.get(replica_id)
        return replica is not None and replica.high_watermark_news

    def _update_high_watermark(self) -> None:
        leader = self._leader
        if leader is None:
            return
        self._leader_replica(self.node_id).end_offset = self.log.end_offset
        offsets = sorted((leader.replicas[v].end_offset for v in self.voters
                          if v in leader.replicas), reverse=True)
        if len(offsets) < self.majority():
            return
        candidate = offsets[self.majority() - 1]
        if candidate <= leader.epoch_start_offset:
            return  # no entry of this epoch is on a majority yet
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            self.log.set_high_watermark(candidate)

    def handle_fetch_response(self, source: int, response: FetchResponse, now_ms: int) -> None:
        self._fetch_in_flight = False
        if response.error != NONE:
            before = self.leader_and_epoch
            if response.error != NOT_LEADER_OR_FOLLOWER or response.leader_id is not None:
                self._observe_epoch(response.epoch, response.leader_id, now_ms)
            if self.leader_and_epoch == before:  # nothing learnt: do not ask again at once
                self._fetch_not_before_ms = now_ms + FETCH_RETRY_BACKOFF_MS
            return
        if response.epoch != self.epoch or response.leader_id != self.leader_id:
            self._observe_epoch(response.epoch, response.leader_id, now_ms)
            if response.epoch != self.epoch or self.leader_id != response.leader_id:
                return
        self._reset_fetch_timer(now_ms)
        if response.snapshot_id is not None:
            self._start_download(SnapshotId(*response.snapshot_id))
            return
        if response.diverging is not None:
            _, end_offset = response.diverging
            self._truncate(min(end_offset, self.log.end_offset))
            self._delivered = min(self._delivered, self.log.end_offset)
            return
        appended_from = self.log.end_offset
        self.log.append_fetched(response.records, now_ms)
        self._scan_control(appended_from, self.log.end_offset)
        if response.high_watermark >= 0:
            self._leader_hw_epoch = self.epoch
        hw = min(response.high_watermark, self.log.end_offset)
        if hw >= 0 and (self.high_watermark is None or hw > self.high_watermark):
            self.high_watermark = hw
            self.log.set_high_watermark(hw)

    # -- FetchSnapshot ---------------------------------------------------------------------------

    def _start_download(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
            return
        if snapshot_id in self.log.snapshots:  # already here: only the log lags behind it
            self._install_snapshot(snapshot_id)
            return
        self._abandon_download()
        self._download = SnapshotDownload(self.log.directory, snapshot_id)

    def _install_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.downloaded = snapshot_id
        self.log.restart_at_snapshot(snapshot_id)
        self._load_voter_history()
        self._delivered = snapshot_id.end_offset
        self.snapshot_to_load = snapshot_id
        if self.high_watermark is None or self.high_watermark < snapshot_id.end_offset:
            self.high_watermark = snapshot_id.end_offset

    def handle_fetch_snapshot_request(self, request: FetchSnapshotRequest, now_ms: int,
                                      max_bytes: int = 1 << 20) -> FetchSnapshotResponse:
        leader = self._fetch_leader(request.epoch)
        if isinstance(leader, int):
            return FetchSnapshotResponse(leader, self.epoch, self.leader_id)
        chunk = self.log.snapshot_chunk(SnapshotId(*request.snapshot_id), request.position,
                                        max_bytes)
        if chunk is None:
            return FetchSnapshotResponse(SNAPSHOT_NOT_FOUND, self.epoch, self.node_id)
        size, data = chunk
        if request.position < 0 or request.position >= size:
            return FetchSnapshotResponse(POSITION_OUT_OF_RANGE, self.epoch, self.node_id)
        replica = leader.replicas.setdefault(request.replica_id, ReplicaState())
        replica.last_fetch_ms = now_ms
        return FetchSnapshotResponse(NONE, self.epoch, self.node_id, request.snapshot_id, size,
                                     request.position, data)

    def handle_fetch_snapshot_response(self, source: int, response: FetchSnapshotResponse,
                                       now_ms: int) -> None:
        self._fetch_in_flight = False
        if response.error not in (NONE, SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE):
            before = self.leader_and_epoch
            if response.error != NOT_LEADER_OR_FOLLOWER or response.leader_id is not None:
                self._observe_epoch(response.epoch, response.leader_id, now_ms)
            if self.leader_and_epoch == before:
                self._fetch_not_before_ms = now_ms + FETCH_RETRY_BACKOFF_MS
            return
        if response.epoch != self.epoch or response.leader_id != self.leader_id:
            self._observe_epoch(response.epoch, response.leader_id, now_ms)
            if response.epoch != self.epoch or self.leader_id != response.leader_id:
                return
        self._reset_fetch_timer(now_ms)
        download = self._download
        if download is None:
            return
        expected = (download.snapshot_id.end_offset, download.snapshot_id.epoch)
        if (response.error != NONE or tuple(response.snapshot_id) != expected
                or response.position != download.size):
            # The leader dropped the snapshot (or the answer does not continue ours): Fetch again,
            # which names the snapshot to download now.
            self._abandon_download()
            return
        download.append(response.position, response.data)
        if download.size < response.size:
            return
        self._download = None
        try:
            download.freeze()
        except SnapshotError:  # not a whole snapshot: drop it; the next Fetch starts over
            download.abandon()
            return
        self.log.snapshot_added(download.snapshot_id)
        self._install_snapshot(download.snapshot_id)

    def take_snapshot_to_load(self) -> SnapshotId | None:
        """The snapshot the listeners must load before any further batch (once)."""
        snapshot_id, self.snapshot_to_load = self.snapshot_to_load, None
        return snapshot_id

    def create_snapshot(self, last_contained_offset: int, epoch: int,
                        last_contained_log_timestamp: int) -> SnapshotWriter | None:
        """A writer for the snapshot of offsets up to ``last_contained_offset`` (of ``epoch``);
        None when that snapshot or a newer one exists. ValueError for an offset above the high
        watermark or an epoch the log does not have there."""
        end = last_contained_offset + 1
        if self.high_watermark is None or end > self.high_watermark:
            raise ValueError(f"cannot snapshot up to offset {last_contained_offset}: the high"
                             f" watermark is {self.high_watermark}")
        snapshot_id = SnapshotId(end, epoch)
        latest = self.log.latest_snapshot
        if latest is not None and snapshot_id <= latest:
            return None
        kind, _, _ = self.log.validate_offset_and_epoch(end, epoch)
        if kind != "valid":
            raise ValueError(f"cannot snapshot up to offset {last_contained_offset} in epoch"
                             f" {epoch}: the log has another epoch there ({kind})")
        writer = self.log.snapshot_writer(snapshot_id, last_contained_log_timestamp)
        kraft_version = self.voter_history.kraft_version_at(last_contained_offset)
        if kraft_version > 0:  # Kafka's snapshots of kraft.version 1 carry the voter set
            writer.control = [KRaftVersionRecord(version=0, k_raft_version=kraft_version),
                              self.voter_history.at(last_contained_offset).to_record()]
        return writer

    # -- appends and commits --------------------------------------------------------------------

    def append(self, records: list[Message], epoch: int, now_ms: int) -> int:
        """Leader only: append ``records`` in ``epoch``; the last offset."""
        if self.role != LEADER or epoch != self.epoch:
            raise NotLeaderError(f"node {self.node_id} is not the leader of epoch {epoch}"
                                 f" (epoch {self.epoch}, role {self.role})")
        _, last = self.log.append_records(records, epoch, now_ms)
        self._update_high_watermark()
        return last

    def committed_batches(self) -> list[CommittedBatch]:
        """Data batches newly below the high watermark, in order, each returned once."""
        hw = self.high_watermark
        if hw is None or hw <= self._delivered:
            return []
        out = []
        for batch in self.log.batches(self._delivered, hw):
            if batch.last_offset >= hw:
                break
            if not batch.is_control:
                out.append(CommittedBatch(batch.base_offset, batch.last_offset,
                                          batch.partition_leader_epoch, batch_records(batch),
                                          batch.size_in_bytes, batch.max_timestamp))
            self._delivered = batch.last_offset + 1
        return out

    def take_outbox(self) -> list[Outbound]:
        out, self.outbox = self.outbox, []
        return out

    @property
    def caught_up(self) -> bool:
        """Every entry below a known high watermark has been handed to the listeners (Kafka's
        MetadataLoader having loaded up to the high watermark): False until this node has heard
        the high watermark of its epoch."""
        hw = self.high_watermark
        return hw is not None and self._delivered >= hw
