"""Which operation on which resource each API of the controller listener needs, as Kafka's
ControllerApis asks its authorizer.

Installed on the controller listener's registry when the node has an authorizer: every API it
serves is checked, none is left open. The principal is the connection's, or, for a request a
broker forwarded inside an Envelope, the client's principal the envelope carries
(``reference_broker.cluster.envelope``), so a client gets the same answer whether it reaches
the controller through a broker or directly (``--bootstrap-controller``).

- CLUSTER_ACTION on the cluster: what only nodes send (raft's Vote, BeginQuorumEpoch,
  EndQuorumEpoch, Fetch, FetchSnapshot; BrokerRegistration, BrokerHeartbeat, AlterPartition,
  AllocateProducerIds, and the Envelope itself).
- DESCRIBE on the cluster: DescribeQuorum, ListPartitionReassignments.
- ALTER on the cluster: DescribeCluster (on a controller it needs more than on a broker),
  ElectLeaders, AlterPartitionReassignments, CreateAcls, DeleteAcls, AlterUserScramCredentials.
- ALTER_CONFIGS on the cluster: AlterClientQuotas.
- Served by newer nodes and checked when registered: DescribeAcls (DESCRIBE on the cluster),
  UpdateFeatures, UnregisterBroker, AddRaftVoter, RemoveRaftVoter (ALTER), ControllerRegistration,
  AssignReplicasToDirs, UpdateRaftVoter (CLUSTER_ACTION), DescribeConfigs (DESCRIBE_CONFIGS per
  resource).
- Per topic or resource: CreateTopics (CREATE on the cluster, or else on each topic; a created
  topic's configs are shown only with DESCRIBE_CONFIGS on it), DeleteTopics (DELETE on the
  cluster, or else on each topic; a topic given by id is named in a refusal only to a principal
  that may DESCRIBE it), CreatePartitions (ALTER on each topic), AlterConfigs and
  IncrementalAlterConfigs (ALTER_CONFIGS on the topic, the cluster for BROKER and CLIENT_METRICS
  resources, the group for GROUP ones).

A whole-request refusal is the API's error response with CLUSTER_AUTHORIZATION_FAILED; a refused
item is answered TOPIC_/CLUSTER_/GROUP_AUTHORIZATION_FAILED in its own entry while the others are
carried out. ApiVersions and the SASL APIs are answered to anyone, as Kafka's controllers do.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reference_broker.handlers.auth import CLUSTER_NAME, Operation, ResourceType, authorize, authorize_cluster
from reference_broker.handlers.authorization import PerItem, Plan, guarded
from sdk.protocol.codec import response_class
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

TOPIC, CLUSTER, GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP
#: AlterConfigs resource types -> the ACL resource checked (others are refused by the handler).
_CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER, 16: CLUSTER, 32: GROUP}
_REFUSED = "Authorization failed."

#: (request, api version, error code) -> the response refusing it
Refusal = Callable[[Any, int, int], Any]


def _same(response: Any) -> Any:
    return response


def _top_level(api_key: int) -> Refusal:
    """The API's response with only its top-level error set."""
    return lambda request, version, code: response_class(api_key)(error_code=code)


def _top_level_with_message(api_key: int) -> Refusal:
    """DescribeQuorum, DescribeCluster: the top-level error and its message (Kafka's
    ``getErrorResponse``)."""

    def build(request: Any, version: int, code: int) -> Any:
        return response_class(api_key)(error_code=code, error_message=E(code).name)

    return build


def _elect_refused(request: Any, version: int, code: int) -> Any:
    """Every partition asked for carries the error too (ElectLeadersRequest.getErrorResponse)."""
    R = ElectLeadersResponse.ReplicaElectionResult
    results = [
        R(topic=t.topic, partition_result=[R.PartitionResult(partition_id=p, error_code=code)
                                           for p in t.partitions])
        for t in request.topic_partitions or []
    ]
    return ElectLeadersResponse(error_code=code, replica_election_results=results)


def _reassign_refused(request: Any, version: int, code: int) -> Any:
    T = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
    return AlterPartitionReassignmentsResponse(
        error_code=code,
        error_message=None,
        responses=[
            T(name=t.name, partitions=[T.ReassignablePartitionResponse(partition_index=p.partition_index,
                                                                      error_code=code)
                                       for p in t.partitions])
            for t in request.topics
        ],
    )


def _list_reassignments_refused(request: Any, version: int, code: int) -> Any:
    return ListPartitionReassignmentsResponse(error_code=code, error_message=None, topics=[])


