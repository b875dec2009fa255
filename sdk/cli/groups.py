"""``topicwright groups``: list, describe (offsets, lag, members), reset offsets and delete
consumer groups, as ``kafka-consumer-groups.sh`` does.

Lag is the partition's log end offset (read_uncommitted, as Kafka's tool reads it) minus the
group's committed offset, for every partition the group committed or a member is assigned.
``reset-offsets`` computes a plan and only shows it unless ``--execute`` is given; like Kafka it
refuses a group with active members, whose consumers would overwrite the new offsets.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from typing import Any

from sdk.admin import OffsetSpec
from sdk.cli.common import (
    EXIT_OK,
    CliError,
    UsageError,
    admin_client,
    existing_partitions,
    raise_item_error,
)
from sdk.cli.output import print_json, print_table
from sdk.client.cluster import TopicPartition
from sdk.errors import GroupIdNotFoundError

__all__ = ["register"]

#: Group states in which no member holds partitions: offsets may be changed from outside.
INACTIVE_STATES = frozenset({"Empty", "Dead"})


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("groups", help="consumer groups: list, describe with lag, reset offsets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="every consumer group")
    listing.add_argument(
        "--state", action="append", default=[], help="only groups in this state (repeatable)"
    )
    listing.set_defaults(handler=list_groups)

    describe = actions.add_parser(
        "describe", parents=[common], help="committed offset, end offset and lag per partition; members"
    )
    describe.add_argument("--group", "-g", required=True)
    describe.set_defaults(handler=describe_group)

    reset = actions.add_parser("reset-offsets", parents=[common], help="move a group's committed offsets")
    reset.add_argument("--group", "-g", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic", "-t", action="append", metavar="TOPIC[:P,P...]", help="a topic, or some of its partitions"
    )
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    target.add_argument(
        "--to-datetime", metavar="WHEN", help="ISO-8601 (e.g. 2026-11-27T10:00:00Z; local time without zone)"
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="apply the plan")
    reset.set_defaults(handler=reset_offsets)

    delete = actions.add_parser("delete", parents=[common], help="delete empty groups and their offsets")
    delete.add_argument("--group", "-g", action="append", required=True, help="a group (repeatable)")
    delete.set_defaults(handler=delete_groups)


async def list_groups(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        listings = await admin.list_consumer_groups(states=args.state or None)
    listings = sorted(listings, key=lambda g: g.group_id)
    if args.json:
        print_json(
            [
                {
                    "group": g.group_id,
                    "state": g.state,
                    "type": g.group_type,
                    "protocol_type": g.protocol_type,
                }
                for g in listings
            ]
        )
    else:
        print_table(
            ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"],
            [[g.group_id, g.state, g.group_type, g.protocol_type or None] for g in listings],
        )
    return EXIT_OK


async def _describe(admin: Any, group: str) -> Any:
    description = (await admin.describe_consumer_groups([group]))[group]
    if isinstance(description.error, GroupIdNotFoundError):
        raise CliError(f"consumer group {group!r} does not exist")
    raise_item_error(description.error, f"consumer group {group!r}")
    return description


async def describe_group(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    group = args.group
    async with admin_client(settings) as admin:
        description = await _describe(admin, group)
        committed = await admin.list_consumer_group_offsets(group)
        owners = {tp: member for member in description.members for tp in member.assignment}
        tps = sorted(set(committed) | set(owners))
        if not tps and not description.members and description.state == "Dead":
            raise CliError(f"consumer group {group!r} does not exist")
        ends = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest())) if tps else {}
    rows = []
    for tp in tps:
        end = ends[tp]
        raise_item_error(end.error, f"end offset of {tp.topic}-{tp.partition}")
        offset = committed[tp].offset if tp in committed else None
        member = owners.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed_offset": offset,
                "end_offset": end.offset,
                "lag": None if offset is None else end.offset - offset,
                "consumer_id": None if member is None else member.member_id,
                "host": None if member is None else member.host,
                "client_id": None if member is None else member.client_id,
            }
        )
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "assignment": [[tp.topic, tp.partition] for tp in sorted(m.assignment)],
        }
        for m in sorted(description.members, key=lambda m: m.member_id)
    ]
    if args.json:
        print_json(
            {
                "group": group,
                "state": description.state,
                "protocol_type": description.protocol_type,
                "assignor": description.partition_assignor,
                "coordinator": description.coordinator,
                "partitions": rows,
                "members": members,
            }
        )
        return EXIT_OK
    print(
        f"Group: {group}  State: {description.state}  Coordinator: {description.coordinator}"
        f"  Assignor: {description.partition_assignor or '-'}  Members: {len(members)}"
    )
    print()
    print_table(
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        [[group, *row.values()] for row in rows],
    )
    if members:
        print()
        print_table(
            ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [
                [
                    m["member_id"],
                    m["group_instance_id"],
                    m["host"],
                    m["client_id"],
                    len(m["assignment"]),
                    ",".join(f"{t}-{p}" for t, p in m["assignment"]) or None,
                ]
                for m in members
            ],
        )
    return EXIT_OK


# -- reset-offsets ------------------------------------------------------------------------------

_TOPIC_PARTITIONS = re.compile(r"^(?P<topic>[^:]+)(?::(?P<partitions>\d+(?:,\d+)*))?$")


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date-time (local time without a zone, as
    Kafka's tool reads it), or of a plain integer of milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime: expected ISO-8601 such as 2026-11-27T10:00:00Z, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as Kafka's tool takes a date-time without zone
    return int(moment.timestamp() * 1000)


async def _scope(
    admin: Any, args: argparse.Namespace, committed: dict[TopicPartition, Any]
) -> list[TopicPartition]:
    if args.all_topics:
        if not committed:
            raise CliError(
                f"consumer group {args.group!r} has no committed offsets to reset (name a --topic)"
            )
        return sorted(committed)
    chosen: list[TopicPartition] = []
    for item in args.topic:
        match = _TOPIC_PARTITIONS.match(item)
        if match is None:
            raise UsageError(f"--topic: expected TOPIC or TOPIC:P,P..., got {item!r}")
        topic = match.group("topic")
        description = (await admin.describe_topics([topic]))[topic]
        existing = existing_partitions(topic, description)
        wanted = (
            [int(p) for p in match.group("partitions").split(",")] if match.group("partitions") else existing
        )
        for partition in wanted:
            if partition not in existing:
                raise UsageError(f"--topic: topic {topic!r} has no partition {partition}")
        chosen += [TopicPartition(topic, p) for p in wanted]
    return sorted(set(chosen))


async def _offsets(admin: Any, tps: list[TopicPartition], spec: OffsetSpec) -> dict[TopicPartition, int]:
    answers = await admin.list_offsets(dict.fromkeys(tps, spec))
    for tp in tps:
        raise_item_error(answers[tp].error, f"offsets of {tp.topic}-{tp.partition}")
    return {tp: answers[tp].offset for tp in tps}


async def _plan(
    admin: Any, args: argparse.Namespace, tps: list[TopicPartition], current: dict[TopicPartition, int | None]
) -> dict[TopicPartition, int]:
    """The new offset of each partition, within [earliest, latest] as Kafka's tool clamps it."""
    earliest = await _offsets(admin, tps, OffsetSpec.earliest())
    latest = await _offsets(admin, tps, OffsetSpec.latest())
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest

    def clamp(tp: TopicPartition, offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in tps}
    if args.shift_by is not None:
        plan = {}
        for tp in tps:
            offset = current[tp]
            if offset is None:
                raise CliError(
                    f"cannot shift the offset of {tp.topic}-{tp.partition}: "
                    "the group has no committed offset there"
                )
            plan[tp] = clamp(tp, offset + args.shift_by)
        return plan
    timestamp = parse_datetime(args.to_datetime)
    found = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.for_timestamp(timestamp)))
    plan = {}
    for tp in tps:
        raise_item_error(found[tp].error, f"offsets of {tp.topic}-{tp.partition}")
        # No record at or after the time: the end, as Kafka's tool does.
        plan[tp] = latest[tp] if found[tp].offset < 0 else found[tp].offset
    return plan


