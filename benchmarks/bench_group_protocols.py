"""Group settle time by group protocol: the classic protocol with the cooperative-sticky assignor
against KIP-848's consumer protocol, on the reference broker and on Apache Kafka, in one run.

A group of ``--members`` members shares a topic of ``--partitions`` partitions and keeps polling.
Once it is settled (every member has partitions, none twice, all of them handed out, as the
members themselves report), one more member starts: the ``join`` clock runs from its start until
the group is settled again. Then one of the first members leaves cleanly (closes, which sends the
leave): the ``leave`` clock runs from the moment it stops polling and begins to close until the
members that stay are settled again. Every run is a fresh group.

The protocols get the same timing: heartbeats every 500 ms and a 10 s session, set on the client
for the classic protocol (``heartbeat_interval_ms``, ``session_timeout_ms``) and on the brokers
for the consumer protocol (``group.consumer.heartbeat.interval.ms`` and its minimum, and the
session settings), where KIP-848 keeps them. The broker's default assignor (``uniform``) serves the
consumer protocol. Both clients run: our ``sdk.Consumer`` (``group_protocol="consumer"``; the
members share one event loop) and confluent-kafka (``group.protocol=consumer``; a polling thread
per member).

Both brokers are started once and stay up for the whole run, so every round measures every
(broker, protocol, client) in turns and a slow spell of the machine hits all of them rather than
one. Prints per (broker, protocol, client, event) the median of ``--runs`` runs with its spread,
then the ratios consumer protocol / classic (below 1: KIP-848 settles sooner) and reference /
Kafka (below 1: our broker settles sooner).

    python benchmarks/bench_group_protocols.py                    # 10 members, 5 runs, both brokers
    python benchmarks/bench_group_protocols.py --runs 3 --brokers reference --clients sdk

``--brokers`` defaults to every broker that can run here; Kafka needs Java and Maven and is left
out, with a message on stderr, without them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import spread, spread_name
from bench_group import create_topic, settled
from bench_latency import chosen

CLIENTS = ["sdk", "confluent-kafka"]
PROTOCOLS = ["classic", "consumer"]
BROKERS = ["reference", "kafka"]
EVENTS = ["join", "leave"]
CLASSIC_ASSIGNOR = "cooperative-sticky"
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 500
#: The consumer protocol's timing lives on the broker: the same as the classic members ask for.
CONSUMER_GROUP_SETTINGS: dict[str, Any] = {
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    "group.consumer.session.timeout.ms": SESSION_TIMEOUT_MS,
    "group.consumer.min.session.timeout.ms": SESSION_TIMEOUT_MS,
}
POLL_S = 0.05
SETTLE_TIMEOUT_S = 60.0
#: The first member of the group is the one that leaves.
LEAVING_SLOT = 0


class Stopwatch:
    """What a run's members own, keyed by member slot, and when a leaving member stopped polling.

    A member either reports its partitions after each poll (confluent-kafka: its assignment only
    changes inside ``poll``) or hands over a probe the run calls itself (the SDK: its assignment
    changes on the event loop between polls, and the run shares that loop). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: dict[int, Callable[[], set[int]]] = {}
        self.left_at: dict[int, float] = {}

    def joined(self, slot: int, probe: Callable[[], set[int]] | None = None) -> None:
        """``slot`` is observed from now on: through ``probe``, or else its reports."""
        with self._lock:
            self._owned[slot] = probe or set

    def report(self, slot: int, partitions: set[int]) -> None:
        with self._lock:
            if slot in self._owned:
                self._owned[slot] = lambda: partitions

    def leaving(self, slot: int) -> None:
        """``slot`` is no longer observed; the leave clock starts now."""
        with self._lock:
            self._owned.pop(slot, None)
            self.left_at[slot] = time.perf_counter()

    def settled(self, count: int, partitions: int) -> bool:
        with self._lock:
            probes = list(self._owned.values())
        owned = [probe() for probe in probes]
        return len(owned) == count and settled(owned, partitions)


def wait_settled(watch: Stopwatch, count: int, partitions: int, what: str) -> float:
    """The moment ``count`` observed members are settled (TimeoutError after SETTLE_TIMEOUT_S)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not watch.settled(count, partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} {what} members did not settle in {SETTLE_TIMEOUT_S:g} s")
        time.sleep(0.005)
    return time.perf_counter()


async def async_wait_settled(watch: Stopwatch, count: int, partitions: int, what: str) -> float:
    """:func:`wait_settled` on the event loop the members poll on."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not watch.settled(count, partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} {what} members did not settle in {SETTLE_TIMEOUT_S:g} s")
        await asyncio.sleep(0.005)
    return time.perf_counter()


