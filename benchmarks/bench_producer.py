"""Producer throughput: this SDK next to aiokafka, kafka-python and confluent-kafka.

Every client sends the same workload (100-byte values, no keys, acks=all, idempotence on,
linger 5 ms, 16 KiB batches, a 4-partition topic) and the clock runs from the first send until
every record is acknowledged. Each measurement runs in its own process (no shared interpreter
state, no shared GIL with the broker), against the reference broker (started here with
``reference_broker.testing.BrokerProcess``) and against librdkafka's mock cluster (also in its own
process). The median of ``--runs`` runs is reported, with the ratio to aiokafka.

    python benchmarks/bench_producer.py                      # everything, 200k messages, 3 runs
    python benchmarks/bench_producer.py --messages 50000 --targets mock --clients sdk,aiokafka
    python benchmarks/bench_producer.py --profile sdk        # where the time goes (cProfile)
    python benchmarks/bench_producer.py --instructions --messages 30000 --targets reference --clients sdk

CPU time per message moves by tens of percent on a machine that other work loads. For comparing
two commits, ``--instructions`` counts instead the instructions the client process executes per
message (valgrind's callgrind; slow, so use fewer messages): a run of ``--messages`` minus a run of
one message (start-up, connection, warm-up), divided by the difference. It varies little with the
load, so a change of a few percent shows.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    ROOT,
    Clock,
    MockClusterProcess,
    client_parser,
    measure_rate,
    medians,
    print_ratio_table,
    report_worker,
    run_worker,
    show_runs,
)

VALUE = b"v" * 100
BATCH_SIZE = 16384
LINGER_MS = 5
CLIENTS = [
    "sdk",
    "sdk-send_many",
    "sdk-sync",
    "aiokafka",
    "aiokafka-batch",
    "kafka-python",
    "confluent-kafka",
]
TARGETS = ["reference", "mock"]


# -- the clients (each runs in a worker process) --------------------------------------------------


async def _sdk(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from sdk import Producer

    async with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=LINGER_MS, batch_size=BATCH_SIZE
    ) as producer:
        assert producer.config.idempotent
        await producer.send_and_wait(topic, b"warm-up")
        clock = Clock()
        send = producer.send
        for _ in range(n):
            await send(topic, VALUE)
        await producer.flush()
        return clock.stop()


async def _sdk_send_many(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from sdk import Producer

    async with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=LINGER_MS, batch_size=BATCH_SIZE
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        chunk = [(None, VALUE)] * 10000
        clock = Clock()
        futures = []
        for offset in range(0, n, len(chunk)):
            futures.append(await producer.send_many(topic, chunk[: n - offset]))
        await asyncio.gather(*futures)
        return clock.stop()


def _sdk_sync(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from sdk.sync import Producer

    with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=LINGER_MS, batch_size=BATCH_SIZE
    ) as producer:
        producer.send_and_wait(topic, b"warm-up")
        clock = Clock()
        send = producer.send
        for _ in range(n):
            send(topic, VALUE)
        producer.flush()
        return clock.stop()


async def _aiokafka(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up")
        clock = Clock()
        send = producer.send
        for _ in range(n):
            await send(topic, VALUE)
        await producer.flush()
        return clock.stop()
    finally:
        await producer.stop()


async def _aiokafka_batch(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up")
        partitions = sorted(await producer.partitions_for(topic))
        clock = Clock()
        futures = []
        sent = 0
        index = 0
        while sent < n:
            batch = producer.create_batch()
            while sent < n and batch.append(key=None, value=VALUE, timestamp=None) is not None:
                sent += 1
            batch.close()
            futures.append(
                await producer.send_batch(batch, topic, partition=partitions[index % len(partitions)])
            )
            index += 1
        await asyncio.gather(*futures)
        return clock.stop()
    finally:
        await producer.stop()


def _kafka_python(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaProducer

    # kafka-python cannot read the mock cluster's (malformed) ApiVersions fallback answer to its
    # v3+ request; pinning the version makes it start at ApiVersions v2, which the mock speaks.
    pinned = {"api_version": (2, 3)} if os.environ.get("BENCH_TARGET") == "mock" else {}
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
        **pinned,
    )
    try:
        producer.send(topic, b"warm-up").get(30)
        clock = Clock()
        send = producer.send
        for _ in range(n):
            send(topic, VALUE)
        producer.flush()
        return clock.stop()
    finally:
        producer.close()


def _confluent(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "log_level": 0,
        }
    )
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    clock = Clock()
    produce, poll = producer.produce, producer.poll
    for _ in range(n):
        while True:
            try:
                produce(topic, VALUE)
                break
            except BufferError:  # librdkafka's queue is full: let it deliver, then retry
                poll(0.01)
    producer.flush(120)
    return clock.stop()


WORKERS: dict[str, Callable[[str, str, int], Any]] = {  # each returns (wall s, CPU s)
    "sdk": _sdk,
    "sdk-send_many": _sdk_send_many,
    "sdk-sync": _sdk_sync,
    "aiokafka": _aiokafka,
    "aiokafka-batch": _aiokafka_batch,
    "kafka-python": _kafka_python,
    "confluent-kafka": _confluent,
}


# -- clusters -------------------------------------------------------------------------------------


def measure(client: str, target: str, bootstrap: str, n: int) -> tuple[float, float]:
    """One run in a fresh process: messages per second, and CPU microseconds per message."""
    topic = f"bench-{client}-{uuid.uuid4().hex[:8]}"
    return measure_rate(__file__, client, target, bootstrap, topic, n)


def count_instructions(client: str, bootstrap: str, n: int) -> int:
    """Instructions callgrind counts in one run of ``client``'s worker over ``n`` messages."""
    topic = f"bench-{client}-{uuid.uuid4().hex[:8]}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        *("--worker", client, "--bootstrap", bootstrap, "--topic", topic, "--messages", str(n)),
    ]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT, env=env)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"{client} under callgrind failed:\n{out.stderr[-3000:]}")
    return int(found.group(1))


