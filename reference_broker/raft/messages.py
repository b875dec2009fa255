"""The raft core's requests and answers, without wire framing (the driver maps them to Kafka's
Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch messages), and what listeners receive."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sdk.protocol.messages import Message

NONE = 0
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
NOT_LEADER_OR_FOLLOWER = 6
INCONSISTENT_VOTER_SET = 94
REQUEST_TIMED_OUT = 7
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
DUPLICATE_VOTER = 126
VOTER_NOT_FOUND = 127
INVALID_VOTER_KEY = 125
SNAPSHOT_NOT_FOUND = 98
POSITION_OUT_OF_RANGE = 99
#: the zero uuid: a replica without a directory id
NO_DIRECTORY = uuid.UUID(int=0)


@dataclass(frozen=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class CommittedBatch:
    """One committed batch of data records (control batches are not delivered)."""

    base_offset: int
    last_offset: int
    epoch: int
    records: list[Message]
    #: the batch's size in the log (what snapshot triggers count)
    size_in_bytes: int = 0
    #: the batch's largest record timestamp (a snapshot's last contained log timestamp)
    append_timestamp_ms: int = -1


@dataclass(frozen=True)
class VoteRequest:
    epoch: int
    candidate_id: int
    last_epoch: int
    last_offset: int  # the candidate's log end offset
    candidate_directory_id: uuid.UUID = NO_DIRECTORY  # Vote v1's; zero from a v0 candidate


@dataclass(frozen=True)
class VoteResponse:
    error: int
    epoch: int
    leader_id: int | None
    granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    epoch: int
    leader_id: int
    preferred_successors: list[int]


@dataclass(frozen=True)
class EpochResponse:
    """BeginQuorumEpoch's and EndQuorumEpoch's answer."""

    error: int
    epoch: int
    leader_id: int | None


@dataclass(frozen=True)
class FetchRequest:
    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    #: Fetch v17's ReplicaDirectoryId (the zero uuid when the replica has none)
    replica_directory_id: uuid.UUID = NO_DIRECTORY


@dataclass(frozen=True)
class FetchResponse:
    error: int
    epoch: int
    leader_id: int | None
    high_watermark: int = -1
    records: bytes | memoryview = b""
    #: (epoch, end offset) the follower must truncate to; None when the logs agree
    diverging: tuple[int, int] | None = None
    #: (end offset, epoch) of the snapshot to download: the fetch offset is before the log start
    snapshot_id: tuple[int, int] | None = None


@dataclass(frozen=True)
class FetchSnapshotRequest:
    epoch: int
    replica_id: int
    snapshot_id: tuple[int, int]  # (end offset, epoch)
    position: int


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error: int
    epoch: int
    leader_id: int | None
    snapshot_id: tuple[int, int] = (-1, -1)
    size: int = -1
    position: int = -1
    data: bytes = b""


@dataclass(frozen=True)
class UpdateVoterRequest:
    """A voter announcing to the leader its current controller listeners ((name, host, port)
    each) and supported kraft.version range (Kafka's UpdateRaftVoter)."""

    epoch: int
    voter_id: int
    directory_id: uuid.UUID
    endpoints: tuple[tuple[str, str, int], ...]
    kraft_versions: tuple[int, int]


@dataclass
class Outbound:
    """A request the core wants sent to ``destination`` (a node id)."""

    destination: int
    request: (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
              | FetchSnapshotRequest | UpdateVoterRequest)
    attempts: int = field(default=0, compare=False)
