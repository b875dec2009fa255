"""Shared by the transaction protocol v2 and two-phase commit tests: topics, a read_committed
oracle (confluent-kafka's consumer), and a record of the transactional requests a producer sent."""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka

from sdk import Producer
from sdk.client import KafkaClient
from sdk.protocol import messages

TXN_BROKER = {
    "num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def txn_producer(bootstrap: str, transactional_id: str, **kwargs: Any) -> Producer:
    """A transactional producer with test-sized timeouts (``kwargs`` may override them)."""
    settings: dict[str, Any] = {"request_timeout_ms": 10000, "max_block_ms": 20000, **kwargs}
    return Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **settings)


async def create_topic(bootstrap: str, name: str, partitions: int = 2, **configs: str) -> str:
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        Topic = messages.CreateTopicsRequest.CreatableTopic
        request = messages.CreateTopicsRequest(
            topics=[
                Topic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs=[
                        Topic.CreatableTopicConfig(name=key.replace("_", "."), value=value)
                        for key, value in configs.items()
                    ],
                )
            ],
            timeout_ms=10000,
        )
        response = await client.send_to_any(request)
        assert response.topics[0].error_code == 0, response
    finally:
        await client.close()
    return name


def read_committed(
    bootstrap: str, topic: str, expected: int, partitions: int = 2, timeout: float = 20
) -> list[bytes]:
    """Values confluent-kafka's read_committed consumer reads from the start of every partition,
    until ``expected`` arrived and every partition's end (its last stable offset) is reached; with
    ``expected=0`` it waits the whole ``timeout`` for a record that must not come."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    start = confluent_kafka.OFFSET_BEGINNING
    consumer.assign([confluent_kafka.TopicPartition(topic, p, start) for p in range(partitions)])
    got: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (
            expected == 0 or len(got) < expected or len(at_end) < partitions
        ):
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def record_transactional_requests(producer: Producer) -> list[int]:
    """The api keys of the transactional requests (InitProducerId, AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, TxnOffsetCommit through the sender's queue) the started ``producer``
    sends from now on, in order."""
    sender = producer._sender
    assert sender is not None
    sent: list[int] = []
    enqueue = sender.enqueue_transactional

    def recording(request: Any) -> Any:
        sent.append(request.api_key)
        return enqueue(request)

    sender.enqueue_transactional = recording  # type: ignore[method-assign]
    return sent


def record_produce_versions(producer: Producer, topic: str, partition: int = 0) -> list[int]:
    """The versions of the Produce requests the started ``producer`` sends from now on to the
    leader of ``topic``-``partition`` (over its current connection)."""
    client = producer.client
    conn = client.connection(client.cluster.leader_for(topic, partition))
    assert conn is not None
    versions: list[int] = []
    send = conn.send

    def recording(request: Any, version: int | None = None, **kwargs: Any) -> Any:
        if request.API_KEY == messages.ProduceRequest.API_KEY:
            versions.append(version if version is not None else conn.version_for(request.API_KEY))
        return send(request, version, **kwargs)

    conn.send = recording  # type: ignore[method-assign]
    return versions
