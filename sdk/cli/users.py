"""``topicwright users``: SCRAM credentials (``kafka-configs.sh --entity-type users`` with
``SCRAM-SHA-256``/``SCRAM-SHA-512``): describe, set (the password is salted and hashed in this
process; only the salted hash is sent) and delete."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sdk.admin import (
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from sdk.cli.common import EXIT_OK, CliError, UsageError, admin_client, raise_item_error
from sdk.cli.output import print_json, print_table
from sdk.errors import ResourceNotFoundError

__all__ = ["register"]

_MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("users", help="SCRAM credentials: describe, alter, delete")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    describe = actions.add_parser("describe", parents=[common], help="users' SCRAM mechanisms and iterations")
    describe.add_argument("--user", "-u", action="append", help="a user (repeatable); default all")
    describe.set_defaults(handler=describe_users)

    alter = actions.add_parser("alter", parents=[common], help="set a user's SCRAM credential")
    alter.add_argument("--user", "-u", required=True)
    alter.add_argument("--mechanism", required=True, choices=_MECHANISMS, type=str.upper)
    secret = alter.add_mutually_exclusive_group(required=True)
    secret.add_argument(
        "--password", help="the password (visible to other local users: prefer --password-stdin)"
    )
    secret.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    alter.add_argument("--iterations", type=int, default=4096, help="4096..16384 (default 4096)")
    alter.set_defaults(handler=alter_user)

    delete = actions.add_parser("delete", parents=[common], help="delete a user's SCRAM credential")
    delete.add_argument("--user", "-u", required=True)
    delete.add_argument("--mechanism", required=True, choices=_MECHANISMS, type=str.upper)
    delete.set_defaults(handler=delete_user)


async def describe_users(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        answers = await admin.describe_user_scram_credentials(args.user)
    rows = []
    for user in sorted(answers):
        credentials = answers[user]
        if isinstance(credentials.error, ResourceNotFoundError):
            raise CliError(f"user {user!r} has no SCRAM credentials")
        raise_item_error(credentials.error, f"user {user!r}")
        for info in sorted(credentials.credentials, key=lambda i: i.mechanism):
            rows.append(
                {
                    "user": user,
                    "mechanism": info.mechanism.name.replace("_", "-"),
                    "iterations": info.iterations,
                }
            )
    if args.json:
        print_json(rows)
    else:
        print_table(["USER", "MECHANISM", "ITERATIONS"], [list(r.values()) for r in rows])
    return EXIT_OK


async def alter_user(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    password = args.password
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    try:
        upsertion = UserScramCredentialUpsertion(
            args.user, ScramMechanism[args.mechanism.replace("-", "_")], password, iterations=args.iterations
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    async with admin_client(settings) as admin:
        error = (await admin.alter_user_scram_credentials([upsertion]))[args.user]
    raise_item_error(error, f"setting {args.user!r}'s {args.mechanism} credential")
    _done(
        args,
        {"user": args.user, "mechanism": args.mechanism, "iterations": args.iterations, "altered": True},
        f"Set {args.user}'s {args.mechanism} credential ({args.iterations} iterations).",
    )
    return EXIT_OK


async def delete_user(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    deletion = UserScramCredentialDeletion(args.user, ScramMechanism[args.mechanism.replace("-", "_")])
    async with admin_client(settings) as admin:
        error = (await admin.alter_user_scram_credentials([deletion]))[args.user]
    if isinstance(error, ResourceNotFoundError):
        raise CliError(f"user {args.user!r} has no {args.mechanism} credential")
    raise_item_error(error, f"deleting {args.user!r}'s {args.mechanism} credential")
    _done(
        args,
        {"user": args.user, "mechanism": args.mechanism, "deleted": True},
        f"Deleted {args.user}'s {args.mechanism} credential.",
    )
    return EXIT_OK


def _done(args: argparse.Namespace, document: dict[str, Any], text: str) -> None:
    if args.json:
        print_json(document)
    else:
        print(text)
