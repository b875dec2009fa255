"""The leader's voter changes (KIP-853): AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter, as
Kafka's ``AddVoterHandler``, ``RemoveVoterHandler`` and ``UpdateVoterHandler``, without I/O.

The invariants, as Kafka's:

- one change at a time: a change is pending from its request until its VotersRecord commits,
  the deadline passes or the leadership ends; another add or remove meanwhile is answered
  REQUEST_TIMED_OUT;
- a change needs the leader to have committed an entry of its own epoch (so every older voter
  change is settled) and no uncommitted VotersRecord in the log; else REQUEST_TIMED_OUT;
- the new voter set is in force as soon as its VotersRecord is appended; the answer waits for it
  to commit (the high watermark passes it), counted by the new set;
- a leader that removed itself resigns once that removal commits.

At kraft.version 0 the voters are static and the log holds no voter set: the leader keeps one
in memory (Kafka's volatile voters), the static voters with what each announced by
UpdateRaftVoter (directory id, listeners, kraft.version range), for this epoch only.
:meth:`VoterChanges.upgrade_kraft_version` appends kraft.version 1 with that set once every voter
supports it and has a directory id.

An add is two steps because Kafka's leader asks the new voter's ApiVersions for its supported
kraft.version range first: :meth:`VoterChanges.begin_add` checks what it can before that call,
:meth:`VoterChanges.finish_add` the rest after it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from reference_broker.log.log_manager import topic_id_to_string
from reference_broker.raft.core import LEADER, NotLeaderError, RaftCore
from reference_broker.raft.messages import (
    DUPLICATE_VOTER,
    INVALID_REQUEST,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    UNSUPPORTED_VERSION,
    VOTER_NOT_FOUND,
)
from reference_broker.raft.voter_set import NO_DIRECTORY, SUPPORTED_KRAFT_VERSIONS, Voter, VoterSet

#: Kafka's LeaderState.isReplicaCaughtUp: an observer that reached the leader's log end and has
#: fetched within the last hour is caught up enough to be added
CAUGHT_UP_FETCH_MS = 3_600_000


def replica_key(node_id: int, directory_id: uuid.UUID) -> str:
    """A replica key as Kafka's ``ReplicaKey.toString`` writes it in its error messages."""
    directory = "<undefined>" if directory_id == NO_DIRECTORY else topic_id_to_string(directory_id)
    return f"ReplicaKey(id={node_id}, directoryId={directory})"


def voter_keys(voters: VoterSet) -> str:
    """The voters' replica keys, as Kafka prints ``VoterSet.voterKeys()``."""
    keys = sorted(voters.voters.values(), key=lambda v: v.node_id)
    return "[" + ", ".join(replica_key(v.node_id, v.directory_id) for v in keys) + "]"


@dataclass(frozen=True)
class Answer:
    """An error code and message for the client (``NONE`` with no message on success)."""

    error: int
    message: str | None = None


@dataclass
class PendingChange:
    """The change in flight: its VotersRecord's offset once appended, and its outcome once
    known (``answer`` stays None until then)."""

    kind: str  # "add" or "remove"
    voter_id: int
    directory_id: uuid.UUID
    epoch: int
    deadline_ms: int
    last_offset: int | None = None
    answer: Answer | None = None


class KRaftUpgradeError(Exception):
    """An upgrade of kraft.version refused with INVALID_UPDATE_VERSION and this message (Kafka's
    InvalidUpdateVersionException from the raft layer)."""


class KRaftUpgradeStateError(Exception):
    """An upgrade of kraft.version the leader cannot make in its state (Kafka throws an
    IllegalStateException: its controller fails the request with UNKNOWN_SERVER_ERROR)."""


def _kraft_name(version: int) -> str:
    return f"KRAFT_VERSION_{version}"  # Kafka's KRaftVersion enum names, as its messages print them


