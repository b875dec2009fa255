"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SCRAM credential
store (``reference_broker.security.scram``), with Kafka's per-user errors: DESCRIBE / ALTER on the
cluster (CLUSTER_AUTHORIZATION_FAILED), a user named twice (DUPLICATE_RESOURCE), an unknown user
(RESOURCE_NOT_FOUND), an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), an empty name or too few
or too many iterations (UNACCEPTABLE_CREDENTIAL).

In cluster mode (``controller.quorum.voters`` set) a broker checks ALTER and forwards
AlterUserScramCredentials to the active controller (``controller/scram_control.py``), which
decides it with ``decide_alterations`` against the committed credentials and writes
UserScramCredentialRecord / RemoveUserScramCredentialRecord; every node's credential store holds
its metadata image's credentials, which DescribeUserScramCredentials and SASL/SCRAM logins read.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reference_broker.config import quorum_configured
from reference_broker.handlers.auth import Operation, authorize_cluster
from reference_broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
)
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def describe(
    broker: Broker, ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not authorize_cluster(broker, ctx, Operation.DESCRIBE):
        return describe_error(request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    store = broker.scram_credentials
    assert store is not None, "broker not started"
    users = store.users()
    wanted = sorted(users) if not request.users else [u.name for u in request.users]
    counts = collections.Counter(wanted)
    results = []
    for name in dict.fromkeys(wanted):
        if counts[name] > 1:
            results.append(
                DescribeResult(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice in a"
                    f" single request: {name}",
                )
            )
        elif name not in users:
            results.append(
                DescribeResult(
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
        else:
            results.append(
                DescribeResult(
                    user=name,
                    error_code=ErrorCode.NONE,
                    credential_infos=[
                        DescribeResult.CredentialInfo(
                            mechanism=MECHANISM_TYPES[mech], iterations=cred.iterations
                        )
                        for mech, cred in sorted(users[name].items())
                    ],
                )
            )
    return DescribeUserScramCredentialsResponse(error_code=ErrorCode.NONE, results=results)


#: (user, mechanism name, credential) to set and (user, mechanism name) to delete
Upserts = list[tuple[str, str, ScramCredential]]
Deletions = list[tuple[str, str]]


def decide_alterations(
    request: AlterUserScramCredentialsRequest,
    current: Callable[[str, str], ScramCredential | None],
) -> tuple[list[Any], Upserts, Deletions]:
    """AlterUserScramCredentials' answer per user and the changes to make, given ``current``
    (user, mechanism name) -> the credential held. A user with any refused alteration changes
    nothing. A single node and a cluster's controller both decide here (Kafka's
    ScramControlManager.alterCredentials)."""
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    counts = collections.Counter(names)
    errors: dict[str, tuple[int, str]] = {}
    deletions: Deletions = []
    upserts: Upserts = []
    for d in request.deletions:
        mechanism = MECHANISMS.get(d.mechanism)
        if counts[d.name] > 1:
            errors[d.name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        elif not d.name:
            errors[d.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif current(d.name, mechanism[0]) is None:
            errors[d.name] = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            deletions.append((d.name, mechanism[0]))
    for u in request.upsertions:
        mechanism = MECHANISMS.get(u.mechanism)
        if counts[u.name] > 1:
            errors[u.name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        elif not u.name:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u.iterations < MIN_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        else:
            credential = ScramCredential.from_salted_password(
                mechanism[1], bytes(u.salt), bytes(u.salted_password), u.iterations
            )
            upserts.append((u.name, mechanism[0], credential))
    deletions = [d for d in deletions if d[0] not in errors]
    upserts = [u for u in upserts if u[0] not in errors]
    results = [
        AlterResult(
            user=name, error_code=errors.get(name, (0, None))[0], error_message=errors.get(name, (0, None))[1]
        )
        for name in dict.fromkeys(names)
    ]
    return results, upserts, deletions


def alter(
    broker: Broker, ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    if not authorize_cluster(broker, ctx, Operation.ALTER):
        return alter_error(request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    store = broker.scram_credentials
    assert store is not None, "broker not started"
    results, upserts, deletions = decide_alterations(request, store.get)
    if deletions or upserts:
        store.apply(upserts, deletions)
    return AlterUserScramCredentialsResponse(results=results)


async def _forward_alter(
    broker: Broker, ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> Any:
    from reference_broker.cluster.broker_lifecycle import forward_to_controller

    if not authorize_cluster(broker, ctx, Operation.ALTER):
        return alter_error(request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if not request.deletions and not request.upsertions:
        return AlterUserScramCredentialsResponse(results=[])
    return await forward_to_controller(
        broker, ctx, request, lambda code: alter_error(request, ctx.api_version, code)
    )


def describe_error(
    request: DescribeUserScramCredentialsRequest, version: int, code: int
) -> DescribeUserScramCredentialsResponse:
    return DescribeUserScramCredentialsResponse(
        error_code=code, results=[DescribeResult(user=u.name, error_code=code) for u in request.users or []]
    )


def alter_error(
    request: AlterUserScramCredentialsRequest, version: int, code: int
) -> AlterUserScramCredentialsResponse:
    names = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(results=[AlterResult(user=n, error_code=code) for n in names])


def install(registry: HandlerRegistry) -> None:
    registry.register(DescribeUserScramCredentialsRequest.API_KEY, describe, error_response=describe_error)
    handle: Any = alter
    if registry.broker is not None and quorum_configured(registry.broker.config.settings):
        handle = _forward_alter
    registry.register(AlterUserScramCredentialsRequest.API_KEY, handle, error_response=alter_error)
