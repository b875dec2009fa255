"""``topicwright topics``: list, describe, create, delete, add partitions and alter configs (the
work of ``kafka-topics.sh`` and ``kafka-configs.sh --entity-type topics``)."""

from __future__ import annotations

import argparse
from typing import Any

from sdk.admin import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
)
from sdk.cli.common import EXIT_OK, CliError, UsageError, admin_client, parse_key_value, raise_item_error
from sdk.cli.output import print_json, print_table
from sdk.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

__all__ = ["register"]

#: DescribeConfigs' config_source of a topic's own override.
DYNAMIC_TOPIC_CONFIG = 1


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("topics", help="list, describe, create, delete and configure topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="topic names")
    listing.add_argument("--include-internal", action="store_true", help="also __consumer_offsets, ...")
    listing.set_defaults(handler=list_topics)

    describe = actions.add_parser(
        "describe", parents=[common], help="partitions, leaders, replicas, ISR and config overrides"
    )
    describe.add_argument(
        "--topic", "-t", action="append", default=[], help="a topic (repeatable); default all"
    )
    describe.set_defaults(handler=describe_topics)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("--topic", "-t", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1, help="default: the broker's")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    create.set_defaults(handler=create_topic)

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("--topic", "-t", action="append", required=True, help="a topic (repeatable)")
    delete.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    delete.set_defaults(handler=delete_topics)

    grow = actions.add_parser("add-partitions", parents=[common], help="grow a topic to N partitions")
    grow.add_argument("--topic", "-t", required=True)
    grow.add_argument("--partitions", type=int, required=True, help="the new total")
    grow.set_defaults(handler=add_partitions)

    alter = actions.add_parser("alter-configs", parents=[common], help="set or delete config overrides")
    alter.add_argument("--topic", "-t", required=True)
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY", help="back to the default")
    alter.set_defaults(handler=alter_configs)


async def list_topics(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        names = await admin.list_topics(include_internal=args.include_internal)
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return EXIT_OK


async def describe_topics(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        names = args.topic or await admin.list_topics()
        descriptions = await admin.describe_topics(names)
        for name in names:
            error = descriptions[name].error
            if isinstance(error, UnknownTopicOrPartitionError):
                raise CliError(f"topic {name!r} does not exist")
            raise_item_error(error, f"topic {name!r}")
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        configs = await admin.describe_configs(resources) if resources else {}
    documents = []
    for name, resource in zip(names, resources, strict=True):
        description = descriptions[name]
        overrides = {
            key: entry.value
            for key, entry in sorted(configs[resource].entries.items())
            if entry.source == DYNAMIC_TOPIC_CONFIG
        }
        documents.append(
            {
                "topic": name,
                "topic_id": None if description.topic_id is None else str(description.topic_id),
                "internal": description.is_internal,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                    }
                    for p in description.partitions
                ],
                "configs": overrides,
            }
        )
    if args.json:
        print_json(documents)
        return EXIT_OK
    for index, document in enumerate(documents):
        if index:
            print()
        partitions = document["partitions"]
        replication = len(partitions[0]["replicas"]) if partitions else 0
        configs_text = ",".join(f"{k}={v}" for k, v in document["configs"].items()) or "-"
        print(
            f"Topic: {document['topic']}  TopicId: {document['topic_id']}  PartitionCount: {len(partitions)}"
            f"  ReplicationFactor: {replication}  Configs: {configs_text}"
        )
        print_table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR"],
            [
                [p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"]))]
                for p in partitions
            ],
        )
    return EXIT_OK


async def create_topic(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    configs = dict(parse_key_value(item, "--config") for item in args.config)
    try:
        topic = NewTopic(args.topic, args.partitions, args.replication_factor, topic_configs=configs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    async with admin_client(settings) as admin:
        error = (await admin.create_topics([topic]))[args.topic]
    if isinstance(error, TopicAlreadyExistsError) and args.if_not_exists:
        error = None
    elif isinstance(error, TopicAlreadyExistsError):
        raise CliError(f"topic {args.topic!r} already exists")
    raise_item_error(error, f"creating topic {args.topic!r}")
    _done(args, {"topic": args.topic, "created": True}, f"Created topic {args.topic}.")
    return EXIT_OK


async def delete_topics(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        answers = await admin.delete_topics(args.topic)
    for name in args.topic:
        error = answers[name]
        if isinstance(error, UnknownTopicOrPartitionError):
            if args.if_exists:
                continue
            raise CliError(f"topic {name!r} does not exist")
        raise_item_error(error, f"deleting topic {name!r}")
    _done(args, {"deleted": args.topic}, "".join(f"Deleted topic {name}.\n" for name in args.topic).rstrip())
    return EXIT_OK


async def add_partitions(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    try:
        spec = NewPartitions(args.partitions)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    async with admin_client(settings) as admin:
        error = (await admin.create_partitions({args.topic: spec}))[args.topic]
    if isinstance(error, UnknownTopicOrPartitionError):
        raise CliError(f"topic {args.topic!r} does not exist")
    raise_item_error(error, f"adding partitions to {args.topic!r}")
    _done(
        args,
        {"topic": args.topic, "partitions": args.partitions},
        f"Topic {args.topic} has {args.partitions} partitions.",
    )
    return EXIT_OK


async def alter_configs(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    if not args.set and not args.delete:
        raise UsageError("alter-configs: give --set KEY=VALUE and/or --delete KEY")
    ops = [AlterConfigOp(*parse_key_value(item, "--set")) for item in args.set]
    ops += [AlterConfigOp(key, None, AlterConfigOpType.DELETE) for key in args.delete]
    resource = ConfigResource(ConfigResourceType.TOPIC, args.topic)
    async with admin_client(settings) as admin:
        error = (await admin.incremental_alter_configs({resource: ops}))[resource]
    if isinstance(error, UnknownTopicOrPartitionError):
        raise CliError(f"topic {args.topic!r} does not exist")
    raise_item_error(error, f"altering the configs of {args.topic!r}")
    _done(
        args,
        {
            "topic": args.topic,
            "set": dict(parse_key_value(i, "--set") for i in args.set),
            "deleted": args.delete,
        },
        f"Altered the configs of topic {args.topic}.",
    )
    return EXIT_OK


def _done(args: argparse.Namespace, document: dict[str, Any], text: str) -> None:
    if args.json:
        print_json(document)
    else:
        print(text)
