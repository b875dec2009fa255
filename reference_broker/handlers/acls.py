"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): the authorizer's ACL store.

Without an authorizer Kafka answers SECURITY_DISABLED; with one, each needs ALTER (create,
delete) or DESCRIBE (describe) on the cluster, else CLUSTER_AUTHORIZATION_FAILED. Bindings are
checked as Kafka's AclControlManager checks them (INVALID_REQUEST with its message) and kept
durably (``reference_broker.security.acl.AclStore``).

In cluster mode (``controller.quorum.voters`` set) a broker checks the caller as above and
forwards CreateAcls and DeleteAcls to the active controller (``controller/acl_control.py``), which
decides them with ``decide_creations`` / ``decide_deletions`` against the committed ACLs and
writes AccessControlEntryRecord / RemoveAccessControlEntryRecord; every node's authorizer holds
its metadata image's ACLs, which DescribeAcls and every authorization read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from reference_broker.config import quorum_configured
from reference_broker.handlers.auth import Operation, authorize_cluster
from reference_broker.security.acl import (
    AclBinding,
    AclFilter,
    PatternType,
    Permission,
    ResourceType,
    binding_problem,
)
from reference_broker.security.acl import Operation as AclOperation
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

_DISABLED = "No Authorizer is configured."


def _enum(
    kind: type[ResourceType] | type[PatternType] | type[AclOperation] | type[Permission], code: int
) -> object:
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def _filter(
    resource_type: int,
    name: str | None,
    pattern: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, resource_type),  # type: ignore[arg-type]
        name,
        _enum(PatternType, pattern),  # type: ignore[arg-type]
        principal,
        host,
        _enum(AclOperation, operation),  # type: ignore[arg-type]
        _enum(Permission, permission),  # type: ignore[arg-type]
    )


def binding_of(creation: Any) -> AclBinding:
    """The binding a CreateAcls creation asks for (unknown codes become UNKNOWN)."""
    return AclBinding(
        _enum(ResourceType, creation.resource_type),  # type: ignore[arg-type]
        creation.resource_name,
        _enum(PatternType, creation.resource_pattern_type),  # type: ignore[arg-type]
        creation.principal,
        creation.host,
        _enum(AclOperation, creation.operation),  # type: ignore[arg-type]
        _enum(Permission, creation.permission_type),  # type: ignore[arg-type]
    )


def decide_creations(
    creations: Iterable[Any], existing: Iterable[AclBinding]
) -> tuple[list[CreateAclsResponse.AclCreationResult], list[AclBinding]]:
    """CreateAcls' answer per creation and the bindings to add: an invalid binding is refused
    with INVALID_REQUEST (``binding_problem``), one that exists already (or is asked for twice)
    succeeds without being added again. A single node and a cluster's controller both decide
    here (Kafka's AclControlManager.createAcls)."""
    Result = CreateAclsResponse.AclCreationResult
    known = set(existing)
    results, accepted = [], []
    for creation in creations:
        acl = binding_of(creation)
        problem = binding_problem(acl)
        if problem:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
            continue
        if acl not in known:
            known.add(acl)
            accepted.append(acl)
        results.append(Result(error_code=ErrorCode.NONE, error_message=None))
    return results, accepted


