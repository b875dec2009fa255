"""Kafka's ACL model (resource type, pattern, principal, host, operation, permission) and the
durable ACL store.

The enums are the wire protocol's (``sdk.protocol.acl``), named here ``ResourceType``,
``PatternType``, ``Operation`` and ``Permission``. ``AclFilter`` is the filter of DescribeAcls and
DeleteAcls: ANY and null match everything, MATCH matches the bindings that would apply to the
named resource (literal with the same name or ``*``, prefixes of it). A single broker's store is
one JSON file in the data directory, replaced atomically on every change; a cluster node's store
follows the metadata log instead (``use_metadata_log``), which is then its durable copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

# The broker's names of the shared wire enums.
from sdk.protocol.acl import AclOperation as Operation
from sdk.protocol.acl import AclPermissionType as Permission
from sdk.protocol.acl import AclResourceType as ResourceType
from sdk.protocol.acl import PatternType

WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"


@dataclasses.dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding applies to the resource (its pattern covers ``name``)."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AclBinding:
        return cls(
            ResourceType[data["resource_type"]],
            data["resource_name"],
            PatternType[data["pattern_type"]],
            data["principal"],
            data["host"],
            Operation[data["operation"]],
            Permission[data["permission"]],
        )


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filter; None fields match anything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Operation.ANY and acl.operation != self.operation:
            return False
        return self.permission == Permission.ANY or acl.permission == self.permission

    def _pattern_matches(self, acl: AclBinding) -> bool:
        pattern, name = self.pattern_type, self.resource_name
        if pattern == PatternType.ANY:
            return name is None or acl.resource_name == name
        if pattern == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return name.startswith(acl.resource_name)
        return acl.pattern_type == pattern and (name is None or acl.resource_name == name)


def binding_problem(acl: AclBinding) -> str | None:
    """Why CreateAcls refuses ``acl`` (Kafka's INVALID_REQUEST cases), or None."""
    if acl.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return f"Invalid resource type {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {acl.pattern_type.name}"
    if acl.operation in (Operation.ANY, Operation.UNKNOWN):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission in (Permission.ANY, Permission.UNKNOWN):
        return f"Invalid permission type {acl.permission.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return (
            f"Could not parse principal from `{acl.principal}` (no colon is found separating the"
            " principal type from the principal name)"
        )
    if not acl.host:
        return "Invalid host"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    return None


class AclStore:
    """The ACLs, kept in ``<data dir>/.security/acls.json`` (``path`` None: kept in memory only,
    as a cluster node's copy of the metadata image's ACLs)."""

    def __init__(self, data_dir: Path | None):
        self.path: Path | None = None if data_dir is None else data_dir / ".security" / "acls.json"
        self.acls: list[AclBinding] = []
        if self.path is not None and self.path.exists():
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self.acls = [AclBinding.from_json(item) for item in raw]

    def add(self, bindings: list[AclBinding]) -> None:
        for acl in bindings:
            if acl not in self.acls:
                self.acls.append(acl)
        self._save()

    def remove(self, bindings: list[AclBinding]) -> None:
        gone = set(bindings)
        self.acls = [acl for acl in self.acls if acl not in gone]
        self._save()

    def use_metadata_log(self) -> None:
        """From now on the ACLs are the metadata image's (``replace``): the data dir's file, a
        single node's store, is neither read nor written."""
        self.path = None
        self.acls = []

    def replace(self, bindings: list[AclBinding]) -> None:
        """Every ACL at once (a cluster node publishing its metadata image's ACLs)."""
        self.acls = list(bindings)
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump([acl.to_json() for acl in self.acls], out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
