"""The raft voter set and its history in the metadata log (KIP-853), as Kafka's ``VoterSet``,
``LogHistory`` and ``KRaftControlRecordStateMachine``.

With ``kraft.version`` 0 the voters are static (``controller.quorum.voters``): ids only, no
directory ids, and the log never changes them. With ``kraft.version`` 1 the voters are whatever
the latest VotersRecord in the log (or in the snapshot the log starts from) says. The invariants:

- a voter set takes effect as soon as its VotersRecord is appended (committed or not), as in
  Kafka; truncating the log past it brings the previous one back;
- a voter is identified by its id *and* its directory id (Kafka's ``ReplicaKey``): the same id
  with another directory is another replica (a disk replaced);
- a history never loses the voter set in force at the log start (the snapshot's), so the voters
  are always known at any offset the log still holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reference_broker.raft.messages import NO_DIRECTORY
from sdk.protocol.messages import KRaftVersionRecord, Message, VotersRecord

__all__ = ["NO_DIRECTORY", "SUPPORTED_KRAFT_VERSIONS", "Endpoint", "Voter", "VoterHistory",
           "VoterSet"]
#: the kraft.version range this node supports (Kafka 4.1: 0..1)
SUPPORTED_KRAFT_VERSIONS = (0, 1)


@dataclass(frozen=True)
class Endpoint:
    """One listener of a voter: the name Kafka's ``controller.listener.names`` gives it."""

    name: str
    host: str
    port: int


@dataclass(frozen=True)
class Voter:
    """One voter: its replica key (id, directory id), endpoints and supported kraft versions."""

    node_id: int
    directory_id: uuid.UUID = NO_DIRECTORY
    endpoints: tuple[Endpoint, ...] = ()
    kraft_versions: tuple[int, int] = (0, 0)

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint of ``listener``, or the first (Kafka's default listener) when None."""
        for e in self.endpoints:
            if listener is None or e.name == listener:
                return e
        return None


@dataclass(frozen=True)
class VoterSet:
    """An immutable voter set; changes return a new set (None when the change is not possible)."""

    voters: Mapping[int, Voter] = field(default_factory=dict)

    @classmethod
    def static(cls, addresses: Mapping[int, tuple[str, int]] | Iterable[int],
               listener: str = "CONTROLLER") -> VoterSet:
        """The voters of ``controller.quorum.voters``: no directory ids, kraft.version 0."""
        if isinstance(addresses, Mapping):
            return cls({n: Voter(n, NO_DIRECTORY, (Endpoint(listener, h, p),))
                        for n, (h, p) in addresses.items()})
        return cls({n: Voter(n) for n in addresses})

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    def is_voter(self, node_id: int, directory_id: uuid.UUID | None = None) -> bool:
        """Whether the replica is a voter; with a directory id, only that very replica (a voter
        of kraft.version 0, without a directory id, matches any)."""
        voter = self.voters.get(node_id)
        if voter is None:
            return False
        return (directory_id is None or voter.directory_id == NO_DIRECTORY
                or voter.directory_id == directory_id)

    def add(self, voter: Voter) -> VoterSet | None:
        """The set with ``voter`` added; None if its id is a voter already."""
        if voter.node_id in self.voters:
            return None
        return VoterSet({**self.voters, voter.node_id: voter})

    def remove(self, node_id: int, directory_id: uuid.UUID) -> VoterSet | None:
        """The set without that replica; None if it is not a voter or the set would be empty."""
        voter = self.voters.get(node_id)
        if voter is None or voter.directory_id != directory_id or len(self.voters) == 1:
            return None
        return VoterSet({n: v for n, v in self.voters.items() if n != node_id})

    def update(self, voter: Voter) -> VoterSet | None:
        """The set with that voter's endpoints and kraft versions replaced; None if it is not a
        voter with that directory id."""
        old = self.voters.get(voter.node_id)
        if old is None or old.directory_id != voter.directory_id:
            return None
        return VoterSet({**self.voters, voter.node_id: voter})

    def update_ignoring_directory(self, voter: Voter) -> VoterSet | None:
        """The set with that voter replaced, directory id included; None if its id is not a
        voter. Kafka's leader keeps static voters (kraft.version 0, no directory ids) this way
        in memory as each one announces itself with UpdateRaftVoter, for a later upgrade."""
        if voter.node_id not in self.voters:
            return None
        return VoterSet({**self.voters, voter.node_id: voter})

    def supports(self, kraft_version: int) -> bool:
        """Whether every voter's supported kraft.version range holds ``kraft_version``."""
        return all(v.kraft_versions[0] <= kraft_version <= v.kraft_versions[1]
                   for v in self.voters.values())

    def to_record(self) -> VotersRecord:
        cls = VotersRecord.Voter
        return VotersRecord(version=0, voters=[
            cls(voter_id=v.node_id, voter_directory_id=v.directory_id,
                endpoints=[cls.Endpoint(name=e.name, host=e.host, port=e.port)
                           for e in v.endpoints],
                k_raft_version_feature=cls.KRaftVersionFeature(
                    min_supported_version=v.kraft_versions[0],
                    max_supported_version=v.kraft_versions[1]))
            for v in sorted(self.voters.values(), key=lambda v: v.node_id)])

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        voters: dict[int, Voter] = {}
        for v in record.voters:
            feature = v.k_raft_version_feature
            voters[v.voter_id] = Voter(
                v.voter_id, v.voter_directory_id,
                tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints),
                (feature.min_supported_version, feature.max_supported_version))
        return cls(voters)


class VoterHistory:
    """The voter sets and kraft versions the log holds, by the offset of their record.

    ``static`` is the voter set of ``controller.quorum.voters`` (empty on a dynamic quorum), in
    force before any VotersRecord; a VotersRecord anywhere replaces it from its offset on.
    """

    def __init__(self, static: VoterSet | None = None) -> None:
        self.static = static or VoterSet()
        self._voters: list[tuple[int, VoterSet]] = []
        self._kraft: list[tuple[int, int]] = []

    def handle_control(self, offset: int, record: Message) -> None:
        """Take in a control record read from the log or a snapshot at ``offset``."""
        if isinstance(record, VotersRecord):
            self._voters.append((offset, VoterSet.from_record(record)))
        elif isinstance(record, KRaftVersionRecord):
            self._kraft.append((offset, record.k_raft_version))

    def truncate_new_entries(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget the records at or after it."""
        self._voters = [(o, s) for o, s in self._voters if o < end_offset]
        self._kraft = [(o, k) for o, k in self._kraft if o < end_offset]

    def clear(self) -> None:
        """A snapshot replaces the log: its records come in again."""
        self._voters = []
        self._kraft = []

    @property
    def offsets(self) -> list[int]:
        """The offsets of the VotersRecords held, oldest first."""
        return [o for o, _ in self._voters]

    @property
    def latest(self) -> VoterSet:
        return self._voters[-1][1] if self._voters else self.static

    @property
    def latest_offset(self) -> int | None:
        """The offset of the latest VotersRecord; None when the static set is in force."""
        return self._voters[-1][0] if self._voters else None

    def at(self, offset: int) -> VoterSet:
        """The voter set in force at ``offset`` (the last record at or before it)."""
        found = self.static
        for o, voters in self._voters:
            if o > offset:
                break
            found = voters
        return found

    @property
    def kraft_version(self) -> int:
        return self._kraft[-1][1] if self._kraft else 0

    def kraft_version_at(self, offset: int) -> int:
        found = 0
        for o, version in self._kraft:
            if o > offset:
                break
            found = version
        return found
