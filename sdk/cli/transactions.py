"""``topicwright transactions``: list, describe, describe-producers, find-hanging and abort, as
``kafka-transactions.sh`` does (KIP-664).

A transaction is hanging when a partition has it open (DescribeProducers shows a start offset)
for longer than the longest transaction timeout (``--max-transaction-timeout``, minutes) and its
transaction coordinator will never finish it there: no transactional id has the producer id, or
the id's current transaction does not hold the partition. Such a transaction holds back the last
stable offset, so ``read_committed`` readers stop at it until ``abort`` writes its ABORT marker.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from sdk.admin import AbortTransactionSpec
from sdk.cli.common import (
    EXIT_OK,
    CliError,
    UsageError,
    admin_client,
    existing_partitions,
    raise_item_error,
)
from sdk.cli.output import Progress, print_json, print_table
from sdk.client.cluster import TopicPartition
from sdk.errors import TransactionalIdNotFoundError, UnknownTopicOrPartitionError

__all__ = ["register"]

#: Kafka's tool asks for the producers of at most this many partitions per request.
_BATCH = 500


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("transactions", help="list, describe, find hanging and abort transactions")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="transactional ids and their states")
    listing.add_argument("--state", action="append", default=[], help="only this state (repeatable)")
    listing.set_defaults(handler=list_transactions)

    describe = actions.add_parser("describe", parents=[common], help="one transactional id's transaction")
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(handler=describe_transaction)

    producers = actions.add_parser(
        "describe-producers", parents=[common], help="the producers a partition's leader knows"
    )
    producers.add_argument("--topic", "-t", required=True)
    producers.add_argument("--partition", "-p", type=int, required=True)
    producers.set_defaults(handler=describe_producers)

    hanging = actions.add_parser(
        "find-hanging", parents=[common], help="open transactions nobody will finish"
    )
    hanging.add_argument("--topic", "-t", help="search this topic")
    hanging.add_argument("--partition", "-p", type=int, help="only this partition (needs --topic)")
    hanging.add_argument("--broker-id", type=int, help="search the partitions this broker holds")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=float,
        default=15,
        metavar="MINUTES",
        help="only transactions open longer than this "
        "(default 15, Kafka's default transaction.max.timeout.ms)",
    )
    hanging.set_defaults(handler=find_hanging)

    abort = actions.add_parser("abort", parents=[common], help="abort a hanging transaction on one partition")
    abort.add_argument("--topic", "-t", required=True)
    abort.add_argument("--partition", "-p", type=int, required=True)
    abort.add_argument(
        "--start-offset", type=int, help="the transaction's first offset (find-hanging shows it)"
    )
    abort.add_argument("--producer-id", type=int, help="instead of --start-offset: the producer id ...")
    abort.add_argument("--producer-epoch", type=int, help="... its epoch ...")
    abort.add_argument("--coordinator-epoch", type=int, help="... and the coordinator epoch (-1 as 0)")
    abort.set_defaults(handler=abort_transaction)


async def list_transactions(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with admin_client(settings) as admin:
        listings = await admin.list_transactions(states=args.state or None)
    if args.json:
        print_json(
            [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
                for t in listings
            ]
        )
    else:
        print_table(
            ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
            [[t.transactional_id, t.producer_id, t.state] for t in listings],
        )
    return EXIT_OK


async def describe_transaction(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    tid = args.transactional_id
    async with admin_client(settings) as admin:
        txn = (await admin.describe_transactions([tid]))[tid]
    if isinstance(txn.error, TransactionalIdNotFoundError):
        raise CliError(f"transactional id {tid!r} does not exist")
    raise_item_error(txn.error, f"transactional id {tid!r}")
    now_ms = int(time.time() * 1000)
    document = {
        "transactional_id": tid,
        "coordinator": txn.coordinator,
        "state": txn.state,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "timeout_ms": txn.timeout_ms,
        "start_time_ms": txn.start_time_ms,
        "duration_ms": None if txn.start_time_ms is None else now_ms - txn.start_time_ms,
        "partitions": [[tp.topic, tp.partition] for tp in sorted(txn.partitions)],
    }
    if args.json:
        print_json(document)
    else:
        print_table(
            [
                "COORDINATOR",
                "TRANSACTIONAL-ID",
                "PRODUCER-ID",
                "PRODUCER-EPOCH",
                "STATE",
                "TIMEOUT-MS",
                "START-TIME-MS",
                "DURATION-MS",
                "PARTITIONS",
            ],
            [
                [
                    txn.coordinator,
                    tid,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.state,
                    txn.timeout_ms,
                    txn.start_time_ms,
                    document["duration_ms"],
                    ",".join(f"{t}-{p}" for t, p in document["partitions"]) or None,
                ]
            ],
        )
    return EXIT_OK


async def _producers(
    admin: Any, tps: list[TopicPartition], progress: Progress | None = None
) -> dict[TopicPartition, Any]:
    result = {}
    for start in range(0, len(tps), _BATCH):
        batch = tps[start : start + _BATCH]
        answers = await admin.describe_producers(batch)
        for tp in batch:
            if isinstance(answers[tp].error, UnknownTopicOrPartitionError):
                raise CliError(f"topic {tp.topic!r} has no partition {tp.partition}")
            raise_item_error(answers[tp].error, f"producers of {tp.topic}-{tp.partition}")
            result[tp] = answers[tp].active_producers
        if progress is not None:
            progress.advance(len(batch))
    return result


async def describe_producers(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    tp = TopicPartition(args.topic, args.partition)
    async with admin_client(settings) as admin:
        states = (await _producers(admin, [tp]))[tp]
    rows = [_producer_row(tp, state) for state in states]
    _print_producers(args, rows, _PRODUCER_COLUMNS)
    return EXIT_OK


def _producer_row(tp: TopicPartition, state: Any, now_ms: int | None = None) -> dict[str, Any]:
    row = {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "coordinator_epoch": -1 if state.coordinator_epoch is None else state.coordinator_epoch,
        "last_sequence": state.last_sequence,
        "last_timestamp": state.last_timestamp,
        "start_offset": -1
        if state.current_transaction_start_offset is None
        else state.current_transaction_start_offset,
    }
    if now_ms is not None:
        row["duration_min"] = (now_ms - state.last_timestamp) // 60000
    return row


#: Columns of a producer row; find-hanging adds how long the transaction has been open.
_PRODUCER_COLUMNS = [
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "coordinator_epoch",
    "last_sequence",
    "last_timestamp",
    "start_offset",
]


def _print_producers(args: argparse.Namespace, rows: list[dict[str, Any]], columns: list[str]) -> None:
    if args.json:
        print_json(rows)
        return
    print_table([c.upper().replace("_", "-") for c in columns], [[row[c] for c in columns] for row in rows])


async def _search_scope(admin: Any, args: argparse.Namespace) -> list[TopicPartition]:
    if args.topic is None and args.broker_id is None:
        raise UsageError("find-hanging needs --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    topics = [args.topic] if args.topic is not None else await admin.list_topics(include_internal=True)
    descriptions = await admin.describe_topics(topics)
    tps = []
    for topic in topics:
        description = descriptions[topic]
        existing_partitions(topic, description)
        tps += [
            TopicPartition(topic, p.partition)
            for p in description.partitions
            if args.broker_id is None or args.broker_id in p.replicas
        ]
    return tps


async def find_hanging(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    if args.max_transaction_timeout < 0:
        raise UsageError("--max-transaction-timeout: must be >= 0")
    max_open_ms = args.max_transaction_timeout * 60000
    async with admin_client(settings) as admin:
        tps = await _search_scope(admin, args)
        progress = Progress("partitions searched", len(tps))
        try:
            producers = await _producers(admin, tps, progress)
        finally:
            progress.close()
        now_ms = int(time.time() * 1000)
        candidates = [
            (tp, state)
            for tp, states in producers.items()
            for state in states
            if state.current_transaction_start_offset is not None
            and now_ms - state.last_timestamp > max_open_ms
        ]
        hanging = []
        if candidates:
            producer_ids = sorted({state.producer_id for _, state in candidates})
            listings = await admin.list_transactions(producer_ids=producer_ids)
            ids = {t.producer_id: t.transactional_id for t in listings if t.producer_id in producer_ids}
            descriptions = await admin.describe_transactions(sorted(set(ids.values()))) if ids else {}
            for tp, state in candidates:
                tid = ids.get(state.producer_id)
                txn = None if tid is None else descriptions[tid]
                if txn is not None and isinstance(txn.error, TransactionalIdNotFoundError):
                    txn = None
                if txn is not None:
                    raise_item_error(txn.error, f"transactional id {tid!r}")
                # The coordinator still writes markers to the partitions its transaction holds.
                if txn is None or tp not in txn.partitions:
                    hanging.append(_producer_row(tp, state, now_ms))
    _print_producers(args, hanging, [*_PRODUCER_COLUMNS, "duration_min"])
    return EXIT_OK


async def abort_transaction(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    tp = TopicPartition(args.topic, args.partition)
    by_ids = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is None and args.producer_id is None:
        raise UsageError(
            "abort needs --start-offset, or --producer-id with --producer-epoch and --coordinator-epoch"
        )
    if args.start_offset is not None and any(v is not None for v in by_ids):
        raise UsageError("give --start-offset or the producer ids, not both")
    async with admin_client(settings) as admin:
        if args.start_offset is not None:
            states = (await _producers(admin, [tp]))[tp]
            match = [s for s in states if s.current_transaction_start_offset == args.start_offset]
            if not match:
                raise CliError(
                    f"no open transaction starts at offset {args.start_offset} of {tp.topic}-{tp.partition} "
                    "(transactions describe-producers shows the open ones)"
                )
            state = match[0]
            producer_id, producer_epoch = state.producer_id, state.producer_epoch
            coordinator_epoch = state.coordinator_epoch or 0
        else:
            if args.producer_epoch is None or args.coordinator_epoch is None:
                raise UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
            producer_id, producer_epoch = args.producer_id, args.producer_epoch
            # A transaction begun by a new producer id has no coordinator epoch yet (-1): 0, as Kafka's tool.
            coordinator_epoch = max(0, args.coordinator_epoch)
        try:
            spec = AbortTransactionSpec(tp, producer_id, producer_epoch, coordinator_epoch)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        await admin.abort_transaction(spec)
    document = {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "coordinator_epoch": coordinator_epoch,
        "aborted": True,
    }
    if args.json:
        print_json(document)
    else:
        print(
            f"Aborted producer {producer_id}'s (epoch {producer_epoch}) transaction"
            f" on {tp.topic}-{tp.partition}."
        )
    return EXIT_OK
