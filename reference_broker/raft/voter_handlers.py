"""AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter on the controller listener (KIP-853), as
Kafka's ControllerApis hands them to its raft client: only the leader changes the voter set
(others answer NOT_LEADER_OR_FOLLOWER), a request from another cluster gets
INCONSISTENT_CLUSTER_ID, and the rest of the checks are the leader's
(``reference_broker.raft.voter_changes``). The ACL checks (ALTER on the cluster for add and
remove, CLUSTER_ACTION for update) are ``reference_broker.controller.authorization``'s."""

from __future__ import annotations

from typing import Any

from reference_broker.raft.core import LEADER
from reference_broker.raft.handlers import core_of, refusal
from reference_broker.raft.messages import (
    FENCED_LEADER_EPOCH,
    INVALID_REQUEST,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
)
from reference_broker.raft.voter_changes import Answer
from reference_broker.raft.voter_set import NO_DIRECTORY, Endpoint, Voter
from sdk.protocol import messages as m


def _not_leader(broker: Any) -> Answer | None:
    core = core_of(broker)
    if core is None or core.role != LEADER:
        return Answer(NOT_LEADER_OR_FOLLOWER, "this controller is not the raft leader")
    return None


def _leader_change_api(response_cls: Any, change: Any) -> Any:
    """An AddRaftVoter/RemoveRaftVoter handler: the refusals every voter change shares (another
    cluster, no quorum, not the leader), then ``change(raft, request)``'s answer."""

    async def handler(broker: Any, ctx: Any, request: Any) -> Any:
        refused = refusal(broker, request, response_cls)
        if refused is not None:
            return refused
        answer = _not_leader(broker) or await change(broker.raft, request)
        return response_cls(error_code=answer.error, error_message=answer.message)

    return handler


async def _add(raft: Any, request: Any) -> Answer:
    if request.voter_directory_id == NO_DIRECTORY:
        return Answer(INVALID_REQUEST, "Add voter request didn't include a valid voter")
    answer: Answer = await raft.add_voter(
        request.voter_id, request.voter_directory_id,
        [(lst.name, lst.host, lst.port) for lst in request.listeners], max(1, request.timeout_ms))
    return answer


async def _remove(raft: Any, request: Any) -> Answer:
    answer: Answer = await raft.remove_voter(request.voter_id, request.voter_directory_id)
    return answer


_add_raft_voter = _leader_change_api(m.AddRaftVoterResponse, _add)
_remove_raft_voter = _leader_change_api(m.RemoveRaftVoterResponse, _remove)


def _update_raft_voter(broker: Any, ctx: Any, request: Any) -> Any:
    cls = m.UpdateRaftVoterResponse
    refused = refusal(broker, request, cls)
    if refused is not None:
        return refused
    core = core_of(broker)
    answer = _not_leader(broker)
    if answer is None and request.current_leader_epoch != core.epoch:
        stale = request.current_leader_epoch < core.epoch
        answer = Answer(FENCED_LEADER_EPOCH if stale else UNKNOWN_LEADER_EPOCH)
    if answer is None:
        feature = request.k_raft_version_feature
        answer = broker.raft.update_voter(Voter(
            request.voter_id, request.voter_directory_id,
            tuple(Endpoint(lst.name, lst.host, lst.port) for lst in request.listeners),
            (feature.min_supported_version, feature.max_supported_version)))
    leader = -1 if core is None or core.leader_id is None else core.leader_id
    return cls(error_code=answer.error, current_leader=cls.CurrentLeader(
        leader_id=leader, leader_epoch=-1 if core is None else core.epoch))


def install(registry: Any) -> None:
    """Register the voter-change APIs into the controller listener's registry."""
    registry.register(80, _add_raft_voter)
    registry.register(81, _remove_raft_voter)
    registry.register(82, _update_raft_voter)