def instructions_per_message(client: str, bootstrap: str, n: int) -> float:
    """Instructions per message beyond a one-message run (start-up, connection, warm-up)."""
    if n < 2:
        raise SystemExit("--instructions needs --messages of at least 2")
    return (count_instructions(client, bootstrap, n) - count_instructions(client, bootstrap, 1)) / (n - 1)


def main() -> None:
    parser = client_parser(__doc__, 200_000, CLIENTS, TARGETS)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="instructions per message under valgrind's callgrind instead of time (see above)",
    )
    args = parser.parse_args()
    if args.worker:
        report_worker(WORKERS[args.worker], args)
        return
    if args.profile:
        with MockClusterProcess() as mock:
            elapsed, _cpu = run_worker(
                WORKERS[args.profile], mock.bootstrap, f"profile-{uuid.uuid4().hex[:6]}", args.messages,
                profile=True,
            )
        print(f"{args.profile}: {args.messages / elapsed:,.0f} msgs/s under cProfile")
        return

    clients = args.clients.split(",")
    targets = args.targets.split(",")
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on the PATH")
    rate: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    for target in targets:
        if target == "reference":
            sys.path.insert(0, ROOT)
            from reference_broker.testing import BrokerProcess

            cluster: Any = BrokerProcess(config={"num.partitions": 4}, log_level="WARNING")
        else:
            cluster = MockClusterProcess()
        with cluster:
            for client in clients:
                if args.instructions:
                    per_message = instructions_per_message(client, cluster.bootstrap, args.messages)
                    print(f"  {target:9s} {client:16s} {per_message:,.0f} instructions/message", flush=True)
                    continue
                runs = [measure(client, target, cluster.bootstrap, args.messages) for _ in range(args.runs)]
                rate[(target, client)], cpu[(target, client)] = medians(runs)
                show_runs(target, client, runs)

    if args.instructions:
        return
    print(
        f"\n{args.messages:,} messages x {args.runs} runs, 100-byte values, acks=all, idempotent, "
        f"linger {LINGER_MS} ms, batch {BATCH_SIZE} B. Median msgs/s (ratio vs aiokafka) and median "
        "client CPU microseconds per message (ratio: aiokafka's CPU / this client's).\n"
    )
    print_ratio_table(clients, targets, rate, cpu)


if __name__ == "__main__":
    main()
