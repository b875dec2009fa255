"""``topicwright acls``: list, create and delete ACLs (``kafka-acls.sh``'s work), named by
Kafka's enum names in any case (``--operation read``, ``--resource-type topic``).

The broker needs an authorizer; one without answers SECURITY_DISABLED, and one without the ACL
APIs at all UNSUPPORTED_VERSION, both reported as failures (exit 1).
"""

from __future__ import annotations

import argparse
import enum
from typing import Any, TypeVar

from sdk.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from sdk.cli.common import EXIT_OK, UsageError, admin_client, raise_item_error
from sdk.cli.output import print_json, print_table

__all__ = ["register"]

E = TypeVar("E", bound=enum.IntEnum)


def _names(enum_type: type[enum.IntEnum], *, specific: bool) -> list[str]:
    skip = {"UNKNOWN", "ANY", "MATCH"} if specific else {"UNKNOWN"}
    return [member.name.lower() for member in enum_type if member.name not in skip]


def _enum(enum_type: type[E], text: str | None, option: str, default: E) -> E:
    if text is None:
        return default
    try:
        return enum_type[text.upper().replace("-", "_")]
    except KeyError:
        raise UsageError(f"{option}: unknown value {text!r}") from None


def _add_fields(parser: argparse.ArgumentParser, *, specific: bool) -> None:
    """The fields of a binding (``specific``: every one needed) or of a filter (all optional)."""
    parser.add_argument(
        "--resource-type",
        required=specific,
        choices=_names(AclResourceType, specific=specific),
        type=str.lower,
    )
    parser.add_argument("--resource-name", required=specific, help="a name, a prefix, or * for all")
    parser.add_argument(
        "--pattern-type",
        default="literal" if specific else None,
        choices=_names(PatternType, specific=specific),
        type=str.lower,
    )
    parser.add_argument("--principal", required=specific, help="e.g. User:alice")
    parser.add_argument("--host", default="*" if specific else None, help="default * (any host)")
    parser.add_argument(
        "--operation", required=specific, choices=_names(AclOperation, specific=specific), type=str.lower
    )
    parser.add_argument(
        "--permission",
        default="allow" if specific else None,
        choices=_names(AclPermissionType, specific=specific),
        type=str.lower,
    )


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("acls", help="list, create and delete ACLs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", parents=[common], help="ACLs matching the given fields (all if none)"
    )
    _add_fields(listing, specific=False)
    listing.set_defaults(handler=list_acls)
    create = actions.add_parser("create", parents=[common], help="add one ACL")
    _add_fields(create, specific=True)
    create.set_defaults(handler=create_acl)
    delete = actions.add_parser("delete", parents=[common], help="delete the ACLs matching the given fields")
    _add_fields(delete, specific=False)
    delete.set_defaults(handler=delete_acls)


def _filter(args: argparse.Namespace) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(AclResourceType, args.resource_type, "--resource-type", AclResourceType.ANY),
        args.resource_name,
        _enum(PatternType, args.pattern_type, "--pattern-type", PatternType.ANY),
        args.principal,
        args.host,
        _enum(AclOperation, args.operation, "--operation", AclOperation.ANY),
        _enum(AclPermissionType, args.permission, "--permission", AclPermissionType.ANY),
    )


def _document(binding: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": binding.resource_type.name,
        "resource_name": binding.name,
        "pattern_type": binding.pattern_type.name,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation.name,
        "permission": binding.permission_type.name,
    }


def _print(args: argparse.Namespace, bindings: list[AclBinding]) -> None:
    documents = [_document(b) for b in bindings]
    if args.json:
        print_json(documents)
        return
    print_table(
        ["RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        [list(d.values()) for d in documents],
    )


async def list_acls(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    acl_filter = _filter(args)
    async with admin_client(settings) as admin:
        bindings = await admin.describe_acls(acl_filter)
    _print(args, sorted(bindings, key=lambda b: tuple(map(str, _document(b).values()))))
    return EXIT_OK


async def create_acl(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    try:
        binding = AclBinding(
            _enum(AclResourceType, args.resource_type, "--resource-type", AclResourceType.UNKNOWN),
            args.resource_name,
            _enum(PatternType, args.pattern_type, "--pattern-type", PatternType.LITERAL),
            args.principal,
            args.host,
            _enum(AclOperation, args.operation, "--operation", AclOperation.UNKNOWN),
            _enum(AclPermissionType, args.permission, "--permission", AclPermissionType.ALLOW),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    async with admin_client(settings) as admin:
        error = (await admin.create_acls([binding]))[binding]
    raise_item_error(error, "creating the ACL")
    _print(args, [binding])
    return EXIT_OK


async def delete_acls(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    fields = (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "host",
        "operation",
        "permission",
    )
    if all(getattr(args, name) is None for name in fields):
        raise UsageError("acls delete: give at least one field to match (deleting every ACL is not offered)")
    acl_filter = _filter(args)
    async with admin_client(settings) as admin:
        deleted = (await admin.delete_acls([acl_filter]))[acl_filter]
    raise_item_error(deleted.error, "deleting ACLs")
    _print(args, list(deleted.acls))
    return EXIT_OK
