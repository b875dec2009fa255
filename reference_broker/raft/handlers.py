"""The raft APIs of the controller listener (Kafka's ControllerApis): Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch and FetchSnapshot of ``__cluster_metadata``, DescribeQuorum, DescribeCluster
(the voters' controller endpoints, so admin clients bootstrapped to controllers find the active
one) and ApiVersions (which lists this registry's APIs, not the broker listener's)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from reference_broker.features import api_versions_fields
from reference_broker.handlers.api_versions import _api_list
from reference_broker.handlers.api_versions import error_response as api_versions_error
from reference_broker.raft import wire
from reference_broker.raft.core import LEADER
from reference_broker.raft.log import TOPIC
from reference_broker.raft.messages import (
    INVALID_VOTER_KEY,
    NOT_LEADER_OR_FOLLOWER,
    EpochResponse,
    VoteResponse,
)
from sdk.protocol import messages as m
from sdk.protocol.errors import ErrorCode

_BROKER_NOT_AVAILABLE = 8
_INVALID_REQUEST = 42
_INCONSISTENT_CLUSTER_ID = 104


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def core_of(broker: Any) -> Any:
    """The node's raft core (None before its raft client started)."""
    raft = getattr(broker, "raft", None)
    return None if raft is None else raft.core


def _foreign(broker: Any, request: Any) -> bool:
    """A request from another cluster (Kafka's raft checks the cluster id; empty is accepted)."""
    cluster_id = getattr(request, "cluster_id", None)
    return bool(cluster_id) and bool(broker.cluster_id) and cluster_id != broker.cluster_id


def refusal(broker: Any, request: Any, response_cls: Any) -> Any | None:
    """The error response for a request from another cluster or to a node without a quorum."""
    if _foreign(broker, request):
        return response_cls(error_code=_INCONSISTENT_CLUSTER_ID)
    if core_of(broker) is None:
        return response_cls(error_code=_BROKER_NOT_AVAILABLE)
    return None


def _election_api(response_cls: Any, decode: Any, handle: Any, encode: Any,
                  refuse: Any = None) -> Any:
    """A Vote/BeginQuorumEpoch/EndQuorumEpoch handler: decode, let the core decide, wake the
    raft loop (the decision may change the role or the epoch), encode. ``refuse(core)`` is the
    answer to a request for another replica (Kafka's INVALID_VOTER_KEY), checked first."""

    def handler(broker: Any, ctx: Any, request: Any) -> Any:
        refused = refusal(broker, request, response_cls)
        if refused is not None:
            return refused
        try:
            decoded = decode(request, ctx.api_version)
        except (wire.WireError, IndexError):
            return response_cls(error_code=_INVALID_REQUEST)
        core = core_of(broker)
        if refuse is not None and wire.invalid_voter_key(core, request):
            return encode(refuse(core))
        answer = handle(core, decoded, _now_ms())
        broker.raft._kick()
        return encode(answer)

    return handler


_vote = _election_api(
    m.VoteResponse, lambda request, version: wire.vote_request(request),
    lambda core, vote, now: core.handle_vote_request(vote, now), wire.vote_response,
    lambda core: VoteResponse(INVALID_VOTER_KEY, core.epoch, core.leader_id, False))
_begin = _election_api(
    m.BeginQuorumEpochResponse, lambda request, version: wire.begin_request(request),
    lambda core, begin, now: core.handle_begin_quorum_epoch(begin, now),
    lambda answer: wire.epoch_response(m.BeginQuorumEpochResponse, answer),
    lambda core: EpochResponse(INVALID_VOTER_KEY, core.epoch, core.leader_id))
_end = _election_api(
    m.EndQuorumEpochResponse, wire.end_request,
    lambda core, end, now: core.handle_end_quorum_epoch(end, now),
    lambda answer: wire.epoch_response(m.EndQuorumEpochResponse, answer))


