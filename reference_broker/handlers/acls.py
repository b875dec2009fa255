"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): the authorizer's ACL store.

Without an authorizer Kafka answers SECURITY_DISABLED; with one, each needs ALTER (create,
delete) or DESCRIBE (describe) on the cluster, else CLUSTER_AUTHORIZATION_FAILED. Bindings are
checked as Kafka's AclControlManager checks them (INVALID_REQUEST with its message) and kept
durably (``reference_broker.security.acl.AclStore``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

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


def create_acls(broker: Broker, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    Result = CreateAclsResponse.AclCreationResult
    if broker.authorizer is None:
        return create_error(request, ctx.api_version, ErrorCode.SECURITY_DISABLED)
    if not authorize_cluster(broker, ctx, Operation.ALTER):
        return create_error(request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results, accepted = [], []
    for c in request.creations:
        acl = AclBinding(
            _enum(ResourceType, c.resource_type),  # type: ignore[arg-type]
            c.resource_name,
            _enum(PatternType, c.resource_pattern_type),  # type: ignore[arg-type]
            c.principal,
            c.host,
            _enum(AclOperation, c.operation),  # type: ignore[arg-type]
            _enum(Permission, c.permission_type),  # type: ignore[arg-type]
        )
        problem = binding_problem(acl)
        if problem:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
        else:
            accepted.append(acl)
            results.append(Result(error_code=ErrorCode.NONE, error_message=None))
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


def delete_acls(broker: Broker, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    if broker.authorizer is None:
        return delete_error(request, ctx.api_version, ErrorCode.SECURITY_DISABLED)
    if not authorize_cluster(broker, ctx, Operation.ALTER):
        return delete_error(request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    FR = DeleteAclsResponse.DeleteAclsFilterResult
    results, removed = [], []
    for f in request.filters:
        flt = _filter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        matching = [acl for acl in broker.authorizer.store.acls if flt.matches(acl)]
        removed += matching
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


def install(registry: HandlerRegistry) -> None:
    registry.register(CreateAclsRequest.API_KEY, create_acls, error_response=create_error)
    registry.register(DescribeAclsRequest.API_KEY, describe_acls, error_response=describe_error)
    registry.register(DeleteAclsRequest.API_KEY, delete_acls, error_response=delete_error)
