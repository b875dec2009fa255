"""A worker with static group membership: restarted within its session timeout (a deploy, a pod
moved), it gets its partitions back without a rebalance of the others.

    python examples/static_member_worker.py --bootstrap 127.0.0.1:9092 --instance worker-1
    python examples/static_member_worker.py     # starts an embedded reference broker

Each worker gives the group its ``--instance`` as ``group_instance_id`` (KIP-345). A static member
does not leave the group when it stops: the coordinator keeps its partitions for
``session_timeout_ms`` (here 30 s), and a process that comes back with the same instance id takes
them over at the same generation; the other members see nothing. Only if it stays away longer is
it removed and its partitions rebalanced. Two running processes with the same instance id are a
configuration error: the older one is fenced (``FencedInstanceIdError``).

The worker counts the records of each partition it owns and commits automatically. It prints
``assigned generation=<g> partitions=[...]`` on every assignment and ``processed <n>`` as it goes;
SIGTERM or SIGINT stops it (without leaving the group).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections import Counter
from collections.abc import Set

from sdk import Consumer, ConsumerRebalanceListener, TopicPartition

TASKS, GROUP = "tasks", "static-workers"


class ShowAssignment(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def on_partitions_assigned(self, assigned: Set[TopicPartition]) -> None:
        generation = self.consumer.group_metadata().generation_id
        mine = sorted(tp.partition for tp in self.consumer.assignment())
        print(f"assigned generation={generation} partitions={mine}", flush=True)

    def on_partitions_revoked(self, revoked: Set[TopicPartition]) -> None:
        print(f"revoked partitions={sorted(tp.partition for tp in revoked)}", flush=True)


async def work(bootstrap: str, instance: str, session_timeout_ms: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    processed: Counter[int] = Counter()
    async with Consumer(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        group_instance_id=instance,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=1000,
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.subscribe([TASKS], listener=ShowAssignment(consumer))
        print(f"running as {instance}", flush=True)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                processed[tp.partition] += len(records)
            if batches:
                print(f"processed {sum(processed.values())}", flush=True)
    print("stopped; the group keeps this member's partitions until its session times out", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port; without it an embedded broker is started")
    parser.add_argument("--instance", default="worker-1", help="the static member's group_instance_id")
    parser.add_argument("--session-timeout-ms", type=int, default=30_000)
    args = parser.parse_args()
    if args.bootstrap:
        asyncio.run(work(args.bootstrap, args.instance, args.session_timeout_ms))
        return 0
    from reference_broker.testing import BrokerProcess

    with BrokerProcess(config={"num.partitions": 4}) as broker:
        print(f"embedded reference broker on {broker.bootstrap}; Ctrl-C to stop", flush=True)
        asyncio.run(work(broker.bootstrap, args.instance, args.session_timeout_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
