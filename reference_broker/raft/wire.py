"""Mapping between the raft core's messages and Kafka's wire messages (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch and FetchSnapshot of ``__cluster_metadata``), both directions."""

from __future__ import annotations

import uuid
from typing import Any

from reference_broker.raft.core import RaftCore
from reference_broker.raft.log import TOPIC
from reference_broker.raft.messages import (
    NO_DIRECTORY,
    NONE,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    UpdateVoterRequest,
    VoteRequest,
    VoteResponse,
)
from sdk.protocol import messages as m

#: Kafka's ``Uuid.METADATA_TOPIC_ID``
METADATA_TOPIC_ID = uuid.UUID(int=1)


class WireError(ValueError):
    """A raft message that does not name exactly the metadata partition."""


def _leader(leader_id: int | None) -> int:
    return -1 if leader_id is None else leader_id


def _opt(leader_id: int) -> int | None:
    return None if leader_id < 0 else leader_id


def _one_partition(topics: list[Any], name_field: str = "topic_name") -> Any:
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise WireError("a raft request names exactly one partition of __cluster_metadata")
    topic = topics[0]
    name = getattr(topic, name_field, TOPIC)
    topic_id = getattr(topic, "topic_id", None)
    if name not in (TOPIC, "", None) and topic_id != METADATA_TOPIC_ID:
        raise WireError(f"raft requests are for {TOPIC}, not {name!r}")
    part = topic.partitions[0]
    index = getattr(part, "partition_index", getattr(part, "partition", 0))
    if index != 0:
        raise WireError(f"{TOPIC} has partition 0 only, not {index}")
    return part


# -- requests out -----------------------------------------------------------------------------

def _directory_of(core: RaftCore | None, node_id: int) -> Any:
    voter = None if core is None else core.voter_set.voters.get(node_id)
    return NO_DIRECTORY if voter is None else voter.directory_id


def _leader_endpoints(cls: Any, core: RaftCore | None) -> list[Any]:
    return [cls(name=e.name, host=e.host, port=e.port) for e in (core.endpoints if core else ())]


def to_request(request: Any, cluster_id: str, destination: int = -1,
               core: RaftCore | None = None) -> Any:
    """The wire request of a core request to ``destination``; with the sending ``core``, the
    v1 fields Kafka fills in: the destination voter's replica key and the leader's endpoints
    (a Vote's candidate directory id is the request's own)."""
    if isinstance(request, VoteRequest):
        return m.VoteRequest(cluster_id=cluster_id, voter_id=destination,
                             topics=[m.VoteRequest.TopicData(
            topic_name=TOPIC, partitions=[m.VoteRequest.TopicData.PartitionData(
                partition_index=0, candidate_epoch=request.epoch,
                candidate_id=request.candidate_id,
                candidate_directory_id=request.candidate_directory_id,
                voter_directory_id=_directory_of(core, destination),
                last_offset_epoch=request.last_epoch, last_offset=request.last_offset)])])
    if isinstance(request, BeginQuorumEpochRequest):
        begin = m.BeginQuorumEpochRequest
        return begin(cluster_id=cluster_id, voter_id=destination, topics=[
            begin.TopicData(topic_name=TOPIC, partitions=[begin.TopicData.PartitionData(
                partition_index=0, voter_directory_id=_directory_of(core, destination),
                leader_id=request.leader_id, leader_epoch=request.epoch)])],
            leader_endpoints=_leader_endpoints(begin.LeaderEndpoint, core))
    if isinstance(request, EndQuorumEpochRequest):
        end = m.EndQuorumEpochRequest
        part = end.TopicData.PartitionData(
            partition_index=0, leader_id=request.leader_id, leader_epoch=request.epoch,
            preferred_successors=list(request.preferred_successors),
            preferred_candidates=[
                end.TopicData.PartitionData.ReplicaInfo(
                    candidate_id=c, candidate_directory_id=_directory_of(core, c))
                for c in request.preferred_successors])
        return end(cluster_id=cluster_id, topics=[end.TopicData(topic_name=TOPIC,
                                                                partitions=[part])],
                   leader_endpoints=_leader_endpoints(end.LeaderEndpoint, core))
    if isinstance(request, FetchRequest):
        fetch = m.FetchRequest
        return fetch(
            cluster_id=cluster_id, replica_id=request.replica_id,
            replica_state=fetch.ReplicaState(replica_id=request.replica_id, replica_epoch=-1),
            max_wait_ms=500, min_bytes=0, max_bytes=8 << 20, session_id=0, session_epoch=-1,
            topics=[fetch.FetchTopic(topic=TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[
                fetch.FetchTopic.FetchPartition(
                    partition=0, current_leader_epoch=request.epoch,
                    fetch_offset=request.fetch_offset,
                    last_fetched_epoch=request.last_fetched_epoch, log_start_offset=-1,
                    partition_max_bytes=8 << 20,
                    replica_directory_id=request.replica_directory_id)])])
    if isinstance(request, FetchSnapshotRequest):
        fs = m.FetchSnapshotRequest
        ps = fs.TopicSnapshot.PartitionSnapshot
        return fs(cluster_id=cluster_id, replica_id=request.replica_id, max_bytes=8 << 20,
                  topics=[fs.TopicSnapshot(name=TOPIC, partitions=[ps(
                      partition=0, current_leader_epoch=request.epoch,
                      snapshot_id=ps.SnapshotId(end_offset=request.snapshot_id[0],
                                                epoch=request.snapshot_id[1]),
                      position=request.position)])])
    if isinstance(request, UpdateVoterRequest):
        uv = m.UpdateRaftVoterRequest
        low, high = request.kraft_versions
        return uv(cluster_id=cluster_id, current_leader_epoch=request.epoch,
                  voter_id=request.voter_id, voter_directory_id=request.directory_id,
                  listeners=[uv.Listener(name=n, host=h, port=p) for n, h, p in request.endpoints],
                  k_raft_version_feature=uv.KRaftVersionFeature(min_supported_version=low,
                                                                max_supported_version=high))
    raise TypeError(f"not a raft request: {request!r}")


