"""An exactly-once stream processor: read payments, convert their amounts to euros, write the
result, and commit the consumed offsets in the same transaction.

    python examples/exactly_once_processor.py --bootstrap 127.0.0.1:9092 --instance 1
    python examples/exactly_once_processor.py      # starts an embedded reference broker and feeds it

Run several instances with different ``--instance`` numbers to share the work (one consumer
group, one transactional id per instance). The guarantee: every payment in ``payments`` appears
exactly once in ``payments-eur`` for a ``read_committed`` reader, however the instances are
stopped, killed (``kill -9``) or restarted. What makes it hold:

- Each batch of records is one transaction: the converted records and the consumer's next
  offsets (``send_offsets_to_transaction`` with ``consumer.group_metadata()``) commit together or
  not at all. The consumer reads ``read_committed`` and never commits offsets by itself.
- An instance restarted with the same ``--instance`` takes the same transactional id: its
  ``init_transactions`` aborts whatever the crashed one left open and fences it.
- A zombie (an instance whose group membership or transactional id moved to another process) is
  refused by the broker: ``ProducerFencedError`` means another process owns the transactional id
  (exit, do not retry); a group error on the offsets means the partitions moved (abort, rewind to
  the committed offsets, go on).
- Any other error inside the transaction aborts it and rewinds the consumer to the committed
  offsets, so the batch is processed again, not lost and not doubled.

SIGTERM or SIGINT stops after the current transaction. Each committed transaction prints
``committed <n> records``; a fenced instance prints ``fenced`` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from sdk import Consumer, OffsetAndMetadata, Producer
from sdk.errors import KafkaError, ProducerFencedError

PAYMENTS, PAYMENTS_EUR, GROUP = "payments", "payments-eur", "payments-eur-converter"
EUR_PER_UNIT = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "JPY": 0.0061}


def to_eur(payment: dict[str, Any]) -> bytes:
    """The transform: the amount in euro cents, beside the original."""
    rate = EUR_PER_UNIT[str(payment["currency"])]
    eur_cents = round(int(payment["amount_cents"]) * rate)
    return json.dumps({**payment, "eur_cents": eur_cents}).encode()


async def process(bootstrap: str, instance: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with (
        Consumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        ) as consumer,
        Producer(bootstrap_servers=bootstrap, transactional_id=f"{GROUP}-{instance}") as producer,
    ):
        consumer.subscribe([PAYMENTS])
        print("running", flush=True)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=200)
            if not batches:
                continue
            try:
                await producer.begin_transaction()
                count = 0
                for records in batches.values():
                    for record in records:
                        await producer.send(
                            PAYMENTS_EUR, to_eur(json.loads(record.value or b"{}")), key=record.key
                        )
                        count += 1
                offsets = {
                    tp: OffsetAndMetadata(records[-1].offset + 1, "") for tp, records in batches.items()
                }
                await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                await producer.commit_transaction()
                print(f"committed {count} records", flush=True)
            except ProducerFencedError:
                print("fenced: another process took this transactional id; stopping", flush=True)
                return 0
            except KafkaError as exc:
                print(f"aborting the transaction: {exc!r}; rewinding to the committed offsets", flush=True)
                await producer.abort_transaction()
                still_mine = [tp for tp in batches if tp in consumer.assignment()]
                if still_mine:
                    await consumer.seek_to_committed(*still_mine)
    print("stopped cleanly", flush=True)
    return 0


async def feed(bootstrap: str, count: int) -> None:
    """Send ``count`` example payments (used when no broker is given)."""
    currencies = sorted(EUR_PER_UNIT)
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(count):
            payment = {"payment_id": i, "amount_cents": 100 + i, "currency": currencies[i % len(currencies)]}
            await producer.send(PAYMENTS, json.dumps(payment).encode(), key=str(i).encode())
        await producer.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port; without it an embedded broker is started")
    parser.add_argument(
        "--instance", type=int, default=1, help="this instance's number (its transactional id)"
    )
    args = parser.parse_args()
    if args.bootstrap:
        return asyncio.run(process(args.bootstrap, args.instance))
    from reference_broker.testing import BrokerProcess

    with BrokerProcess(config={"num.partitions": 3}) as broker:
        print(f"embedded reference broker on {broker.bootstrap}; Ctrl-C to stop", flush=True)
        asyncio.run(feed(broker.bootstrap, 1000))
        return asyncio.run(process(broker.bootstrap, args.instance))


if __name__ == "__main__":
    sys.exit(main())
