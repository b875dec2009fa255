"""A consumer-protocol (KIP-848) group member run as its own process, so a test can kill it.

It subscribes to ``--topic`` in ``--group`` with ``group_protocol="consumer"`` and prints its
assignment as a JSON line (``{"assigned": [partitions]}``) every time it changes, polling until
it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sdk import Consumer


async def run(args: argparse.Namespace) -> None:
    consumer = Consumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    shown: list[int] | None = None
    while True:
        await consumer.getmany(timeout_ms=100)
        assigned = sorted(tp.partition for tp in consumer.assignment())
        if assigned != shown:
            shown = assigned
            print(json.dumps({"assigned": assigned}), flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
