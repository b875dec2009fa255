"""Producers that die holding a transaction open, run as ``python producers.py KIND ...`` so a
test can kill them with SIGKILL. Each prints one JSON line once its records are written, then
waits to be killed.

* ``sdk BOOTSTRAP TOPIC TRANSACTIONAL_ID TIMEOUT_MS``: the SDK's transactional producer, records
  sent to partition 0 inside a transaction (the coordinator knows the transaction: it aborts it
  once ``TIMEOUT_MS`` passed).
* ``unverified BOOTSTRAP TOPIC TRANSACTIONAL_ID``: a transactional batch written to partition 0
  without AddPartitionsToTxn (the client bug that leaves hanging transactions on brokers that do
  not verify partitions: ``transaction.partition.verification.enable=false``); the coordinator
  never learns of the partition, so nothing ever aborts the transaction there.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from sdk.client import KafkaClient
from sdk.producer import Producer
from sdk.protocol import messages
from sdk.records import RecordBatchBuilder

#: Produce v9: flexible, topics by name, and before transactions v2's implicit partition adds.
UNVERIFIED_PRODUCE_VERSION = 9


async def transactional(bootstrap: str, topic: str, transactional_id: str, timeout_ms: str) -> None:
    producer = Producer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id, transaction_timeout_ms=int(timeout_ms)
    )
    await producer.start()
    await producer.begin_transaction()
    for index in range(3):
        await (await producer.send(topic, f"open-{index}".encode(), partition=0))
    print(json.dumps({"open": True}), flush=True)
    await asyncio.sleep(3600)


async def unverified(bootstrap: str, topic: str, transactional_id: str) -> None:
    client = KafkaClient(bootstrap)
    await client.start()
    deadline = time.monotonic() + 60
    while True:
        # FindCoordinator makes Kafka create __transaction_state; InitProducerId then succeeds.
        await client.send_to_any(
            messages.FindCoordinatorRequest(
                key=transactional_id, key_type=1, coordinator_keys=[transactional_id]
            )
        )
        init = await client.send_to_any(
            messages.InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=60000,
                producer_id=-1,
                producer_epoch=-1,
            )
        )
        if init.error_code == 0:
            break
        assert time.monotonic() < deadline, f"InitProducerId kept failing: {init.error_code}"
        await asyncio.sleep(0.2)
    builder = RecordBatchBuilder(
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        base_sequence=0,
        is_transactional=True,
    )
    for index in range(2):
        builder.append(int(time.time() * 1000), None, f"hanging-{index}".encode())
    P = messages.ProduceRequest
    request = P(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=10000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=0, records=builder.build())]
            )
        ],
    )
    response = await client.send_to_any(request, UNVERIFIED_PRODUCE_VERSION)
    [partition] = response.responses[0].partition_responses
    assert partition.error_code == 0, f"Produce failed: {partition.error_code}"
    print(
        json.dumps({"open": True, "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}),
        flush=True,
    )
    await asyncio.sleep(3600)


if __name__ == "__main__":
    kind, *arguments = sys.argv[1:]
    asyncio.run(transactional(*arguments) if kind == "sdk" else unverified(*arguments))
