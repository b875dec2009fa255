"""Group rebalance time: how long a group takes to be stable again after a third member joins.

Two members of a group share a topic of ``--partitions`` partitions and keep polling; then a third
member starts, and the clock runs from its start until the three members' assignments are again
disjoint, cover every partition and leave nobody empty. Our ``sdk.Consumer`` members (one event
loop) and confluent-kafka's (one polling thread each) run in turns against the same reference
broker, with the same settings (session timeout 10 s, heartbeat interval 500 ms: the existing
members learn of the rebalance from a heartbeat), for the eager ``range`` and the incremental
``cooperative-sticky`` assignors. Prints the medians of ``--runs`` runs and the ratio
confluent-kafka's time / ours (above 1: our group settles sooner).

    python benchmarks/bench_group.py                        # range and cooperative-sticky, 5 runs
    python benchmarks/bench_group.py --runs 3 --strategies range
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable

from reference_broker.testing import BrokerProcess

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import in_turns

SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 500
POLL_S = 0.05
SETTLE_TIMEOUT_S = 60.0
CLIENTS = ["sdk", "confluent-kafka"]
STRATEGIES = ["range", "cooperative-sticky"]


def settled(assignments: list[set[int]], partitions: int) -> bool:
    """Every member has partitions, none twice, all of them handed out."""
    if any(not a for a in assignments):
        return False
    together = set().union(*assignments)
    return len(together) == partitions == sum(len(a) for a in assignments)


async def _sdk_rebalance(bootstrap: str, topic: str, partitions: int, strategy: str) -> float:
    from sdk.consumer import Consumer

    group = f"bench-{uuid.uuid4().hex[:8]}"
    members: list[Consumer] = []
    stop = asyncio.Event()

    async def member() -> None:
        consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            partition_assignment_strategy=strategy,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        await consumer.start()
        members.append(consumer)
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                await consumer.getmany(timeout_ms=int(POLL_S * 1000))
        finally:
            await consumer.stop()

    async def wait_settled(count: int) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not (
            len(members) == count
            and settled([{tp.partition for tp in m.assignment()} for m in members], partitions)
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} sdk members did not settle")
            await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(member()) for _ in range(2)]
    try:
        await wait_settled(2)
        started = time.perf_counter()
        tasks.append(asyncio.create_task(member()))
        await wait_settled(3)
        return time.perf_counter() - started
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


def _confluent_rebalance(bootstrap: str, topic: str, partitions: int, strategy: str) -> float:
    import confluent_kafka

    group = f"bench-{uuid.uuid4().hex[:8]}"
    lock = threading.Lock()
    assignments: list[set[int]] = []
    stop = threading.Event()

    def member(slot: int) -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                consumer.poll(POLL_S)
                owned = {tp.partition for tp in consumer.assignment()}
                with lock:
                    assignments[slot] = owned
        finally:
            consumer.close()

    def start_member() -> threading.Thread:
        with lock:
            assignments.append(set())
            slot = len(assignments) - 1
        thread = threading.Thread(target=member, args=(slot,), daemon=True)
        thread.start()
        return thread

    def wait_settled(count: int) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            with lock:
                done = len(assignments) == count and settled([set(a) for a in assignments], partitions)
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} confluent-kafka members did not settle")
            time.sleep(0.005)

    threads = [start_member() for _ in range(2)]
    try:
        wait_settled(2)
        started = time.perf_counter()
        threads.append(start_member())
        wait_settled(3)
        return time.perf_counter() - started
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def measure(client: str, bootstrap: str, topic: str, partitions: int, strategy: str) -> float:
    if client == "sdk":
        return asyncio.run(_sdk_rebalance(bootstrap, topic, partitions, strategy))
    return _confluent_rebalance(bootstrap, topic, partitions, strategy)


def create_topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    return topic


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]

    times: dict[tuple[str, str], list[float]] = {}
    with BrokerProcess(log_level="WARNING") as broker:
        topic = create_topic(broker.bootstrap, args.partitions)
        for strategy in strategies:
            turns = in_turns(args.runs, CLIENTS, measure, broker.bootstrap, topic, args.partitions, strategy)
            for client in CLIENTS:
                times[(strategy, client)] = turns[client]

    median: Callable[[list[float]], float] = statistics.median
    print(
        f"Third member joins a group of 2 on {args.partitions} partitions; seconds until stable "
        f"(median of {args.runs}), reference broker"
    )
    print("| strategy | client | median s | min s | max s | confluent / sdk |")
    print("|---|---|---|---|---|---|")
    for strategy in strategies:
        ours = median(times[(strategy, "sdk")])
        for client in CLIENTS:
            runs = times[(strategy, client)]
            ratio = median(times[(strategy, "confluent-kafka")]) / ours if ours else float("nan")
            print(
                f"| {strategy} | {client} | {median(runs):.3f} | {min(runs):.3f} | {max(runs):.3f} "
                f"| {ratio:.2f} |"
            )


if __name__ == "__main__":
    main()
