"""``topicwright consume``: print records, as ``kafka-console-consumer.sh`` and ``kcat -C`` do.

Partitions come from a consumer group (``--group``: its committed offsets, else
``--from-beginning`` or the end; positions are committed when the run ends) or are chosen by hand
(every partition of the topic, or ``--partition``), starting at the end, the beginning, or
``--offset``. The run ends after ``--max-messages`` records, after ``--timeout-ms`` without one,
at the end of every partition with ``--exit-at-end``, or at Ctrl-C. Output: the value per line,
``--print-key`` for key, separator, value, or ``--json`` for one object per record with its
topic, partition, offset, timestamp, key, value and headers.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sdk.cli.common import EXIT_OK, UsageError, admin_client, existing_partitions
from sdk.cli.output import bytes_field, print_json
from sdk.client.cluster import TopicPartition

__all__ = ["register"]

#: How long one poll waits for records before the end conditions are checked again.
_POLL_MS = 200


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("consume", parents=[common], help="print records of a topic")
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--group", "-g", help="consume as a member of this consumer group")
    parser.add_argument(
        "--partition", "-p", type=int, action="append", help="only this partition (repeatable)"
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument(
        "--offset", "-o", type=int, metavar="N", help="start at offset N (assigned partitions)"
    )
    parser.add_argument(
        "--isolation", choices=["read_uncommitted", "read_committed"], default="read_uncommitted"
    )
    parser.add_argument("--max-messages", "-c", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--timeout-ms", type=int, metavar="MS", help="stop after MS without a record")
    parser.add_argument(
        "--exit-at-end", "-e", action="store_true", help="stop once every partition is read to its end"
    )
    parser.add_argument("--print-key", action="store_true", help="print KEY<separator>VALUE")
    parser.add_argument("--key-separator", default="\t", metavar="SEP", help="between key and value (tab)")
    # --command-config may carry consumer properties (group.protocol, group.remote.assignor).
    parser.set_defaults(handler=consume, builds_consumer=True)


def _check(args: argparse.Namespace) -> None:
    if args.group is not None and args.partition:
        raise UsageError("--partition cannot be used with --group (the group assigns partitions)")
    if args.group is not None and args.offset is not None:
        raise UsageError("--offset cannot be used with --group (use groups reset-offsets)")
    if args.offset is not None and args.offset < 0:
        raise UsageError("--offset: must be >= 0")
    for name in ("max_messages", "timeout_ms"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')}: must be > 0")


def _record_document(record: Any) -> dict[str, Any]:
    key, key_encoding = bytes_field(record.key)
    value, value_encoding = bytes_field(record.value)
    document: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": "LogAppendTime" if record.timestamp_type == 1 else "CreateTime",
        "key": key,
        "value": value,
        "headers": [],
    }
    if key_encoding:
        document["key_encoding"] = key_encoding
    if value_encoding:
        document["value_encoding"] = value_encoding
    for header_key, header_value in record.headers or ():
        text, encoding = bytes_field(header_value)
        header = {"key": header_key, "value": text}
        if encoding:
            header["value_encoding"] = encoding
        document["headers"].append(header)
    return document


def _write_record(args: argparse.Namespace, record: Any) -> None:
    if args.json:
        print_json(_record_document(record), compact=True)
        return
    out = sys.stdout.buffer
    value = b"null" if record.value is None else bytes(record.value)
    if args.print_key:
        key = b"null" if record.key is None else bytes(record.key)
        out.write(key + args.key_separator.encode() + value + b"\n")
    else:
        out.write(value + b"\n")


async def _partitions(args: argparse.Namespace, settings: dict[str, Any]) -> list[TopicPartition]:
    """The topic's partitions to read (all, or those of ``--partition``); CliError if the topic
    or a partition does not exist."""
    async with admin_client(settings) as admin:
        description = (await admin.describe_topics([args.topic]))[args.topic]
    existing = existing_partitions(args.topic, description)
    wanted = args.partition or existing
    for partition in wanted:
        if partition not in existing:
            raise UsageError(f"--partition: topic {args.topic!r} has no partition {partition}")
    return [TopicPartition(args.topic, p) for p in wanted]


async def _at_end(consumer: Any) -> bool:
    """Whether every assigned partition's position is at its end (the last stable offset under
    read_committed); False while nothing is assigned yet."""
    assigned = sorted(consumer.assignment())
    if not assigned:
        return False
    ends = await consumer.end_offsets(assigned)
    for tp in assigned:
        if await consumer.position(tp) < ends[tp]:
            return False
    return True


async def consume(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from sdk.consumer import Consumer

    _check(args)
    partitions = await _partitions(args, settings)
    consumer = Consumer(
        **settings,
        group_id=args.group,
        isolation_level=args.isolation,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None,
    )
    await consumer.start()
    count = 0
    try:
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(partitions)
            if args.from_beginning:
                await consumer.seek_to_beginning()
            elif args.offset is not None:
                for tp in partitions:
                    consumer.seek(tp, args.offset)
            else:
                await consumer.seek_to_end()
        idle_since = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            remaining = None if args.max_messages is None else args.max_messages - count
            batches = await consumer.getmany(timeout_ms=_POLL_MS, max_records=remaining)
            records = sorted(
                (r for batch in batches.values() for r in batch), key=lambda r: (r.partition, r.offset)
            )
            for record in records:
                _write_record(args, record)
            if records:
                sys.stdout.flush()
                count += len(records)
                idle_since = time.monotonic()
                continue
            if args.exit_at_end and await _at_end(consumer):
                break
            if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                break
        if args.group is not None:
            await consumer.commit()
    finally:
        await consumer.stop()
    sys.stderr.write(f"Consumed {count} records.\n")
    return EXIT_OK