async def _sdk_run(
    bootstrap: str, topic: str, partitions: int, protocol: str, members: int
) -> dict[str, float]:
    from sdk.consumer import Consumer

    group = f"bench-{protocol}-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = (
        {
            "partition_assignment_strategy": CLASSIC_ASSIGNOR,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        }
        if protocol == "classic"
        else {"group_protocol": "consumer"}
    )
    watch = Stopwatch()
    leave = [asyncio.Event() for _ in range(members + 1)]
    what = f"sdk {protocol}"

    async def member(slot: int) -> None:
        consumer = Consumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **options
        )
        await consumer.start()
        watch.joined(slot, lambda: {tp.partition for tp in consumer.assignment()})
        consumer.subscribe([topic])
        try:
            while not leave[slot].is_set():
                await consumer.getmany(timeout_ms=int(POLL_S * 1000))
        finally:
            watch.leaving(slot)
            await consumer.stop()

    tasks = [asyncio.create_task(member(slot)) for slot in range(members)]
    try:
        await async_wait_settled(watch, members, partitions, what)
        started = time.perf_counter()
        tasks.append(asyncio.create_task(member(members)))
        joined = await async_wait_settled(watch, members + 1, partitions, what) - started
        leave[LEAVING_SLOT].set()
        left = await async_wait_settled(watch, members, partitions, what) - watch.left_at[LEAVING_SLOT]
        return {"join": joined, "leave": left}
    finally:
        for event in leave:
            event.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            raise RuntimeError(f"an sdk member failed: {failures[0]!r}") from failures[0]


def _confluent_run(
    bootstrap: str, topic: str, partitions: int, protocol: str, members: int
) -> dict[str, float]:
    import confluent_kafka

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{protocol}-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        config.update(
            {
                "partition.assignment.strategy": CLASSIC_ASSIGNOR,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            }
        )
    else:
        config["group.protocol"] = "consumer"
    watch = Stopwatch()
    leave = [threading.Event() for _ in range(members + 1)]
    failures: list[BaseException] = []
    what = f"confluent-kafka {protocol}"

    def member(slot: int) -> None:
        try:
            consumer = confluent_kafka.Consumer(config)
            consumer.subscribe([topic])
            try:
                while not leave[slot].is_set():
                    consumer.poll(POLL_S)
                    watch.report(slot, {tp.partition for tp in consumer.assignment()})
            finally:
                watch.leaving(slot)
                consumer.close()
        except BaseException as exc:  # surfaced by the run, not lost with the thread
            failures.append(exc)

    def start_member(slot: int) -> threading.Thread:
        watch.joined(slot)
        thread = threading.Thread(target=member, args=(slot,), daemon=True)
        thread.start()
        return thread

    threads = [start_member(slot) for slot in range(members)]
    try:
        wait_settled(watch, members, partitions, what)
        started = time.perf_counter()
        threads.append(start_member(members))
        joined = wait_settled(watch, members + 1, partitions, what) - started
        leave[LEAVING_SLOT].set()
        left = wait_settled(watch, members, partitions, what) - watch.left_at[LEAVING_SLOT]
        return {"join": joined, "leave": left}
    finally:
        for event in leave:
            event.set()
        for thread in threads:
            thread.join(timeout=30)
        if failures:
            raise RuntimeError(f"a confluent-kafka member failed: {failures[0]!r}") from failures[0]


def measure(
    client: str, bootstrap: str, topic: str, partitions: int, protocol: str, members: int
) -> dict[str, float]:
    """One run: seconds to settle after a member joins and after one leaves."""
    if client == "sdk":
        return asyncio.run(_sdk_run(bootstrap, topic, partitions, protocol, members))
    return _confluent_run(bootstrap, topic, partitions, protocol, members)


@contextlib.contextmanager
def started_brokers(names: list[str]) -> Iterator[dict[str, str]]:
    """Every named broker started, with the consumer protocol's timing: name -> bootstrap."""
    with contextlib.ExitStack() as stack:
        bootstraps: dict[str, str] = {}
        for name in names:
            if name == "reference":
                from reference_broker.testing import BrokerProcess

                process = stack.enter_context(
                    BrokerProcess(config=CONSUMER_GROUP_SETTINGS, log_level="WARNING")
                )
                bootstraps[name] = process.bootstrap
            else:
                from _kafka import running_kafka

                bootstraps[name] = stack.enter_context(running_kafka(**CONSUMER_GROUP_SETTINGS)).bootstrap
        yield bootstraps