async def _fetch(broker: Any, ctx: Any, request: Any) -> Any:
    """The leader answers at once when it has records (or news), else holds the Fetch until the
    log or the high watermark changes, at most ``max_wait_ms``."""
    refused = refusal(broker, request, m.FetchResponse)
    if refused is not None:
        return refused
    core = core_of(broker)
    try:
        fetch = wire.fetch_request(request)
    except wire.WireError:
        return m.FetchResponse(error_code=_INVALID_REQUEST)
    high_watermark = core.high_watermark
    answer = core.handle_fetch_request(fetch, _now_ms())
    raft = broker.raft
    if core.high_watermark != high_watermark:
        raft._kick()  # the voters' held Fetches answer with the new high watermark
    else:
        # Only the loop: waking every held Fetch here would answer the other voters' empty
        # Fetches at once, and their next Fetches would wake this one, round and round.
        raft.wake_loop()
    if (answer.error == 0 and not len(answer.records) and answer.diverging is None
            and not core.high_watermark_news(fetch.replica_id) and request.max_wait_ms > 0):
        changed = raft.changed()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(changed.wait(), min(request.max_wait_ms, 1000) / 1000)
        core = core_of(broker)
        if core is None:
            return m.FetchResponse(error_code=_BROKER_NOT_AVAILABLE)
        answer = core.handle_fetch_request(fetch, _now_ms())
    return wire.fetch_response(answer, raft.leader_endpoint(answer.leader_id))


def _fetch_snapshot(broker: Any, ctx: Any, request: Any) -> Any:
    """The leader answers one chunk (up to ``max_bytes``) of the snapshot asked for."""
    refused = refusal(broker, request, m.FetchSnapshotResponse)
    if refused is not None:
        return refused
    core = core_of(broker)
    try:
        fetch = wire.fetch_snapshot_request(request)
    except wire.WireError:
        return m.FetchSnapshotResponse(error_code=_INVALID_REQUEST)
    max_bytes = max(1, min(request.max_bytes, 8 << 20))
    answer = core.handle_fetch_snapshot_request(fetch, _now_ms(), max_bytes)
    return wire.fetch_snapshot_response(answer)


def _describe_quorum(broker: Any, ctx: Any, request: Any) -> Any:
    cls = m.DescribeQuorumResponse
    pd = cls.TopicData.PartitionData
    core = core_of(broker)
    if core is None or core.role != LEADER:
        part = pd(partition_index=0, error_code=NOT_LEADER_OR_FOLLOWER,
                  leader_id=-1 if core is None or core.leader_id is None else core.leader_id,
                  leader_epoch=0 if core is None else core.epoch, high_watermark=-1)
        return cls(error_code=0, topics=[cls.TopicData(topic_name=TOPIC, partitions=[part])])
    voters: list[Any] = []
    observers: list[Any] = []
    now_ms, wall_ms = _now_ms(), int(time.time() * 1000)
    for replica_id, state in sorted(core.replica_states().items()):
        # wall-clock times as Kafka reports them; the leader's own log is current now
        if replica_id == core.node_id:
            seen = wall_ms
        else:
            seen = -1 if state.last_fetch_ms < 0 else wall_ms - (now_ms - state.last_fetch_ms)
        # a voter's directory id is the voter set's (none for static voters, as Kafka's), an
        # observer's the one its Fetches name
        voter = core.voter_set.voters.get(replica_id)
        directory_id = state.directory_id if voter is None else voter.directory_id
        entry = pd.ReplicaState(replica_id=replica_id, replica_directory_id=directory_id,
                                log_end_offset=state.end_offset, last_fetch_timestamp=seen,
                                last_caught_up_timestamp=seen)
        (voters if replica_id in core.voters else observers).append(entry)
    hw = core.high_watermark
    part = pd(partition_index=0, error_code=0, leader_id=core.node_id, leader_epoch=core.epoch,
              high_watermark=-1 if hw is None else hw, current_voters=voters,
              observers=observers)
    # v2's nodes: the voters' listeners, as Kafka's leader knows them (from the voter set)
    nodes = [cls.Node(node_id=v.node_id, listeners=[
        cls.Node.Listener(name=e.name, host=e.host, port=e.port) for e in v.endpoints])
        for v in sorted(core.voter_set.voters.values(), key=lambda v: v.node_id) if v.endpoints]
    return cls(error_code=0, topics=[cls.TopicData(topic_name=TOPIC, partitions=[part])],
               nodes=nodes)