def feed_response(core: RaftCore, source: int, request: Any, response: Any, now_ms: int) -> None:
    """Hand the answer to ``request`` from ``source`` to the core."""
    if isinstance(request, FetchRequest):
        if response.error_code != NONE:
            core.handle_fetch_response(source, FetchResponse(response.error_code, -1, None),
                                       now_ms)
            return
        part = _one_partition(response.responses, "topic")
        diverging = None
        if part.diverging_epoch is not None and part.diverging_epoch.epoch >= 0:
            diverging = (part.diverging_epoch.epoch, part.diverging_epoch.end_offset)
        snapshot_id = None
        snap = part.snapshot_id
        if snap is not None and (snap.end_offset >= 0 or snap.epoch >= 0):
            if snap.end_offset < 0 or snap.epoch < 0:
                raise WireError(f"Fetch answered with an invalid snapshot id {snap}")
            snapshot_id = (snap.end_offset, snap.epoch)
        leader = part.current_leader
        core.handle_fetch_response(source, FetchResponse(
            part.error_code, leader.leader_epoch, _opt(leader.leader_id), part.high_watermark,
            part.records or b"", diverging, snapshot_id), now_ms)
        return
    if isinstance(request, FetchSnapshotRequest):
        if response.error_code != NONE:
            core.handle_fetch_snapshot_response(
                source, FetchSnapshotResponse(response.error_code, -1, None), now_ms)
            return
        if len(response.topics) != 1 or len(response.topics[0].partitions) != 1:
            raise WireError("a FetchSnapshot answer names exactly one partition")
        part = response.topics[0].partitions[0]
        leader = part.current_leader
        core.handle_fetch_snapshot_response(source, FetchSnapshotResponse(
            part.error_code, leader.leader_epoch, _opt(leader.leader_id),
            (part.snapshot_id.end_offset, part.snapshot_id.epoch), part.size, part.position,
            bytes(part.unaligned_records or b"")), now_ms)
        return
    if isinstance(request, UpdateVoterRequest):
        core.handle_update_voter_response(response.error_code, now_ms)
        return
    if response.error_code != NONE:
        raise WireError(f"{type(response).__name__} error {response.error_code}")
    part = _one_partition(response.topics)
    if isinstance(request, VoteRequest):
        core.handle_vote_response(source, VoteResponse(
            part.error_code, part.leader_epoch, _opt(part.leader_id), part.vote_granted), now_ms)
    else:
        core.handle_epoch_response(EpochResponse(
            part.error_code, part.leader_epoch, _opt(part.leader_id)), now_ms)


# -- requests in ------------------------------------------------------------------------------

def invalid_voter_key(core: RaftCore, request: Any) -> bool:
    """Kafka's isValidVoterKey, negated: a v1 Vote or BeginQuorumEpoch meant for another replica
    (another node id, or this id with another directory)."""
    voter_id = getattr(request, "voter_id", -1)
    if voter_id >= 0 and voter_id != core.node_id:
        return True
    parts = [p for t in request.topics for p in t.partitions]
    directory = getattr(parts[0], "voter_directory_id", None) if parts else None
    return directory not in (None, NO_DIRECTORY) and directory != core.directory_id


def vote_request(request: Any) -> VoteRequest:
    part = _one_partition(request.topics)
    return VoteRequest(part.candidate_epoch, part.candidate_id, part.last_offset_epoch,
                       part.last_offset, part.candidate_directory_id)


