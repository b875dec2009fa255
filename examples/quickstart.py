"""The main demo: the SDK producing to the embedded reference broker, and reading it back.

    python examples/quickstart.py [--records 1000]

1. Starts the reference broker as a subprocess (``python -m reference_broker``) on a free
   loopback port with a temporary data directory.
2. Produces keyed records with headers through ``sdk.Producer``: idempotent, acks=all,
   zstd-compressed batches, the Java client's murmur2 partitioner.
3. Restarts the broker (a clean shutdown and recovery of the log from disk).
4. Reads every partition back with raw Fetch requests through the SDK's ``KafkaClient`` and
   ``sdk.records``, and checks that every record came back once, in order, with its key,
   value and headers.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time

from reference_broker.testing import BrokerProcess
from sdk import KafkaClient, Producer
from sdk.protocol import messages as m
from sdk.records import iter_batches

TOPIC = "quickstart"
PARTITIONS = 3


async def produce(bootstrap: str, count: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """Send ``count`` records; return what each partition should hold, in order."""
    sent: dict[int, list[tuple[bytes, bytes]]] = collections.defaultdict(list)
    async with Producer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="zstd",
        linger_ms=5,
    ) as producer:
        futures = []
        for i in range(count):
            key = f"user-{i % 17}".encode()
            value = f"event {i}".encode()
            fut = await producer.send(TOPIC, value, key=key, headers=[("source", b"quickstart")])
            futures.append((key, value, fut))
        for key, value, fut in futures:
            meta = await fut
            sent[meta.partition].append((key, value))
    return sent


async def read_back(bootstrap: str) -> dict[int, list[tuple[bytes, bytes, int]]]:
    """Fetch every partition from offset 0 to its end with plain Fetch requests."""
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        client.add_topic(TOPIC)
        await client.refresh_metadata()
        got: dict[int, list[tuple[bytes, bytes, int]]] = collections.defaultdict(list)
        for partition in range(PARTITIONS):
            leader = client.cluster.leader_for(TOPIC, partition)
            offset = 0
            while True:
                request = m.FetchRequest(
                    replica_id=-1,
                    max_wait_ms=100,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    topics=[
                        m.FetchRequest.FetchTopic(
                            topic=TOPIC,
                            topic_id=client.cluster.topic(TOPIC).topic_id,
                            partitions=[
                                m.FetchRequest.FetchPartition(
                                    partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                                )
                            ],
                        )
                    ],
                )
                response = await client.send(leader, request)
                data = response.responses[0].partitions[0]
                if data.error_code:
                    raise RuntimeError(f"fetch error {data.error_code} on partition {partition}")
                for batch in iter_batches(data.records or b""):
                    for record in batch:
                        if record.offset >= offset:
                            headers = dict(record.headers)
                            got[partition].append((record.key, record.value, len(headers)))
                            offset = record.offset + 1
                if offset >= data.high_watermark:
                    break
        return got
    finally:
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="SDK + reference broker demo")
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args()

    with BrokerProcess(config={"num.partitions": PARTITIONS}) as broker:
        print(f"reference broker listening on {broker.bootstrap} (data in a temporary directory)")
        start = time.perf_counter()
        sent = asyncio.run(produce(broker.bootstrap, args.records))
        elapsed = time.perf_counter() - start
        print(f"produced {args.records} records in {elapsed:.2f}s (idempotent, acks=all, zstd)")
        for partition in sorted(sent):
            print(f"  partition {partition}: {len(sent[partition])} records")

        broker.restart()
        print("broker restarted: the log was closed cleanly and reopened from disk")

        got = asyncio.run(read_back(broker.bootstrap))
    ok = True
    for partition in range(PARTITIONS):
        expected = sent.get(partition, [])
        actual = [(k, v) for k, v, _ in got.get(partition, [])]
        headers_ok = all(n == 1 for _, _, n in got.get(partition, []))
        same = actual == expected and headers_ok
        ok &= same
        print(f"  partition {partition}: read {len(actual)} records back, "
              f"{'same records, same order' if same else 'MISMATCH'}")
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