def _registered_error(registry: HandlerRegistry) -> Callable[[Any], Refusal]:
    """The registry's own error builder of an API (CreateAcls, AlterClientQuotas, ...)."""

    handlers = {handler.api_key: handler for handler in registry.advertised()}

    def for_key(api_key: int) -> Refusal:
        builder = handlers[api_key].error_response
        assert builder is not None, f"api key {api_key} has no error response"
        return builder

    return for_key


def _cluster_needs(operation: Operation) -> Callable[[Refusal], Callable[..., Plan]]:
    """The whole request needs ``operation`` on the cluster; ``refusal`` builds the answer."""

    def with_refusal(refusal: Refusal) -> Callable[..., Plan]:
        def check(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
            if broker.authorizer is None or authorize_cluster(broker, ctx, operation):
                return None, request, _same
            return refusal(request, ctx.api_version, E.CLUSTER_AUTHORIZATION_FAILED), None, _same

        return check

    return with_refusal


# -- topics and configs -----------------------------------------------------------------------


def _create_topic_refused(topic: Any, code: int) -> Any:
    return CreateTopicsResponse.CreatableTopicResult(
        name=topic.name, error_code=code, error_message=_REFUSED, num_partitions=-1,
        replication_factor=-1, configs=None,
    )


def _hide_configs(broker: Broker, ctx: RequestContext, request: Any, response: Any) -> None:
    """A created topic's configs, partition count and replication factor are shown only to a
    principal with DESCRIBE_CONFIGS on it (Kafka's ReplicationControlManager)."""
    for result in response.topics:
        if result.error_code or authorize(broker, ctx, Operation.DESCRIBE_CONFIGS, TOPIC, result.name):
            continue
        result.configs = []
        result.num_partitions = result.replication_factor = -1
        result.topic_config_error_code = E.TOPIC_AUTHORIZATION_FAILED


_CREATE_PER_TOPIC = PerItem(
    Operation.CREATE, "topics", lambda broker, t: (TOPIC, t.name), _create_topic_refused, "topics",
    CreateTopicsResponse, _hide_configs,
)
_CREATE_AS_CLUSTER = PerItem(
    Operation.CREATE, "topics", lambda broker, t: None, _create_topic_refused, "topics",
    CreateTopicsResponse, _hide_configs,
)


def _create_topics(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
    if authorize_cluster(broker, ctx, Operation.CREATE):
        return _CREATE_AS_CLUSTER(broker, ctx, request)
    return _CREATE_PER_TOPIC(broker, ctx, request)


def _topic_name(broker: Broker, item: Any) -> str | None:
    """The name a DeleteTopics entry means (resolved from the controller's image for an id);
    None for an id the image does not know (the handler answers UNKNOWN_TOPIC_ID)."""
    if isinstance(item, str):
        return item
    if item.name is not None:
        return str(item.name)
    controller = getattr(broker, "controller", None)
    topic = None if controller is None else controller.core.image.topics_by_id.get(item.topic_id)
    return None if topic is None else str(topic.name)


def _delete_topics(broker: Broker, ctx: RequestContext, request: Any) -> Plan:
    if authorize_cluster(broker, ctx, Operation.DELETE):
        return None, request, _same
    by_id = ctx.api_version >= 6
    items = request.topics if by_id else request.topic_names
    allowed: list[Any] = []
    refused: list[Any] = []
    for item in items:
        name = _topic_name(broker, item)
        if name is None or authorize(broker, ctx, Operation.DELETE, TOPIC, name):
            allowed.append(item)
            continue
        shown = name if (not by_id or item.name is not None
                         or authorize(broker, ctx, Operation.DESCRIBE, TOPIC, name)) else None
        refused.append(DeleteTopicsResponse.DeletableTopicResult(
            name=shown, topic_id=item.topic_id if by_id else uuid.UUID(int=0),
            error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=_REFUSED,
        ))
    if not refused:
        return None, request, _same
    if not allowed:
        return DeleteTopicsResponse(responses=refused), None, _same
    kept = copy.copy(request)
    setattr(kept, "topics" if by_id else "topic_names", allowed)

    def finish(response: Any) -> Any:
        if response is not None:
            response.responses.extend(refused)
        return response

    return None, kept, finish


def _create_partitions_refused(topic: Any, code: int) -> Any:
    return CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=topic.name, error_code=code, error_message=_REFUSED
    )


def _config_resource(broker: Broker, resource: Any) -> tuple[ResourceType, str] | None:
    kind = _CONFIG_RESOURCES.get(resource.resource_type)
    return None if kind is None else (kind, resource.resource_name)


def _described_config_resource(broker: Broker, resource: Any) -> tuple[ResourceType, str] | None:
    """DescribeConfigs: a BROKER_LOGGER resource is the cluster's too (Kafka's ConfigHelper)."""
    if resource.resource_type == 8:
        return CLUSTER, CLUSTER_NAME
    return _config_resource(broker, resource)


def _config_refused(result_type: Any) -> Callable[[Any, int], Any]:
    def entry(resource: Any, code: int) -> Any:
        return result_type(error_code=code, error_message=_REFUSED, resource_type=resource.resource_type,
                           resource_name=resource.resource_name)

    return entry


def _configs(response_type: Any) -> PerItem:
    return PerItem(Operation.ALTER_CONFIGS, "resources", _config_resource,
                   _config_refused(response_type.AlterConfigsResourceResponse), "responses", response_type)


# -- the table --------------------------------------------------------------------------------

#: controller-listener APIs only nodes send: raft's, registration, heartbeats, ISR changes, ids,
#: the Envelope brokers forward client requests in, and (when served) ControllerRegistration,
#: AssignReplicasToDirs and UpdateRaftVoter
CLUSTER_ACTIONS = (52, 53, 54, 1, 59, 62, 63, 56, 67, 58, 70, 73, 82)
#: (api key, operation on the cluster, refusal builder or None for the registry's own)
_WHOLE_REQUEST: tuple[tuple[int, Operation, Refusal | None], ...] = (
    *((key, Operation.CLUSTER_ACTION, _top_level(key)) for key in CLUSTER_ACTIONS),
    (55, Operation.DESCRIBE, _top_level_with_message(55)),  # DescribeQuorum
    (46, Operation.DESCRIBE, _list_reassignments_refused),  # ListPartitionReassignments
    (60, Operation.ALTER, _top_level_with_message(60)),  # DescribeCluster
    (43, Operation.ALTER, _elect_refused),  # ElectLeaders
    (45, Operation.ALTER, _reassign_refused),  # AlterPartitionReassignments
    (30, Operation.ALTER, None),  # CreateAcls
    (31, Operation.ALTER, None),  # DeleteAcls
    (51, Operation.ALTER, None),  # AlterUserScramCredentials
    (49, Operation.ALTER_CONFIGS, None),  # AlterClientQuotas
    # Checked when served (a node that does not serve them answers them as unsupported):
    (29, Operation.DESCRIBE, _top_level(29)),  # DescribeAcls
    (57, Operation.ALTER, _top_level_with_message(57)),  # UpdateFeatures
    (64, Operation.ALTER, _top_level(64)),  # UnregisterBroker
    (80, Operation.ALTER, _top_level_with_message(80)),  # AddRaftVoter
    (81, Operation.ALTER, _top_level_with_message(81)),  # RemoveRaftVoter
)
_PER_ITEM: dict[int, Callable[..., Plan]] = {
    19: _create_topics,
    20: _delete_topics,
    37: PerItem(Operation.ALTER, "topics", lambda broker, t: (TOPIC, t.name), _create_partitions_refused,
                "results", CreatePartitionsResponse),
    33: _configs(AlterConfigsResponse),
    44: _configs(IncrementalAlterConfigsResponse),
    32: PerItem(Operation.DESCRIBE_CONFIGS, "resources", _described_config_resource,
                _config_refused(DescribeConfigsResponse.DescribeConfigsResult), "results",
                DescribeConfigsResponse),
}
#: answered to anyone: ApiVersions, SaslHandshake, SaslAuthenticate
OPEN = frozenset({18, 17, 36})


def checked_api_keys() -> frozenset[int]:
    """Every API key this module has a check for."""
    return frozenset(key for key, _, _ in _WHOLE_REQUEST) | frozenset(_PER_ITEM)


def install(registry: HandlerRegistry) -> None:
    """Put every registered API of the controller listener behind its check. An API registered
    without one is a programming error: it would be served to any principal."""
    registered = {handler.api_key for handler in registry.advertised()}
    unchecked = registered - checked_api_keys() - OPEN
    if unchecked:
        raise RuntimeError(f"controller APIs without an authorization check: {sorted(unchecked)}")
    error_of = _registered_error(registry)
    for api_key, operation, refusal in _WHOLE_REQUEST:
        if api_key in registered:
            check = _cluster_needs(operation)(refusal or error_of(api_key))
            registry.guard(api_key, functools.partial(_behind, check))
    for api_key, pre in _PER_ITEM.items():
        registry.guard(api_key, functools.partial(_behind, pre))


def _behind(pre: Callable[..., Plan], handle: Callable[..., Any]) -> Callable[..., Any]:
    return guarded(handle, pre)


__all__ = ["CLUSTER_ACTIONS", "OPEN", "checked_api_keys", "install"]