Key = tuple[str, str, str, str]  # broker, protocol, client, event


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "nan"


def print_tables(
    brokers: list[str], protocols: list[str], clients: list[str], times: dict[Key, list[float]], runs: int
) -> None:
    """The medians and spreads, then the ratios consumer / classic and reference / Kafka."""
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"| broker | protocol | client | event | median s | {spread_name(runs)} s |")
    print("|---|---|---|---|---|---|")
    for broker in brokers:
        for protocol in protocols:
            for client in clients:
                for event in EVENTS:
                    key = (broker, protocol, client, event)
                    low, high = spread(times[key])
                    print(
                        f"| {broker} | {protocol} | {client} | {event} | {median[key]:.3f} "
                        f"| {low:.3f}-{high:.3f} |"
                    )
    # A ratio column: its header and the two keys (without client and event) it divides.
    columns: list[tuple[str, tuple[str, str], tuple[str, str]]] = []
    if set(protocols) == set(PROTOCOLS):
        columns += [(f"consumer / classic {b}", (b, "consumer"), (b, "classic")) for b in brokers]
    if set(brokers) == set(BROKERS):
        columns += [(f"reference / kafka {p}", ("reference", p), ("kafka", p)) for p in protocols]
    if not columns:
        return
    print()
    print("| client | event | " + " | ".join(header for header, _, _ in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for client in clients:
        for event in EVENTS:
            cells = [
                ratio(median[(*top, client, event)], median[(*bottom, client, event)])
                for _, top, bottom in columns
            ]
            print(f"| {client} | {event} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=10, help="members before the join (default 10)")
    parser.add_argument(
        "--partitions", type=int, default=None, help="default: twice the members after the join"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", default=None, help=f"comma-separated of {', '.join(CLIENTS)}")
    parser.add_argument("--protocols", default=None, help=f"comma-separated of {', '.join(PROTOCOLS)}")
    parser.add_argument("--brokers", default=None, help=f"comma-separated of {', '.join(BROKERS)}")
    args = parser.parse_args()
    partitions = 2 * (args.members + 1) if args.partitions is None else args.partitions
    if args.members < 1 or args.runs < 1:
        parser.error("--members and --runs must be positive")
    if partitions < args.members + 1:
        parser.error(f"--partitions must be at least --members + 1 ({args.members + 1}): nobody may be empty")
    clients = chosen(parser, "--clients", args.clients, CLIENTS)
    protocols = chosen(parser, "--protocols", args.protocols, PROTOCOLS)
    brokers = chosen(parser, "--brokers", args.brokers, BROKERS)
    if "kafka" in brokers:
        from _kafka import unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            print(f"Apache Kafka skipped: {reason}", file=sys.stderr)
            brokers.remove("kafka")
    if not brokers:
        parser.error("no broker left to measure")

    times: dict[Key, list[float]] = {}
    with started_brokers(brokers) as bootstraps:
        topics = {broker: create_topic(bootstrap, partitions) for broker, bootstrap in bootstraps.items()}
        for run in range(args.runs):
            for broker in brokers:
                for protocol in protocols:
                    for client in clients if run % 2 == 0 else list(reversed(clients)):
                        result = measure(
                            client, bootstraps[broker], topics[broker], partitions, protocol, args.members
                        )
                        for event in EVENTS:
                            times.setdefault((broker, protocol, client, event), []).append(result[event])
                        print(
                            f"  {broker} {protocol} {client}: join {result['join']:.3f} s,"
                            f" leave {result['leave']:.3f} s",
                            file=sys.stderr,
                            flush=True,
                        )
    print(
        f"A group of {args.members} on {partitions} partitions: seconds until settled after one more member"
        f" joins and after one leaves (median of {args.runs}); classic = {CLASSIC_ASSIGNOR},"
        f" consumer = KIP-848; heartbeat {HEARTBEAT_INTERVAL_MS} ms, session {SESSION_TIMEOUT_MS} ms"
    )
    print_tables(brokers, protocols, clients, times, args.runs)


if __name__ == "__main__":
    main()
