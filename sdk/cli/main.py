"""``topicwright``: the command line, its subcommands and how failures become exit codes.

Each subcommand lives in a module of its own (``sdk.cli.topics``, ``sdk.cli.produce``, ...) that
adds its parser with ``register(subparsers, common)`` and sets ``handler``, an async function
``(args, settings) -> exit code``. Failures the user can act on never show a traceback: a bad
command line or command config exits ``EXIT_USAGE`` (2), an unreachable cluster
``EXIT_UNREACHABLE`` (3), an operation the cluster refused or failed ``EXIT_FAILURE`` (1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from sdk.cli import acls, consume, groups, produce, topics, transactions, users
from sdk.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    add_common_options,
    client_settings,
)
from sdk.errors import ConfigError, KafkaConnectionError, KafkaError, UnsupportedVersionError

__all__ = ["build_parser", "main", "run"]

PROG = "topicwright"
_SUBCOMMANDS = (topics, produce, consume, groups, transactions, acls, users)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kafka from the command line: topics, records, consumer groups, transactions, "
        "ACLs and SCRAM users (Kafka's tools and kcat, on topicwright's SDK).",
        epilog="Exit codes: 0 done, 1 the cluster refused or the operation failed, 2 usage error, "
        "3 no bootstrap server reachable, 130 interrupted.",
    )
    add_common_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    add_common_options(common, suppress=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _SUBCOMMANDS:
        module.register(subparsers, common)
    return parser


def _describe(error: KafkaError) -> str:
    if isinstance(error, UnsupportedVersionError):
        return f"the broker does not support this operation ({error})"
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text and text != name else name


def _report(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")


async def _dispatch(args: argparse.Namespace) -> int:
    settings = client_settings(args)
    code: int = await args.handler(args, settings)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit code (argparse exits 2 by itself on bad syntax)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return asyncio.run(_dispatch(args))
    except CliError as exc:
        _report(str(exc))
        return exc.exit_code
    except ConfigError as exc:
        _report(f"bad setting: {exc}")
        return EXIT_USAGE
    except KafkaConnectionError as exc:
        _report(f"cannot reach the cluster: {exc}")
        return EXIT_UNREACHABLE
    except KafkaError as exc:
        _report(_describe(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): stop quietly; stdout goes to /dev/null so
        # the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())
