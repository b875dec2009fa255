"""read_committed against real transactions: confluent-kafka's transactional producer writes to
the reference broker and to Apache Kafka (whose transaction coordinators write the markers); our
consumer must see exactly what confluent-kafka's read_committed consumer sees."""

from __future__ import annotations

import asyncio

import confluent_kafka
import pytest

from sdk.client import KafkaClient
from sdk.consumer import Consumer, TopicPartition
from sdk.protocol import messages
from tests.sdk.conftest import KafkaTarget


async def _serves_transactions(bootstrap: str) -> bool:
    client = KafkaClient(bootstrap)
    await client.start()
    try:
        conn = await client.get_connection(await client.wait_for_node())
        return conn.supports(messages.EndTxnRequest.API_KEY)
    finally:
        await client.close()


def transactional_producer(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, "log_level": 0}
    )
    producer.init_transactions(20)
    return producer


def confluent_read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "oracle", "isolation.level": isolation,
         "enable.partition.eof": True, "enable.auto.commit": False, "log_level": 0}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        values, eof = [], set()
        while len(eof) < partitions:
            message = consumer.poll(10)
            assert message is not None, "confluent-kafka read nothing within 10 s"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                eof.add(message.partition())
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


async def read_until_end(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    async with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                        auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)  # the LSO with read_committed
        values: list[bytes] = []
        async with asyncio.timeout(20):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value for r in records)
        assert await consumer.getmany(timeout_ms=300) == {}
        return values


@pytest.mark.parametrize(
    "kafka", ["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)], indirect=True
)
async def test_read_committed_matches_confluent_kafka_on_real_transactions(kafka: KafkaTarget, unique):
    if not await _serves_transactions(kafka.bootstrap):
        pytest.skip("the reference broker has no transaction coordinator yet")
    topic = await kafka.create_topic(unique("txn"), partitions=2)
    loop = asyncio.get_running_loop()

    def write() -> None:
        first = transactional_producer(kafka.bootstrap, unique("tid"))
        second = transactional_producer(kafka.bootstrap, unique("tid"))
        plain = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
        plain.produce(topic, b"plain-before", partition=0)  # not transactional: always visible
        assert plain.flush(20) == 0
        first.begin_transaction()
        for i in range(5):
            first.produce(topic, b"committed-%d" % i, partition=i % 2)
        second.begin_transaction()
        for i in range(4):
            second.produce(topic, b"aborted-%d" % i, partition=i % 2)
        first.commit_transaction(20)
        assert second.flush(20) == 0  # in the log before the abort (else librdkafka purges them)
        second.abort_transaction(20)
        second.begin_transaction()
        second.produce(topic, b"second-committed", partition=1)
        second.commit_transaction(20)
        first.begin_transaction()
        first.produce(topic, b"still-open", partition=0)
        first.flush(20)  # written, but its transaction stays open: the LSO stops before it

    await loop.run_in_executor(None, write)
    committed = await read_until_end(kafka.bootstrap, topic, "read_committed", 2)
    oracle = await loop.run_in_executor(None, confluent_read, kafka.bootstrap, topic, "read_committed", 2)
    assert sorted(committed) == sorted(oracle)
    assert not any(v.startswith(b"aborted") for v in committed) and b"still-open" not in committed
    assert {b"plain-before", b"committed-0", b"second-committed"} <= set(committed)
    everything = await read_until_end(kafka.bootstrap, topic, "read_uncommitted", 2)
    assert {b"aborted-0", b"still-open"} <= set(everything)
