"""The ``topicwright`` command-line tool (also ``python -m sdk.cli``): topics, produce, consume,
consumer groups, transactions, ACLs and SCRAM users, built on ``sdk.AdminClient``,
``sdk.Producer`` and ``sdk.Consumer``. ``sdk.cli.main`` has the parser and the exit codes; each
subcommand is a module of its own."""

from sdk.cli.main import main

__all__ = ["main"]
