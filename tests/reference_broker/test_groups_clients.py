"""Consumer groups of confluent-kafka, aiokafka and kafka-python against the reference broker:
partitions shared without overlap, commits, and resuming from committed offsets (also after the
broker is killed with SIGKILL and restarted)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

GROUP_BROKER = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def group_broker() -> BrokerProcess:
    with BrokerProcess(config=GROUP_BROKER) as proc:
        yield proc


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=str(i).encode())
    assert producer.flush(15) == 0


def rdkafka_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    config.update(extra)
    return Consumer(config)


def drain(consumers: list[Consumer], done: object, timeout_s: float = 30) -> list[list[bytes]]:
    got: list[list[bytes]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done(got):  # type: ignore[operator]
        for i, consumer in enumerate(consumers):
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[i].append(msg.value())
    return got


def at_end(consumer: Consumer) -> bool:
    assignment = consumer.assignment()
    if not assignment:
        return False
    for tp in consumer.position(assignment):
        _, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
        if tp.offset != high:
            return False
    return True


def test_confluent_group_shares_partitions_commits_and_resumes(group_broker: BrokerProcess) -> None:
    topic, group = unique("cg"), unique("group")
    values = [f"v{i}".encode() for i in range(40)]
    produce(group_broker.bootstrap, topic, values)
    consumers = [rdkafka_consumer(group_broker.bootstrap, group) for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe([topic])

    def shared_and_read(got: list[list[bytes]]) -> bool:
        sizes = [len(c.assignment()) for c in consumers]
        return sizes == [2, 2] and all(at_end(c) for c in consumers)

    got = drain(consumers, shared_and_read)
    assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
    assert assignments[0] | assignments[1] == {0, 1, 2, 3} and not assignments[0] & assignments[1]
    assert set(got[0]) | set(got[1]) == set(values)
    for consumer in consumers:
        consumer.commit(asynchronous=False)
        consumer.close()

    more = [f"w{i}".encode() for i in range(8)]
    produce(group_broker.bootstrap, topic, more)
    resumed = rdkafka_consumer(group_broker.bootstrap, group)
    resumed.subscribe([topic])
    try:
        again = drain([resumed], lambda g: len(g[0]) >= len(more))[0]
        time.sleep(0.3)
        again += drain([resumed], lambda g: False, timeout_s=0.5)[0]
        assert sorted(again) == sorted(more)  # nothing committed is read twice
    finally:
        resumed.close()


def test_confluent_commit_metadata_survives_kill_and_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("kill"), unique("group")
    produce(broker.bootstrap, topic, [b"x"] * 20)
    consumer = rdkafka_consumer(broker.bootstrap, group)
    tps = [TopicPartition(topic, p, 3 + p, metadata=f"meta-{p}") for p in range(4)]
    consumer.commit(offsets=tps, asynchronous=False)
    consumer.close()

    broker.restart(kill=True)

    consumer = rdkafka_consumer(broker.bootstrap, group)
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=15)
        assert [(tp.offset, tp.metadata) for tp in committed] == [(3 + p, f"meta-{p}") for p in range(4)]
    finally:
        consumer.close()


async def aiokafka_read(consumer: Any, count: int) -> list[Any]:
    """aiokafka's records until there are ``count`` (failing after 30 s)."""
    got: list[Any] = []
    async with asyncio.timeout(30):
        while len(got) < count:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(records)
    return got


def kafka_python_read(consumer: Any, count: int) -> list[Any]:
    """kafka-python's records until there are ``count`` or 30 s have passed."""
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


async def test_aiokafka_group_commits_and_resumes(group_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.structs import OffsetAndMetadata
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic, group = unique("aio"), unique("group")
    produce(group_broker.bootstrap, topic, [f"a{i}".encode() for i in range(30)])

    def make() -> object:
        return aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=group_broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )

    first = make()
    await first.start()
    try:
        await aiokafka_read(first, 30)
        assert len(first.assignment()) == 4
        await first.commit()
        tp0 = AioTopicPartition(topic, 0)
        await first.commit({tp0: OffsetAndMetadata(await first.position(tp0), "kept")})
        assert (await first.committed(tp0)) == await first.position(tp0)
    finally:
        await first.stop()

    produce(group_broker.bootstrap, topic, [b"late-1", b"late-2"])
    second = make()
    await second.start()
    try:
        fresh = await aiokafka_read(second, 2)
        assert sorted(r.value for r in fresh) == [b"late-1", b"late-2"]
    finally:
        await second.stop()


def test_kafka_python_group_commits_and_resumes(group_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    topic, group = unique("kp"), unique("group")
    produce(group_broker.bootstrap, topic, [f"k{i}".encode() for i in range(24)])

    def make() -> object:
        return kafka.KafkaConsumer(
            topic,
            bootstrap_servers=group_broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            consumer_timeout_ms=10_000,
        )

    first = make()
    try:
        got = kafka_python_read(first, 24)
        assert len(got) == 24
        first.commit()
    finally:
        first.close()

    produce(group_broker.bootstrap, topic, [b"later"])
    second = make()
    try:
        fresh = kafka_python_read(second, 1)
        assert [r.value for r in fresh] == [b"later"]
    finally:
        second.close()


def test_confluent_static_member_restart_keeps_partitions_without_rebalance(
    group_broker: BrokerProcess,
) -> None:
    topic, group = unique("static"), unique("group")
    produce(group_broker.bootstrap, topic, [b"s"] * 8)
    events: list[str] = []

    def static(instance: str, record: bool) -> Consumer:
        consumer = rdkafka_consumer(group_broker.bootstrap, group, **{"group.instance.id": instance})
        seen = events if record else []
        consumer.subscribe(
            [topic],
            on_assign=lambda c, p: seen.append(f"assign {len(p)}"),
            on_revoke=lambda c, p: seen.append(f"revoke {len(p)}"),
        )
        return consumer

    first, other = static("i1", False), static("i2", True)
    drain([first, other], lambda got: [len(c.assignment()) for c in (first, other)] == [2, 2])
    before = {tp.partition for tp in first.assignment()}
    assert len(before) == 2
    events.clear()
    first.close()  # a static member sends no LeaveGroup: the group waits for it
    restarted = static("i1", False)
    try:
        drain([restarted, other], lambda got: len(restarted.assignment()) == 2)
        assert {tp.partition for tp in restarted.assignment()} == before
        drain([restarted, other], lambda got: False, timeout_s=1.5)
        assert events == []  # the other member saw no rebalance
        assert len(other.assignment()) == 2
    finally:
        restarted.close()
        other.close()