def _acls_refusal(broker: Broker, ctx: RequestContext) -> int | None:
    """SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER on
    the cluster, else None."""
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED
    if not authorize_cluster(broker, ctx, Operation.ALTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def create_acls(broker: Broker, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    refused = _acls_refusal(broker, ctx)
    if refused is not None:
        return create_error(request, ctx.api_version, refused)
    assert broker.authorizer is not None
    results, accepted = decide_creations(request.creations, broker.authorizer.store.acls)
    if accepted:
        broker.authorizer.add(accepted)
    return CreateAclsResponse(results=results)


def describe_acls(broker: Broker, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if broker.authorizer is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED)
    if not authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    flt = _filter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if flt.resource_type == ResourceType.UNKNOWN or flt.pattern_type == PatternType.UNKNOWN:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="Invalid filter")
    matching = [acl for acl in broker.authorizer.store.acls if flt.matches(acl)]
    R = DescribeAclsResponse.DescribeAclsResource

    def key(acl: AclBinding) -> tuple[int, str, int]:
        return (acl.resource_type, acl.resource_name, acl.pattern_type)

    resources = [
        R(
            resource_type=rt,
            resource_name=name,
            pattern_type=pt,
            acls=[
                R.AclDescription(
                    principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission
                )
                for a in group
            ],
        )
        for (rt, name, pt), group in itertools.groupby(sorted(matching, key=key), key=key)
    ]
    return DescribeAclsResponse(error_code=ErrorCode.NONE, resources=resources)


def filter_problem(flt: AclFilter) -> str | None:
    """Why a DeleteAcls filter is refused (Kafka's AclControlManager.validateFilter), or None."""
    if flt.resource_type == ResourceType.UNKNOWN or flt.pattern_type == PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if flt.operation == AclOperation.UNKNOWN or flt.permission == Permission.UNKNOWN:
        return "Unknown entryFilter."
    return None


def decide_deletions(
    filters: Iterable[Any], existing: Iterable[AclBinding]
) -> tuple[list[DeleteAclsResponse.DeleteAclsFilterResult], list[AclBinding]]:
    """DeleteAcls' answer per filter (the existing bindings it matches, or INVALID_REQUEST for a
    filter with unknown values) and the bindings to remove. A single node and a cluster's
    controller both decide here (Kafka's AclControlManager.deleteAcls)."""
    FR = DeleteAclsResponse.DeleteAclsFilterResult
    current = list(existing)
    results, removed = [], []
    for f in filters:
        flt = _filter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        problem = filter_problem(flt)
        if problem:
            results.append(FR(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
            continue
        matching = [acl for acl in current if flt.matches(acl)]
        removed += [acl for acl in matching if acl not in removed]
        results.append(
            FR(
                error_code=ErrorCode.NONE,
                matching_acls=[
                    FR.DeleteAclsMatchingAcl(
                        error_code=ErrorCode.NONE,
                        resource_type=a.resource_type,
                        resource_name=a.resource_name,
                        pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission,
                    )
                    for a in matching
                ],
            )
        )
    return results, removed


def delete_acls(broker: Broker, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    refused = _acls_refusal(broker, ctx)
    if refused is not None:
        return delete_error(request, ctx.api_version, refused)
    assert broker.authorizer is not None
    results, removed = decide_deletions(request.filters, broker.authorizer.store.acls)
    if removed:
        broker.authorizer.store.remove(removed)
    return DeleteAclsResponse(filter_results=results)


def create_error(request: CreateAclsRequest, version: int, code: int) -> CreateAclsResponse:
    message = _DISABLED if code == ErrorCode.SECURITY_DISABLED else None
    return CreateAclsResponse(
        results=[
            CreateAclsResponse.AclCreationResult(error_code=code, error_message=message)
            for _ in request.creations
        ]
    )


def describe_error(request: DescribeAclsRequest, version: int, code: int) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=code)


def delete_error(request: DeleteAclsRequest, version: int, code: int) -> DeleteAclsResponse:
    message = _DISABLED if code == ErrorCode.SECURITY_DISABLED else None
    return DeleteAclsResponse(
        filter_results=[
            DeleteAclsResponse.DeleteAclsFilterResult(error_code=code, error_message=message)
            for _ in request.filters
        ]
    )


async def _forward_create(broker: Broker, ctx: RequestContext, request: CreateAclsRequest) -> Any:
    from reference_broker.cluster.broker_lifecycle import forward_to_controller

    refused = _acls_refusal(broker, ctx)
    if refused is not None:
        return create_error(request, ctx.api_version, refused)
    if not request.creations:
        return CreateAclsResponse(results=[])
    return await forward_to_controller(
        broker, ctx, request, lambda code: create_error(request, ctx.api_version, code)
    )


async def _forward_delete(broker: Broker, ctx: RequestContext, request: DeleteAclsRequest) -> Any:
    from reference_broker.cluster.broker_lifecycle import forward_to_controller

    refused = _acls_refusal(broker, ctx)
    if refused is not None:
        return delete_error(request, ctx.api_version, refused)
    if not request.filters:
        return DeleteAclsResponse(filter_results=[])
    return await forward_to_controller(
        broker, ctx, request, lambda code: delete_error(request, ctx.api_version, code)
    )


def install(registry: HandlerRegistry) -> None:
    create: Any = create_acls
    delete: Any = delete_acls
    if registry.broker is not None and quorum_configured(registry.broker.config.settings):
        create, delete = _forward_create, _forward_delete
    registry.register(CreateAclsRequest.API_KEY, create, error_response=create_error)
    registry.register(DescribeAclsRequest.API_KEY, describe_acls, error_response=describe_error)
    registry.register(DeleteAclsRequest.API_KEY, delete, error_response=delete_error)
