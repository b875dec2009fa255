"""An operations script on ``sdk.AdminClient``: create the topics an application needs, and report
every topic and every consumer group's lag.

    python examples/admin_report.py --bootstrap 127.0.0.1:9092 --create orders:6:retention.ms=86400000
    python examples/admin_report.py --bootstrap 127.0.0.1:9092 [--json]

``--create NAME:PARTITIONS[:config=value,...]`` (repeatable) creates a topic unless it exists
(idempotent, so it can run at every deploy). The report lists each topic with its partition count
and cleanup policy, then each consumer group with, per partition, the committed offset, the end
offset and the lag (end minus committed), the figure an operator watches to see whether consumers
keep up. ``--json`` prints the same as one JSON document for other tools. The ``topicwright``
command-line tool does all of this and more; this script shows the API underneath.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from sdk import AdminClient
from sdk.admin.types import ConfigResource, NewTopic
from sdk.errors import TopicAlreadyExistsError


def parse_topic(spec: str) -> NewTopic:
    """``name:partitions[:key=value,...]`` -> NewTopic."""
    name, _, rest = spec.partition(":")
    partitions, _, configs = rest.partition(":")
    settings = dict(item.split("=", 1) for item in configs.split(",") if item)
    return NewTopic(name, int(partitions) if partitions else -1, -1, topic_configs=settings)


async def create(admin: AdminClient, specs: list[str]) -> None:
    results = await admin.create_topics([parse_topic(spec) for spec in specs])
    for name, error in results.items():
        if error is None:
            print(f"created {name}")
        elif isinstance(error, TopicAlreadyExistsError):
            print(f"{name} exists")
        else:
            raise error


async def report(admin: AdminClient) -> dict[str, Any]:
    topics = await admin.list_topics()
    described = await admin.describe_topics(topics) if topics else {}
    configs = await admin.describe_configs(
        [ConfigResource("topic", name, dict.fromkeys(["cleanup.policy", "retention.ms"])) for name in topics]
    )
    out: dict[str, Any] = {"topics": [], "groups": []}
    for topic in described.values():
        entries = configs[ConfigResource("topic", topic.name)].entries
        out["topics"].append(
            {
                "name": topic.name,
                "partitions": len(topic.partitions),
                "cleanup.policy": entries["cleanup.policy"].value,
                "retention.ms": entries["retention.ms"].value,
            }
        )
    for listing in await admin.list_consumer_groups():
        lags = await admin.consumer_lag(listing.group_id)
        out["groups"].append(
            {
                "group": listing.group_id,
                "state": listing.state,
                "partitions": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "committed": lag.committed,
                        "end": lag.end_offset,
                        "lag": lag.lag,
                    }
                    for tp, lag in sorted(lags.items())
                ],
                "total_lag": sum(lag.lag or 0 for lag in lags.values()),
            }
        )
    return out


def print_table(data: dict[str, Any]) -> None:
    print(f"{'TOPIC':<32} {'PARTITIONS':>10} {'CLEANUP':>14} {'RETENTION.MS':>14}")
    for topic in data["topics"]:
        print(
            f"{topic['name']:<32} {topic['partitions']:>10} {topic['cleanup.policy']:>14} "
            f"{topic['retention.ms']:>14}"
        )
    for group in data["groups"]:
        print(f"\ngroup {group['group']} ({group['state']}), total lag {group['total_lag']}")
        print(f"  {'TOPIC':<28} {'PARTITION':>9} {'COMMITTED':>10} {'END':>10} {'LAG':>8}")
        for row in group["partitions"]:
            print(
                f"  {row['topic']:<28} {row['partition']:>9} {row['committed']!s:>10} "
                f"{row['end']:>10} {row['lag']!s:>8}"
            )


async def run(bootstrap: str, specs: list[str], as_json: bool) -> None:
    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        if specs:
            await create(admin, specs)
        data = await report(admin)
    if as_json:
        print(json.dumps(data, sort_keys=True))
    else:
        print_table(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="host:port of any broker")
    parser.add_argument("--create", action="append", default=[], metavar="NAME:PARTITIONS[:k=v,...]")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    args = parser.parse_args()
    asyncio.run(run(args.bootstrap, args.create, args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
