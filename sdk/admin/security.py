"""ACLs (CreateAcls, DescribeAcls, DeleteAcls: any broker, which forwards to the controller) and
SCRAM credentials (DescribeUserScramCredentials to any broker, AlterUserScramCredentials to the
controller). Kafka's enums by their Java names; the salted password of a new SCRAM credential is
computed here (RFC 5802's Hi, which is PBKDF2 with the mechanism's HMAC), as Java's admin does, so
the password itself never leaves the client."""

from __future__ import annotations

import enum
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from sdk.admin.routing import AdminRouter, Deadline, call_once, run_per_item
from sdk.errors import KafkaError, make_error
from sdk.protocol.acl import AclOperation, AclPermissionType, AclResourceType, PatternType
from sdk.protocol.messages import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
)

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclResourceType",
    "DeletedAcls",
    "PatternType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentials",
]


_SPECIFIC = "is a filter value; an ACL binding names one"


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` ("User:alice") from ``host`` ("*" for any) is allowed or denied
    ``operation`` on the resources ``name`` matches (literally or as a prefix)."""

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        for field_name, enum_type in (
            ("resource_type", AclResourceType),
            ("pattern_type", PatternType),
            ("operation", AclOperation),
            ("permission_type", AclPermissionType),
        ):
            try:
                value = enum_type(getattr(self, field_name))
            except ValueError:
                raise ValueError(
                    f"{field_name}: {getattr(self, field_name)!r} is not a {enum_type.__name__}"
                ) from None
            object.__setattr__(self, field_name, value)
            if value in (0, 1) or (field_name == "pattern_type" and value == PatternType.MATCH):
                raise ValueError(f"{field_name}: {value.name} {_SPECIFIC}")
        for field_name in ("name", "principal", "host"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{field_name}: must be a non-empty str, not {value!r}")


@dataclass(frozen=True)
class AclBindingFilter:
    """Which ACLs to describe or delete: ANY / None match every value of a field; MATCH
    patterns match the ACLs (literal, prefixed or wildcard) that apply to ``name``."""

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        for field_name, enum_type in (
            ("resource_type", AclResourceType),
            ("pattern_type", PatternType),
            ("operation", AclOperation),
            ("permission_type", AclPermissionType),
        ):
            try:
                object.__setattr__(self, field_name, enum_type(getattr(self, field_name)))
            except ValueError:
                raise ValueError(
                    f"{field_name}: {getattr(self, field_name)!r} is not a {enum_type.__name__}"
                ) from None


@dataclass(frozen=True)
class DeletedAcls:
    """The ACLs one filter deleted, or the filter's error."""

    acls: tuple[AclBinding, ...] = ()
    error: KafkaError | None = None


class ScramMechanism(enum.IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


_HASHES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}
#: Kafka refuses fewer iterations (ScramMechanism.minIterations) and more than 16384.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class UserScramCredentials:
    credentials: tuple[ScramCredentialInfo, ...] = ()
    error: KafkaError | None = None


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for ``mechanism`` from ``password`` (salted and hashed here;
    a random salt unless one is given)."""

    user: str
    mechanism: ScramMechanism
    password: str
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = None

    def __post_init__(self) -> None:
        _check_user(self.user)
        object.__setattr__(self, "mechanism", _mechanism(self.mechanism))
        if not isinstance(self.password, str) or not self.password:
            raise ValueError("password: must be a non-empty str")
        if not isinstance(self.iterations, int) or not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise ValueError(
                f"iterations: must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {self.iterations!r}"
            )
        if self.salt is not None and (not isinstance(self.salt, bytes) or not self.salt):
            raise ValueError("salt: must be non-empty bytes")

    def salted_password(self, salt: bytes) -> bytes:
        """RFC 5802's SaltedPassword = Hi(password, salt, iterations)."""
        return hashlib.pbkdf2_hmac(_HASHES[self.mechanism], self.password.encode(), salt, self.iterations)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: ScramMechanism

    def __post_init__(self) -> None:
        _check_user(self.user)
        object.__setattr__(self, "mechanism", _mechanism(self.mechanism))


def _check_user(user: object) -> None:
    if not isinstance(user, str) or not user:
        raise ValueError(f"user: must be a non-empty str, not {user!r}")


def _mechanism(value: object) -> ScramMechanism:
    try:
        mechanism = (
            ScramMechanism[value.upper().replace("-", "_")]
            if isinstance(value, str)
            else ScramMechanism(value)  # type: ignore[arg-type]  # checked: ValueError below
        )
    except (KeyError, ValueError):
        raise ValueError(f"mechanism: {value!r} is not SCRAM-SHA-256 or SCRAM-SHA-512") from None
    if mechanism == ScramMechanism.UNKNOWN:
        raise ValueError("mechanism: UNKNOWN is not a mechanism")
    return mechanism


# -- ACLs ---------------------------------------------------------------------------------------


def _error(code: int, message: str | None, what: str) -> KafkaError | None:
    return make_error(code, f"{what}: {message}" if message else what) if code else None


async def create_acls(
    router: AdminRouter, acls: Sequence[AclBinding], deadline: Deadline
) -> dict[AclBinding, KafkaError | None]:
    async def send(node: int, batch: list[AclBinding]) -> dict[AclBinding, KafkaError | None]:
        request = CreateAclsRequest(
            creations=[
                CreateAclsRequest.AclCreation(
                    resource_type=int(a.resource_type),
                    resource_name=a.name,
                    resource_pattern_type=int(a.pattern_type),
                    principal=a.principal,
                    host=a.host,
                    operation=int(a.operation),
                    permission_type=int(a.permission_type),
                )
                for a in batch
            ]
        )
        response, _ = await router.send(node, CreateAclsRequest.API_KEY, lambda _v: request, deadline)
        return {
            acl: _error(r.error_code, r.error_message, f"ACL {acl}")
            for acl, r in zip(batch, response.results, strict=True)
        }

    return await run_per_item(router, acls, deadline, route=lambda _acl: router.any_node(), send=send)


def _binding(resource_type: int, name: str, pattern: int, acl: object) -> AclBinding:
    return AclBinding(
        AclResourceType(resource_type),
        name,
        PatternType(pattern),
        acl.principal,  # type: ignore[attr-defined]  # DescribeAcls / DeleteAcls entries
        acl.host,  # type: ignore[attr-defined]
        AclOperation(acl.operation),  # type: ignore[attr-defined]
        AclPermissionType(acl.permission_type),  # type: ignore[attr-defined]
    )


async def describe_acls(
    router: AdminRouter, acl_filter: AclBindingFilter, deadline: Deadline
) -> list[AclBinding]:
    request = DescribeAclsRequest(
        resource_type_filter=int(acl_filter.resource_type),
        resource_name_filter=acl_filter.name,
        pattern_type_filter=int(acl_filter.pattern_type),
        principal_filter=acl_filter.principal,
        host_filter=acl_filter.host,
        operation=int(acl_filter.operation),
        permission_type=int(acl_filter.permission_type),
    )

    async def send(node: int) -> list[AclBinding]:
        response, _ = await router.send(node, DescribeAclsRequest.API_KEY, lambda _v: request, deadline)
        if response.error_code:
            raise make_error(response.error_code, response.error_message or "DescribeAcls")
        return [
            _binding(r.resource_type, r.resource_name, r.pattern_type, acl)
            for r in response.resources
            for acl in r.acls
        ]

    return await call_once(router, deadline, route=router.any_node, send=send)


async def delete_acls(
    router: AdminRouter, filters: Sequence[AclBindingFilter], deadline: Deadline
) -> dict[AclBindingFilter, DeletedAcls]:
    async def send(
        node: int, batch: list[AclBindingFilter]
    ) -> dict[AclBindingFilter, DeletedAcls | KafkaError]:
        request = DeleteAclsRequest(
            filters=[
                DeleteAclsRequest.DeleteAclsFilter(
                    resource_type_filter=int(f.resource_type),
                    resource_name_filter=f.name,
                    pattern_type_filter=int(f.pattern_type),
                    principal_filter=f.principal,
                    host_filter=f.host,
                    operation=int(f.operation),
                    permission_type=int(f.permission_type),
                )
                for f in batch
            ]
        )
        response, _ = await router.send(node, DeleteAclsRequest.API_KEY, lambda _v: request, deadline)
        answers: dict[AclBindingFilter, DeletedAcls | KafkaError] = {}
        for acl_filter, result in zip(batch, response.filter_results, strict=True):
            error = _error(result.error_code, result.error_message, "DeleteAcls")
            if error is not None:
                answers[acl_filter] = error
                continue
            answers[acl_filter] = DeletedAcls(
                tuple(
                    _binding(m.resource_type, m.resource_name, m.pattern_type, m)
                    for m in result.matching_acls
                )
            )
        return answers

    answers = await run_per_item(router, filters, deadline, route=lambda _f: router.any_node(), send=send)
    return {f: a if isinstance(a, DeletedAcls) else DeletedAcls(error=a) for f, a in answers.items()}


# -- SCRAM credentials ----------------------------------------------------------------------------


async def describe_scram(
    router: AdminRouter, users: Sequence[str] | None, deadline: Deadline
) -> dict[str, UserScramCredentials]:
    R = DescribeUserScramCredentialsRequest

    async def send(node: int) -> dict[str, UserScramCredentials]:
        request = R(users=None if users is None else [R.UserName(name=u) for u in users])
        response, _ = await router.send(node, R.API_KEY, lambda _v: request, deadline)
        if response.error_code:
            raise make_error(response.error_code, response.error_message or "DescribeUserScramCredentials")
        answers = {}
        for r in response.results:
            error = _error(r.error_code, r.error_message, f"user {r.user!r}")
            infos = tuple(
                ScramCredentialInfo(ScramMechanism(c.mechanism), c.iterations) for c in r.credential_infos
            )
            answers[r.user] = UserScramCredentials(() if error else infos, error)
        return answers

    return await call_once(router, deadline, route=router.any_node, send=send)


async def alter_scram(
    router: AdminRouter,
    alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
    deadline: Deadline,
) -> dict[str, KafkaError | None]:
    R = AlterUserScramCredentialsRequest
    upsertions = []
    deletions = []
    for alteration in alterations:
        if isinstance(alteration, UserScramCredentialUpsertion):
            salt = alteration.salt or os.urandom(32)
            upsertions.append(
                R.ScramCredentialUpsertion(
                    name=alteration.user,
                    mechanism=int(alteration.mechanism),
                    iterations=alteration.iterations,
                    salt=salt,
                    salted_password=alteration.salted_password(salt),
                )
            )
        else:
            deletions.append(
                R.ScramCredentialDeletion(name=alteration.user, mechanism=int(alteration.mechanism))
            )
    users = list(dict.fromkeys(a.user for a in alterations))

    async def send(node: int, batch: list[str]) -> dict[str, KafkaError | None]:
        wanted = set(batch)
        request = R(
            upsertions=[u for u in upsertions if u.name in wanted],
            deletions=[d for d in deletions if d.name in wanted],
        )
        response, _ = await router.send(node, R.API_KEY, lambda _v: request, deadline)
        return {r.user: _error(r.error_code, r.error_message, f"user {r.user!r}") for r in response.results}

    return await run_per_item(
        router,
        users,
        deadline,
        route=lambda _u: router.controller(deadline),
        send=send,
        reroute=lambda _u: router.forget_controller(),
    )
