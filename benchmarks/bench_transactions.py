"""Transactions: this SDK's transactional producer next to confluent-kafka's, on the same broker.

For transactions of 1, 100 and 1,000 records (100-byte values, a 4-partition topic, records
spread over the partitions), each client runs ``--transactions`` transactions one after the
other (begin, send, commit) and reports transactions per second, records per second and the
commit latency (``commit_transaction`` call to return: the flush plus EndTxn) at p50 and p99.
``sdk`` sends with ``send`` (a future per record), ``sdk-send-many`` with the batch API
(``send_many``, one call per partition and transaction).
The same records sent by the idempotent (non-transactional) producer give the throughput the
transactions cost. Each measurement runs in its own process, against the reference broker
(started here) and librdkafka's mock cluster (in its own process); the median of ``--runs``
runs is shown.

    python benchmarks/bench_transactions.py                          # everything
    python benchmarks/bench_transactions.py --sizes 1,100 --targets reference --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ROOT, MockClusterProcess, call_worker, run_in_process

VALUE = b"v" * 100
PARTITIONS = 4
LINGER_MS = 5
CLIENTS = ["sdk", "sdk-send-many", "confluent-kafka"]
TARGETS = ["reference", "mock"]


# -- the clients (each runs in a worker process) --------------------------------------------------


async def _sdk(
    bootstrap: str, topic: str, size: int, count: int, transactional: bool, many: bool = False
) -> dict[str, Any]:
    """``many``: each partition's share of a transaction in one ``send_many`` call (the batch
    API) rather than a ``send`` per record."""
    from sdk import Producer

    options: dict[str, Any] = {"transactional_id": f"bench-{uuid.uuid4().hex[:8]}"} if transactional else {}
    async with Producer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS, **options) as producer:
        for p in range(PARTITIONS):  # metadata and connections before the clock starts
            if transactional:
                async with producer.transaction():
                    await producer.send(topic, b"warm-up", partition=p)
            else:
                await producer.send_and_wait(topic, b"warm-up", partition=p)
        latencies = []
        started = time.perf_counter()
        for _ in range(count):
            if transactional:
                await producer.begin_transaction()
            if many:
                for p in range(min(size, PARTITIONS)):
                    share = (size - p + PARTITIONS - 1) // PARTITIONS
                    await producer.send_many(topic, [(None, VALUE)] * share, partition=p)
            else:
                for i in range(size):
                    await producer.send(topic, VALUE, partition=i % PARTITIONS)
            commit_started = time.perf_counter()
            if transactional:
                await producer.commit_transaction()
            else:
                await producer.flush()
            latencies.append(time.perf_counter() - commit_started)
        return {"elapsed": time.perf_counter() - started, "latencies": latencies}


def _confluent(bootstrap: str, topic: str, size: int, count: int, transactional: bool) -> dict[str, Any]:
    import confluent_kafka

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS, "log_level": 0}
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    else:
        config["enable.idempotence"] = True
    producer = confluent_kafka.Producer(config)
    if transactional:
        producer.init_transactions(30)
    for p in range(PARTITIONS):
        if transactional:
            producer.begin_transaction()
        producer.produce(topic, b"warm-up", partition=p)
        if transactional:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        if transactional:
            producer.begin_transaction()
        for i in range(size):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.001)
        commit_started = time.perf_counter()
        if transactional:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
        latencies.append(time.perf_counter() - commit_started)
    return {"elapsed": time.perf_counter() - started, "latencies": latencies}


async def _sdk_send_many(
    bootstrap: str, topic: str, size: int, count: int, transactional: bool
) -> dict[str, Any]:
    return await _sdk(bootstrap, topic, size, count, transactional, many=True)


WORKERS: dict[str, Callable[..., Any]] = {
    "sdk": _sdk,
    "sdk-send-many": _sdk_send_many,
    "confluent-kafka": _confluent,
}


def measure(client: str, bootstrap: str, size: int, count: int, transactional: bool) -> dict[str, Any]:
    """One run in a fresh process."""
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    command = [__file__, "--worker", client, "--bootstrap", bootstrap, "--topic", topic]
    command += ["--sizes", str(size), "--transactions", str(count)]
    if not transactional:
        command.append("--idempotent")
    return run_in_process(client, command)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1,100,1000", help="records per transaction")
    parser.add_argument("--transactions", type=int, default=0, help="per run (default: by size)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--idempotent", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    if args.worker:
        worker = WORKERS[args.worker]
        result = call_worker(
            worker, args.bootstrap, args.topic, sizes[0], args.transactions, not args.idempotent
        )
        print(json.dumps(result))
        return

    rows: list[tuple[str, str, int, str, float, float, float, float]] = []
    for target in args.targets.split(","):
        if target == "reference":
            sys.path.insert(0, ROOT)
            from reference_broker.testing import BrokerProcess

            cluster: Any = BrokerProcess(
                config={"num.partitions": PARTITIONS, "transaction.state.log.num.partitions": 4},
                log_level="WARNING",
            )
        else:
            cluster = MockClusterProcess()
        with cluster:
            for size in sizes:
                count = args.transactions or max(20, min(300, 20_000 // size))
                for client in args.clients.split(","):
                    for mode, transactional in (("txn", True), ("idem", False)):
                        runs = [
                            measure(client, cluster.bootstrap, size, count, transactional)
                            for _ in range(args.runs)
                        ]
                        rate = statistics.median(count / r["elapsed"] for r in runs)
                        latencies = [lat for r in runs for lat in r["latencies"]]
                        p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
                        rows.append((target, client, size, mode, rate, rate * size, p50, p99))
                        print(
                            f"  {target} {client} {mode} size {size}: {rate:,.1f}/s p50 {p50:.2f} ms",
                            file=sys.stderr,
                        )

    print(
        f"\nMedian of {args.runs} run(s); 100-byte values over {PARTITIONS} partitions, "
        f"linger {LINGER_MS} ms. 'txn': begin, send, commit_transaction per transaction; 'idem': "
        "the same records from the idempotent producer, flush() in place of the commit. "
        "Latency: the commit (or flush) call.\n"
    )
    header = ("target", "client", "records", "mode", "txn/s", "records/s", "commit p50 ms", "commit p99 ms")
    widths = (9, 15, 7, 4, 9, 11, 13, 13)
    print("| " + " | ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for target, client, size, mode, rate, records, p50, p99 in rows:
        print(
            f"| {target:<9} | {client:<15} | {size:>7} | {mode:<4} | {rate:>9,.1f} | {records:>11,.0f} "
            f"| {p50:>13.2f} | {p99:>13.2f} |"
        )


if __name__ == "__main__":
    main()