class VoterChanges:
    """The leader's one pending voter change over a :class:`RaftCore`; see the module doc."""

    def __init__(self, core: RaftCore, request_timeout_ms: int | None = None) -> None:
        self.core = core
        self.request_timeout_ms = (request_timeout_ms if request_timeout_ms is not None
                                   else core.timeouts.request_timeout_ms)
        self.pending: PendingChange | None = None
        self._volatile: tuple[int, VoterSet] | None = None  # (epoch, voters) at kraft.version 0

    def volatile_voters(self) -> VoterSet:
        """The leader's in-memory voter set of this epoch at kraft.version 0: the static voters,
        this leader with its own directory id, listeners and range."""
        core = self.core
        if self._volatile is None or self._volatile[0] != core.epoch:
            voters = core.voter_set
            own = voters.voters.get(core.node_id)
            if own is not None:
                voters = voters.update_ignoring_directory(Voter(
                    core.node_id, core.directory_id, core.endpoints or own.endpoints,
                    SUPPORTED_KRAFT_VERSIONS)) or voters
            self._volatile = (core.epoch, voters)
        return self._volatile[1]

    # -- kraft.version ----------------------------------------------------------------------------

    def upgrade_kraft_version(self, epoch: int, version: int, validate_only: bool, now_ms: int) -> bool:
        """Kafka's LeaderState.maybeAppendUpgradedKRaftVersion: append kraft.version ``version``
        with the in-memory voter set (True), or change nothing when already there (False).
        Raises NotLeaderError for another epoch, KRaftUpgradeError / KRaftUpgradeStateError."""
        core = self.core
        if core.role != LEADER or core.epoch != epoch:
            raise NotLeaderError(f"Upgrade kraft version failed because the given epoch {epoch} is"
                                 f" stale. Current leader epoch is {core.epoch}")
        current = core.kraft_version
        if version == current:
            return False
        if version < current:
            raise KRaftUpgradeError(f"Invalid upgrade of kraft.version from version"
                                    f" {_kraft_name(current)} to {_kraft_name(version)} because the"
                                    " new version is a downgrade")
        voters = self.volatile_voters()
        if not voters.supports(version):
            raise KRaftUpgradeError(f"Invalid upgrade of kraft.version to {_kraft_name(version)}"
                                    " because not all of the voters support it")
        if any(v.directory_id == NO_DIRECTORY for v in voters.voters.values()):
            raise KRaftUpgradeStateError("Directory id must be known for all of the voters:"
                                         f" {voter_keys(voters)}")
        if validate_only:
            return False
        core.append_kraft_upgrade(version, voters, now_ms)
        self._volatile = None
        return True

    # -- the checks every change makes --------------------------------------------------------

    def _settled(self, now_ms: int, kind: str) -> Answer | None:
        """The error for a change that cannot start now, or None."""
        core = self.core
        if core.role != LEADER:
            return Answer(NOT_LEADER_OR_FOLLOWER, f"node {core.node_id} is not the leader")
        self.poll(now_ms)
        if self.pending is not None:
            return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for leader to handle"
                          " previous add or remove voter request")
        hw = core.high_watermark
        if hw is None or not core.committed_in_epoch():
            return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for leader to establish"
                          " HWM and fence previous voter changes")
        if core.kraft_version < 1:
            return Answer(UNSUPPORTED_VERSION, f"Cluster doesn't support {kind} voter because the"
                          f" kraft.version feature is {core.kraft_version}")
        offset = core.voter_history.latest_offset
        if offset is None or offset >= hw:
            return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for voters to commit the"
                          f" latest voter change at {offset} with HWM {hw}")
        return None

    # -- AddRaftVoter ---------------------------------------------------------------------------

    def begin_add(self, voter_id: int, directory_id: uuid.UUID, now_ms: int) -> Answer | None:
        """The checks before the new voter's ApiVersions: an error, or None to go on (the
        change is then pending until :meth:`finish_add` or its deadline)."""
        refused = self._settled(now_ms, "adding")
        if refused is not None:
            return refused
        voters = self.core.voter_set
        if voter_id in voters.ids:
            return Answer(DUPLICATE_VOTER, f"The voter id for {replica_key(voter_id, directory_id)}"
                          f" is already part of the set of voters {voter_keys(voters)}.")
        self.pending = PendingChange("add", voter_id, directory_id, self.core.epoch,
                                     now_ms + self.request_timeout_ms)
        return None

    def finish_add(self, voter: Voter, api_versions_error: int, now_ms: int) -> None:
        """The new voter answered ApiVersions (``voter.kraft_versions`` its supported range):
        check its kraft.version support and that it is caught up, then append the new voter
        set; the outcome comes in ``pending.answer`` (at once on an error, or at commit)."""
        pending = self.pending
        core = self.core
        if pending is None or pending.kind != "add" or pending.voter_id != voter.node_id:
            return
        if core.role != LEADER or core.epoch != pending.epoch:
            self._done(Answer(NOT_LEADER_OR_FOLLOWER, "the leader changed"))
            return
        if api_versions_error != NONE:
            self._done(Answer(REQUEST_TIMED_OUT, "Aborted add voter operation for since"
                              f" API_VERSIONS returned an error {api_versions_error}"))
            return
        low, high = voter.kraft_versions
        if not low <= core.kraft_version <= high:
            self._done(Answer(INVALID_REQUEST, f"Aborted add voter operation for {voter.node_id}"
                              f" since the kraft.version range (min: {low}, max: {high}) doesn't"
                              f" support the finalized version {core.kraft_version}"))
            return
        replica = core.replica_states().get(voter.node_id)
        caught_up = (replica is not None and replica.directory_id == voter.directory_id
                     and replica.caught_up_ms > 0 and replica.last_fetch_ms > 0
                     and replica.last_fetch_ms > now_ms - CAUGHT_UP_FETCH_MS)
        if not caught_up:
            self._done(Answer(REQUEST_TIMED_OUT, "Aborted add voter operation for"
                              f" {replica_key(voter.node_id, voter.directory_id)} since it is"
                              " lagging behind"))
            return
        added = core.voter_set.add(voter)
        assert added is not None, "checked by begin_add, one change at a time"
        pending.last_offset = core.append_voters(added, now_ms)

    # -- RemoveRaftVoter ------------------------------------------------------------------------

    def remove(self, voter_id: int, directory_id: uuid.UUID, now_ms: int) -> Answer | None:
        """Append the voter set without that replica: an error, or None (pending until it
        commits)."""
        refused = self._settled(now_ms, "removing")
        if refused is not None:
            return refused
        voters = self.core.voter_set
        removed = voters.remove(voter_id, directory_id)
        if removed is None:
            return Answer(VOTER_NOT_FOUND, f"Cannot remove voter"
                          f" {replica_key(voter_id, directory_id)} from the set of voters"
                          f" {voter_keys(voters)}")
        self.pending = PendingChange("remove", voter_id, directory_id, self.core.epoch,
                                     now_ms + self.request_timeout_ms)
        self.pending.last_offset = self.core.append_voters(removed, now_ms)
        return None

    # -- UpdateRaftVoter ------------------------------------------------------------------------

    def update(self, voter: Voter, now_ms: int) -> Answer:
        """A voter announcing its endpoints and supported kraft versions: the new voter set is
        appended and the answer does not wait for its commit (Kafka's UpdateVoterHandler)."""
        core = self.core
        if core.role != LEADER:
            return Answer(NOT_LEADER_OR_FOLLOWER, f"node {core.node_id} is not the leader")
        hw = core.high_watermark
        if hw is None or not core.committed_in_epoch():
            return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for leader to establish"
                          " HWM and fence previous voter changes")
        offset = core.voter_history.latest_offset
        if core.kraft_version >= 1 and (offset is None or offset >= hw):
            return Answer(REQUEST_TIMED_OUT, "Request timed out waiting for voters to commit the"
                          f" latest voter change at {offset} with HWM {hw}")
        low, high = voter.kraft_versions
        if not low <= core.kraft_version <= high:
            return Answer(INVALID_REQUEST, f"Voter supported kraft.version ({low}, {high}) does"
                          f" not include the finalized version {core.kraft_version}")
        if not voter.endpoints:
            return Answer(INVALID_REQUEST, "Voter's listeners are empty")
        if core.kraft_version < 1:  # static voters: the leader's in-memory set takes it in
            volatile = self.volatile_voters().update_ignoring_directory(voter)
            if volatile is None:
                return Answer(VOTER_NOT_FOUND, f"Voter {replica_key(voter.node_id, voter.directory_id)}"
                              f" is not part of the set of voters {voter_keys(core.voter_set)}")
            self._volatile = (core.epoch, volatile)
            return Answer(NONE)
        updated = core.voter_set.update(voter)
        if updated is None:
            return Answer(VOTER_NOT_FOUND, f"Voter {replica_key(voter.node_id, voter.directory_id)}"
                          f" is not part of the set of voters {voter_keys(core.voter_set)}")
        if updated != core.voter_set:
            core.append_voters(updated, now_ms)
        return Answer(NONE)

    # -- time and commits -----------------------------------------------------------------------

    def poll(self, now_ms: int) -> PendingChange | None:
        """Settle the pending change: done when its VotersRecord committed, aborted when the
        leadership ended or its deadline passed. Returns the change settled now, if any. A
        leader whose own removal committed resigns here."""
        pending = self.pending
        core = self.core
        if pending is None:
            return None
        if core.role != LEADER or core.epoch != pending.epoch:
            return self._done(Answer(NOT_LEADER_OR_FOLLOWER, "the leader changed"))
        hw = core.high_watermark
        if pending.last_offset is not None and hw is not None and hw > pending.last_offset:
            settled = self._done(Answer(NONE))
            if not core.is_voter:
                core.resign(now_ms)  # Kafka: not in the committed voter set, resign
            return settled
        if now_ms >= pending.deadline_ms:
            return self._done(Answer(REQUEST_TIMED_OUT, None))
        return None

    def _done(self, answer: Answer) -> PendingChange | None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.answer = answer
        return pending