async def reset_offsets(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    group = args.group
    async with admin_client(settings) as admin:
        description = (await admin.describe_consumer_groups([group]))[group]
        if not isinstance(description.error, GroupIdNotFoundError):
            raise_item_error(description.error, f"consumer group {group!r}")
            if description.state not in INACTIVE_STATES:
                raise CliError(
                    f"assignments can only be reset if the group {group!r} is inactive, "
                    f"but the current state is {description.state}; stop its consumers first"
                )
        committed = await admin.list_consumer_group_offsets(group)
        tps = await _scope(admin, args, committed)
        current = {tp: committed[tp].offset if tp in committed else None for tp in tps}
        plan = await _plan(admin, args, tps, current)
        if args.execute:
            errors = await admin.alter_consumer_group_offsets(group, plan)
            for tp in tps:
                raise_item_error(errors[tp], f"committing the offset of {tp.topic}-{tp.partition}")
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "current_offset": current[tp], "new_offset": plan[tp]}
        for tp in tps
    ]
    if args.json:
        print_json({"group": group, "executed": bool(args.execute), "partitions": rows})
    else:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
            [[group, *row.values()] for row in rows],
        )
    if not args.execute:
        sys.stderr.write("Dry run: nothing was changed (add --execute to apply this plan).\n")
    return EXIT_OK


async def delete_groups(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        answers = await admin.delete_consumer_groups(args.group)
    for group in args.group:
        if isinstance(answers[group], GroupIdNotFoundError):
            raise CliError(f"consumer group {group!r} does not exist")
        raise_item_error(answers[group], f"deleting consumer group {group!r}")
    if args.json:
        print_json({"deleted": args.group})
    else:
        for group in args.group:
            print(f"Deleted consumer group {group}.")
    return EXIT_OK
