"""An order-processing service: a consumer group that confirms orders, at least once, and shuts
down cleanly.

    python examples/order_service.py --bootstrap 127.0.0.1:9092 [--group order-service]
    python examples/order_service.py              # starts an embedded reference broker and feeds it

Every instance joins the group ``order-service`` and reads JSON orders from ``orders``. For each
order it sends a confirmation, keyed by the order id, to ``orders-confirmed`` and waits for the
broker's acknowledgement; only then does it commit the order's offset (manual commits:
``enable_auto_commit=False``). So an order is confirmed at least once whatever crashes; with the
two rules below, an order is confirmed exactly once as long as instances stop cleanly:

- A rebalance listener commits what was processed of the partitions being revoked, before they
  move to another instance (``on_partitions_revoked``), and drops its bookkeeping of partitions
  that were lost (``on_partitions_lost``: another instance may own them already, so committing
  would be wrong). Rebalances run in the background, as in aiokafka, so a batch being processed
  holds a lock that the revocation waits for: a partition never moves in the middle of a batch.
- SIGTERM or SIGINT stops the loop after the current batch, commits, and leaves the group, so the
  partitions move to the other instances at once.

Add instances to share the work; stop any of them with SIGTERM. Each processed order prints one
``confirmed <order id>`` line; the process exits 0 after a clean shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Set
from typing import Any

from sdk import Consumer, ConsumerRebalanceListener, OffsetAndMetadata, Producer, TopicPartition
from sdk.errors import CommitFailedError

ORDERS, CONFIRMED = "orders", "orders-confirmed"


class CommitOnRevoke(ConsumerRebalanceListener):
    """Keeps the next offset to commit per partition and commits it when the partition leaves."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.processed: dict[TopicPartition, int] = {}
        #: Held while a batch is processed and committed; a revocation waits for it.
        self.processing = asyncio.Lock()

    async def commit(self, partitions: Set[TopicPartition] | None = None) -> None:
        owned = self.consumer.assignment()
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self.processed.items()
            if tp in owned and (partitions is None or tp in partitions)
        }
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError as exc:
            # The group moved on (this member was fenced or its generation is old): the new
            # owner reads these orders again from the last committed offset (at least once).
            print(f"commit refused, orders will be redelivered: {exc}", flush=True)

    async def on_partitions_revoked(self, revoked: Set[TopicPartition]) -> None:
        async with self.processing:
            await self.commit(revoked)
            for tp in revoked:
                self.processed.pop(tp, None)
        print(f"revoked {sorted(tp.partition for tp in revoked)}", flush=True)

    def on_partitions_lost(self, lost: Set[TopicPartition]) -> None:
        for tp in lost:
            self.processed.pop(tp, None)
        print(f"lost {sorted(tp.partition for tp in lost)}", flush=True)

    def on_partitions_assigned(self, assigned: Set[TopicPartition]) -> None:
        print(f"assigned {sorted(tp.partition for tp in assigned)}", flush=True)


def confirm(order: dict[str, Any]) -> bytes:
    """The business step: an order is confirmed with its total."""
    total = sum(float(item["price"]) * int(item["quantity"]) for item in order["items"])
    return json.dumps({"order_id": order["order_id"], "total": round(total, 2)}).encode()


async def serve(bootstrap: str, group: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with (
        Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        ) as consumer,
        Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True) as producer,
    ):
        listener = CommitOnRevoke(consumer)
        consumer.subscribe([ORDERS], listener=listener)
        print("running", flush=True)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500)
            async with listener.processing:
                for tp, records in batches.items():
                    if tp not in consumer.assignment():
                        continue  # lost meanwhile: its new owner reads these records
                    deliveries = []
                    for record in records:
                        order = json.loads(record.value or b"{}")
                        deliveries.append(await producer.send(CONFIRMED, confirm(order), key=record.key))
                    await asyncio.gather(*deliveries)
                    for record in records:
                        print(f"confirmed {record.key.decode() if record.key else None}", flush=True)
                    listener.processed[tp] = records[-1].offset + 1
                await listener.commit()
        async with listener.processing:
            await listener.commit()
    print("stopped cleanly", flush=True)


async def feed(bootstrap: str, count: int) -> None:
    """Send ``count`` example orders (used when no broker is given)."""
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(count):
            order = {"order_id": f"order-{i}", "items": [{"price": "9.99", "quantity": 1 + i % 3}]}
            await producer.send(ORDERS, json.dumps(order).encode(), key=f"order-{i}".encode())
        await producer.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port; without it an embedded broker is started")
    parser.add_argument("--group", default="order-service")
    args = parser.parse_args()
    if args.bootstrap:
        asyncio.run(serve(args.bootstrap, args.group))
        return 0
    from reference_broker.testing import BrokerProcess

    with BrokerProcess(config={"num.partitions": 3}) as broker:
        print(f"embedded reference broker on {broker.bootstrap}; Ctrl-C to stop", flush=True)
        asyncio.run(feed(broker.bootstrap, 20))
        asyncio.run(serve(broker.bootstrap, args.group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