_ENDPOINT_CONTROLLERS = 2


def _describe_cluster(broker: Any, ctx: Any, request: Any) -> Any:
    """Kafka's ControllerApis.handleDescribeCluster: only controller endpoints (type 2) are
    described here. The "brokers" are the registered controllers (KIP-919: the image's
    RegisterControllerRecords, Kafka's ControllerRegistrationsPublisher) that have an endpoint on
    the listener the request came in on, in id order; the controller id is the raft leader's, -1
    while none is known or while it is not among them (Kafka's AuthHelper: never name a controller
    the answer does not describe)."""
    from reference_broker.handlers.cluster import cluster_authorized_operations

    cls = m.DescribeClusterResponse
    if request.endpoint_type != _ENDPOINT_CONTROLLERS:
        known = request.endpoint_type == 1
        code = (_INVALID_REQUEST if ctx.api_version == 0 else
                ErrorCode.MISMATCHED_ENDPOINT_TYPE if known else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
        message = ("The request was sent to an endpoint of type CONTROLLER, but we wanted an"
                   " endpoint of type BROKER" if known
                   else f"Unsupported endpoint type {request.endpoint_type}")
        return cls(error_code=code, error_message=message)
    loader = getattr(broker, "metadata_loader", None)
    controllers = {} if loader is None else loader.image.controllers
    listener = ctx.connection.session.listener.name
    described = []
    for node in sorted(controllers):
        endpoint = controllers[node].endpoint(listener)
        if endpoint is not None:
            described.append(cls.DescribeClusterBroker(broker_id=node, host=endpoint.host,
                                                       port=endpoint.port, rack=None))
    core = core_of(broker)
    leader = -1 if core is None or core.leader_id is None else core.leader_id
    return cls(error_code=0, endpoint_type=_ENDPOINT_CONTROLLERS, cluster_id=broker.cluster_id,
               controller_id=leader if any(b.broker_id == leader for b in described) else -1,
               brokers=described,
               cluster_authorized_operations=cluster_authorized_operations(broker, ctx, request))


def install(registry: Any) -> None:
    """Register the raft APIs and ApiVersions into the controller listener's registry."""

    def api_versions(broker: Any, ctx: Any, request: Any) -> Any:
        features = api_versions_fields(broker, ctx.api_version) if ctx.api_version >= 3 else {}
        return m.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_list(registry),
                                     **features)

    registry.register(18, api_versions, error_response=api_versions_error)
    registry.register(52, _vote)
    registry.register(53, _begin)
    registry.register(54, _end)
    registry.register(1, _fetch)
    registry.register(55, _describe_quorum)
    registry.register(59, _fetch_snapshot)
    registry.register(60, _describe_cluster)
    from reference_broker.raft import voter_handlers

    voter_handlers.install(registry)


async def _describe_quorum_forwarded(broker: Any, ctx: Any, request: Any) -> Any:
    """DescribeQuorum on a broker listener: answered by the raft leader (forwarded to its
    controller listener when this node does not lead), so tools bootstrapped to brokers work.
    With an authorizer the client needs DESCRIBE on the cluster, as on a controller (Kafka's
    broker forwards it and ControllerApis checks it); the forwarded request is the node's own."""
    from reference_broker.handlers.auth import Operation, authorize_cluster

    if broker.authorizer is not None and not authorize_cluster(broker, ctx, Operation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return m.DescribeQuorumResponse(error_code=code, error_message=ErrorCode(code).name)
    raft = getattr(broker, "raft", None)
    core = core_of(broker)
    if raft is None or core is None or core.role == LEADER or core.leader_id is None:
        return _describe_quorum(broker, ctx, request)
    try:
        return await raft.channels.send(core.leader_id, request)
    except Exception:  # the leader is unreachable: answer what this node knows
        return _describe_quorum(broker, ctx, request)


def install_broker_side(registry: Any) -> None:
    """DescribeQuorum on the broker listeners of a cluster node."""
    registry.register(55, _describe_quorum_forwarded)
