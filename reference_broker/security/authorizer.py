"""The one place authorization is decided (Kafka's StandardAuthorizer rules).

For a principal, client host, operation and resource:

1. a super user (``super.users``) is allowed everything;
2. any DENY binding that applies (resource pattern covers it, principal equal or ``User:*``,
   host equal or ``*``, operation equal or ALL) denies: deny wins;
3. an ALLOW binding that applies allows; its operation may also imply the one asked for:
   READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
4. with no binding at all on the resource, ``allow.everyone.if.no.acl.found`` decides (false by
   default, as in Kafka); otherwise the request is denied.

A cluster node's authorizer holds its metadata image's ACLs; until that image has caught up at
start (``ready`` False) it allows super users only, so a restarted node never answers from a
partial set of ACLs (Kafka's StandardAuthorizer before its initial load completes).

A broker without ``authorizer.class.name`` has no ``Authorizer`` (``broker.authorizer`` is None)
and allows everything; handlers translate each API's needs into ``authorize`` calls (see
``reference_broker.handlers.auth``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from reference_broker.security.acl import (
    AclBinding,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

log = logging.getLogger("reference_broker.security")

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
_IMPLIED_BY = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
#: The operations DescribeGroups/Metadata report per resource type (Kafka's ``authorizedOperations``).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ,
        Operation.DELETE,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class Authorizer:
    def __init__(self, store: AclStore, super_users: frozenset[str], allow_if_no_acl: bool):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        #: False while the ACLs are still being loaded: only super users are allowed.
        self._ready = True
        self._loaded: Callable[[], bool] = lambda: True

    def load_from(self, loaded: Callable[[], bool]) -> None:
        """Allow super users only until ``loaded()`` first holds (the store then holds every ACL
        committed when the node started); asked at each decision, so the load completes without
        waiting for another change to publish."""
        self._ready = False
        self._loaded = loaded

    @property
    def ready(self) -> bool:
        if not self._ready and self._loaded():
            self._ready = True
            log.info("ACLs loaded: the authorizer decides for every principal")
        return self._ready

    @classmethod
    def open(cls, data_dir: Path, *, super_users: frozenset[str], allow_if_no_acl: bool) -> Authorizer:
        return cls(AclStore(data_dir), super_users, allow_if_no_acl)

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        if not self.ready:
            return False
        allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
        found = False
        allowed = False
        for acl in self.store.acls:
            if not acl.matches_resource(resource_type, name):
                continue
            found = True
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD_HOST):
                continue
            if acl.permission == Permission.DENY:
                if acl.operation in (operation, Operation.ALL):
                    return False
            elif acl.operation == Operation.ALL or acl.operation in allowing:
                allowed = True
        if not found:
            return self.allow_if_no_acl
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type could be allowed (Kafka's ``authorizeByResourceType``:
        an allow binding for it with no deny binding covering every such resource)."""
        if principal in self.super_users:
            return True
        if not self.ready:
            return False
        allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
        relevant = [
            acl
            for acl in self.store.acls
            if acl.resource_type == resource_type
            and acl.principal in (principal, WILDCARD_PRINCIPAL)
            and acl.host in (host, WILDCARD_HOST)
        ]
        denies_all = any(
            acl.permission == Permission.DENY
            and acl.operation in (operation, Operation.ALL)
            and acl.pattern_type == PatternType.LITERAL
            and acl.resource_name == WILDCARD
            for acl in relevant
        )
        if denies_all:
            return False
        return any(
            acl.permission == Permission.ALLOW
            and (acl.operation == Operation.ALL or acl.operation in allowing)
            for acl in relevant
        )

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bit field of operations allowed on the resource (DescribeGroups, Metadata)."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    def add(self, bindings: Iterable[AclBinding]) -> None:
        self.store.add(list(bindings))
