"""``topicwright produce``: one record per input line (stdin or ``--file``), as
``kafka-console-producer.sh`` and ``kcat -P`` do.

A line is a record's value, or with ``--key-separator`` its key, the separator and its value (a
line without the separator is an error naming its number, as Kafka's console producer refuses
it). ``-H k=v`` headers go on every record. With ``--transactional-id`` every record of the run is
in one transaction, committed at the end of the input and aborted on any failure, so a reader
with ``read_committed`` sees all of the run or none of it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable
from typing import IO, Any

from sdk.cli.common import EXIT_OK, CliError, UsageError, admin_client, existing_partitions, parse_key_value
from sdk.cli.output import Progress, print_json

__all__ = ["register"]

#: Futures of sent records awaited together (bounds what is kept in memory for a long input).
_WINDOW = 1000


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "produce", parents=[common], help="send lines of stdin or a file as records"
    )
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--file", "-f", metavar="PATH", help="read lines from PATH instead of stdin")
    parser.add_argument("--key-separator", "-K", metavar="SEP", help="each line is KEY SEP VALUE")
    parser.add_argument(
        "--header", "-H", action="append", default=[], metavar="KEY=VALUE", help="a header on every record"
    )
    parser.add_argument("--partition", "-p", type=int, help="send every record to this partition")
    parser.add_argument("--acks", choices=["all", "-1", "0", "1"], default="all")
    parser.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    parser.add_argument("--transactional-id", metavar="ID", help="send the whole input as one transaction")
    parser.add_argument("--linger-ms", type=float, default=5, help="how long a batch waits for more records")
    parser.set_defaults(handler=produce)


def _split(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise CliError(f"line {number} has no key separator {separator.decode(errors='replace')!r}")
    return key, value


async def _lines(stream: IO[bytes]) -> Any:
    """The stream's lines without their line ends, read off the event loop (one at a time from
    a terminal, so each is sent as it is typed; in chunks otherwise)."""
    loop = asyncio.get_running_loop()
    interactive = stream.isatty()
    while True:
        if interactive:
            chunk = [await loop.run_in_executor(None, stream.readline)]
            if chunk == [b""]:
                return
        else:
            chunk = await loop.run_in_executor(None, stream.readlines, 1 << 16)
            if not chunk:
                return
        for line in chunk:
            if line.endswith(b"\n"):
                line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            yield line


def _producer_settings(args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    producer_settings = dict(settings)
    producer_settings.update(
        acks=args.acks,
        compression_type=None if args.compression == "none" else args.compression,
        linger_ms=args.linger_ms,
    )
    if args.transactional_id is not None:
        if args.acks not in ("all", "-1"):
            raise UsageError("--transactional-id needs --acks all")
        producer_settings["transactional_id"] = args.transactional_id
    return producer_settings


async def produce(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from sdk.producer import Producer

    headers = [(key, value.encode()) for key, value in (parse_key_value(h, "--header") for h in args.header)]
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise UsageError("--key-separator: must not be empty")
    producer_settings = _producer_settings(args, settings)
    async with admin_client(settings) as admin:
        description = (await admin.describe_topics([args.topic]))[args.topic]
    partitions = existing_partitions(args.topic, description)
    if args.partition is not None and args.partition not in partitions:
        raise UsageError(f"--partition: topic {args.topic!r} has no partition {args.partition}")
    try:
        stream: IO[bytes] = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--file: cannot read {args.file}: {exc.strerror or exc}") from None
    producer = Producer(**producer_settings)
    progress = Progress(f"produced to {args.topic}")
    count = 0
    try:
        await producer.start()
        if args.transactional_id is not None:
            await producer.begin_transaction()
        pending: list[Awaitable[Any]] = []
        number = 0
        async for line in _lines(stream):
            number += 1
            key, value = _split(line, separator, number)
            pending.append(
                await producer.send(args.topic, value, key, args.partition, headers=headers or None)
            )
            if len(pending) >= _WINDOW:
                count += await _settle(pending, args.json, progress)
        count += await _settle(pending, args.json, progress)
        if args.transactional_id is not None:
            await producer.commit_transaction()
    except BaseException:
        # stop() aborts an open transaction, so nothing of a failed transactional run is committed.
        await producer.stop()
        raise
    finally:
        progress.close()
        if stream is not sys.stdin.buffer:
            stream.close()
    await producer.stop()
    committed = " in a committed transaction" if args.transactional_id is not None else ""
    sys.stderr.write(f"Produced {count} records to {args.topic}{committed}.\n")
    return EXIT_OK


async def _settle(pending: list[Awaitable[Any]], as_json: bool, progress: Progress) -> int:
    """Wait for the acknowledgement of every pending record (raising the first failure), print
    their metadata as JSON lines if asked, and empty ``pending``."""
    results = await asyncio.gather(*pending)
    pending.clear()
    if as_json:
        for meta in results:
            print_json(
                {
                    "topic": meta.topic,
                    "partition": meta.partition,
                    "offset": meta.offset,
                    "timestamp": meta.timestamp,
                },
                compact=True,
            )
    progress.advance(len(results))
    return len(results)