def vote_response(answer: VoteResponse) -> Any:
    cls = m.VoteResponse
    return cls(error_code=NONE, topics=[cls.TopicData(topic_name=TOPIC, partitions=[
        cls.TopicData.PartitionData(partition_index=0, error_code=answer.error,
                                    leader_id=_leader(answer.leader_id),
                                    leader_epoch=answer.epoch, vote_granted=answer.granted)])])


def begin_request(request: Any) -> BeginQuorumEpochRequest:
    part = _one_partition(request.topics)
    return BeginQuorumEpochRequest(part.leader_epoch, part.leader_id)


def end_request(request: Any, version: int) -> EndQuorumEpochRequest:
    part = _one_partition(request.topics)
    successors = (list(part.preferred_successors) if version == 0
                  else [c.candidate_id for c in part.preferred_candidates])
    return EndQuorumEpochRequest(part.leader_epoch, part.leader_id, successors)


def epoch_response(cls: Any, answer: EpochResponse) -> Any:
    return cls(error_code=NONE, topics=[cls.TopicData(topic_name=TOPIC, partitions=[
        cls.TopicData.PartitionData(partition_index=0, error_code=answer.error,
                                    leader_id=_leader(answer.leader_id),
                                    leader_epoch=answer.epoch)])])


def fetch_request(request: Any) -> FetchRequest:
    part = _one_partition(request.topics, "topic")
    replica_id = request.replica_id
    if request.replica_state is not None and request.replica_state.replica_id >= 0:
        replica_id = request.replica_state.replica_id
    directory_id = getattr(part, "replica_directory_id", None) or NO_DIRECTORY
    return FetchRequest(part.current_leader_epoch, replica_id, part.fetch_offset,
                        part.last_fetched_epoch, directory_id)


def fetch_response(answer: FetchResponse,
                   leader_endpoint: tuple[str, int] | None = None) -> Any:
    """The Fetch answer; ``leader_endpoint`` (the leader's controller listener) goes in
    NodeEndpoints (Fetch v16+), where an observer that knows no voter learns where to fetch."""
    cls = m.FetchResponse
    pd = cls.FetchableTopicResponse.PartitionData
    part = pd(partition_index=0, error_code=answer.error, high_watermark=answer.high_watermark,
              last_stable_offset=answer.high_watermark, log_start_offset=0,
              current_leader=pd.LeaderIdAndEpoch(leader_id=_leader(answer.leader_id),
                                                 leader_epoch=answer.epoch),
              records=bytes(answer.records))
    if answer.diverging is not None:
        part.diverging_epoch = pd.EpochEndOffset(epoch=answer.diverging[0],
                                                 end_offset=answer.diverging[1])
    if answer.snapshot_id is not None:
        part.snapshot_id = pd.SnapshotId(end_offset=answer.snapshot_id[0],
                                         epoch=answer.snapshot_id[1])
    endpoints = []
    if leader_endpoint is not None and answer.leader_id is not None:
        endpoints = [cls.NodeEndpoint(node_id=answer.leader_id, host=leader_endpoint[0],
                                      port=leader_endpoint[1])]
    return cls(error_code=NONE, session_id=0, responses=[cls.FetchableTopicResponse(
        topic=TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])], node_endpoints=endpoints)


def fetch_snapshot_request(request: Any) -> FetchSnapshotRequest:
    if len(request.topics) != 1 or len(request.topics[0].partitions) != 1:
        raise WireError("a FetchSnapshot request names exactly one partition")
    topic = request.topics[0]
    part = topic.partitions[0]
    if topic.name != TOPIC or part.partition != 0:
        raise WireError(f"FetchSnapshot is for {TOPIC}-0, not {topic.name}-{part.partition}")
    return FetchSnapshotRequest(part.current_leader_epoch, request.replica_id,
                                (part.snapshot_id.end_offset, part.snapshot_id.epoch),
                                part.position)


def fetch_snapshot_response(answer: FetchSnapshotResponse) -> Any:
    cls = m.FetchSnapshotResponse
    ps = cls.TopicSnapshot.PartitionSnapshot
    part = ps(index=0, error_code=answer.error,
              snapshot_id=ps.SnapshotId(end_offset=answer.snapshot_id[0],
                                        epoch=answer.snapshot_id[1]),
              current_leader=ps.LeaderIdAndEpoch(leader_id=_leader(answer.leader_id),
                                                 leader_epoch=answer.epoch),
              size=answer.size, position=answer.position, unaligned_records=answer.data)
    return cls(error_code=NONE, topics=[cls.TopicSnapshot(name=TOPIC, partitions=[part])])
