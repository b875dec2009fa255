"""Transactional producers of confluent-kafka, aiokafka and kafka-python against the reference
broker, read back by read_committed consumers: committed data visible, aborted data never, offsets
sent to a transaction visible only once it commits, fencing by a second producer with the same
transactional.id, a hung transaction aborted by the coordinator's timeout, and a broker killed
with SIGKILL while transactions are open leaving none half-visible."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

TXN_BROKER = {
    "num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(config=TXN_BROKER) as proc:
        yield proc


def txn_producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    config.update(extra)
    producer = Producer(config)
    producer.init_transactions(15)
    return producer


def read(
    bootstrap: str,
    topic: str,
    done: Callable[[list[bytes]], bool],
    *,
    committed: bool = True,
    timeout_s: float = 20,
) -> list[bytes]:
    """Every value of both partitions (from the beginning, no group) until ``done`` says so."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in (0, 1)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not done(got):
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def has_all(*wanted: bytes) -> Callable[[list[bytes]], bool]:
    return lambda got: set(wanted) <= set(got)


def quiet_after(wanted: bytes, quiet_s: float) -> Callable[[list[bytes]], bool]:
    """Done ``quiet_s`` seconds after ``wanted`` arrived: what a reader should not see has had
    that long to show up, however long ``wanted`` took on a busy machine."""
    seen_at: list[float] = []

    def done(got: list[bytes]) -> bool:
        if wanted not in got:
            return False
        if not seen_at:
            seen_at.append(time.monotonic())
        return time.monotonic() - seen_at[0] >= quiet_s

    return done


def test_confluent_commit_and_abort(txn_broker: BrokerProcess) -> None:
    topic = unique("txn")
    producer = txn_producer(txn_broker.bootstrap, unique("tid"))
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(15)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"aborted-%d" % i, partition=i % 2)
    producer.flush(15)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, b"end-0", partition=0)
    producer.produce(topic, b"end-1", partition=1)
    producer.commit_transaction(15)

    got = read(txn_broker.bootstrap, topic, has_all(b"end-0", b"end-1"))
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(10)] + [b"end-0", b"end-1"])
    everything = read(txn_broker.bootstrap, topic, lambda g: len(g) >= 22, committed=False)
    assert sum(v.startswith(b"aborted") for v in everything) == 10  # written, then aborted


def test_confluent_open_transaction_holds_read_committed_back(txn_broker: BrokerProcess) -> None:
    topic = unique("txn-open")
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(10)
    producer = txn_producer(txn_broker.bootstrap, unique("tid"))
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=0)
    producer.flush(10)
    plain.produce(topic, b"after", partition=0)
    plain.flush(10)
    # Behind the open transaction: "after" is above the last stable offset.
    got = read(txn_broker.bootstrap, topic, quiet_after(b"before", 1.0))
    assert got == [b"before"]
    producer.commit_transaction(15)
    assert read(txn_broker.bootstrap, topic, has_all(b"after")) == [b"before", b"pending", b"after"]


def test_confluent_offsets_visible_only_after_commit(txn_broker: BrokerProcess) -> None:
    source, sink, group = unique("src"), unique("sink"), unique("group")
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(6):
        plain.produce(source, b"in-%d" % i, partition=0)
    plain.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": txn_broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    # read_uncommitted: librdkafka's committed() then asks without require_stable (KIP-447), so a
    # pending offset reads as "none" instead of being waited for.
    checker = Consumer(
        {"bootstrap.servers": txn_broker.bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    producer = txn_producer(txn_broker.bootstrap, unique("tid"))
    try:
        consumer.subscribe([source])
        seen = []
        deadline = time.monotonic() + 20
        while len(seen) < 6 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg)
        assert len(seen) == 6
        producer.begin_transaction()
        for msg in seen:
            producer.produce(sink, msg.value().upper(), partition=0)
        # Its group metadata carries the generation and member id (KIP-447's checks).
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 6)], consumer.consumer_group_metadata(), 15
        )
        assert checker.committed([TopicPartition(source, 0)], 10)[0].offset < 0  # pending
        producer.commit_transaction(15)
        assert checker.committed([TopicPartition(source, 0)], 10)[0].offset == 6
        assert len(read(txn_broker.bootstrap, sink, lambda g: len(g) >= 6)) == 6

        # Offsets of an aborted transaction are dropped.
        producer.begin_transaction()
        producer.produce(sink, b"x", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 99)], consumer.consumer_group_metadata(), 15
        )
        producer.abort_transaction(15)
        assert checker.committed([TopicPartition(source, 0)], 10)[0].offset == 6
    finally:
        consumer.close()
        checker.close()


def test_confluent_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    topic, transactional_id = unique("fence"), unique("tid")
    first = txn_producer(txn_broker.bootstrap, transactional_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(10)
    second = txn_producer(txn_broker.bootstrap, transactional_id)  # aborts the first's transaction
    second.begin_transaction()
    second.produce(topic, b"successor", partition=0)
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as failure:
        first.commit_transaction(10)
    error: KafkaError = failure.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert read(txn_broker.bootstrap, topic, has_all(b"successor")) == [b"successor"]


def test_hung_transaction_is_aborted_after_its_timeout(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(TXN_BROKER)
    topic = unique("hung")
    hung = txn_producer(
        broker.bootstrap, unique("tid"), **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1000}
    )
    hung.begin_transaction()
    hung.produce(topic, b"never", partition=0)
    hung.flush(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"later", partition=0)
    plain.flush(10)
    # The coordinator aborts the hung transaction after its 1.5 s timeout and readers move past
    # it; a broker that never aborted it would leave "later" unread until the read gives up.
    got = read(broker.bootstrap, topic, has_all(b"later"), timeout_s=30)
    assert got == [b"later"]
    with pytest.raises(KafkaException):
        hung.commit_transaction(10)


def test_broker_killed_with_transactions_in_flight(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(TXN_BROKER)
    topic = unique("crash")
    done_id, open_id = unique("done"), unique("open")
    done = txn_producer(broker.bootstrap, done_id)
    done.begin_transaction()
    for i in range(5):
        done.produce(topic, b"committed-%d" % i, partition=i % 2)
    done.commit_transaction(15)
    left_open = txn_producer(broker.bootstrap, open_id)
    left_open.begin_transaction()
    for i in range(5):
        left_open.produce(topic, b"open-%d" % i, partition=i % 2)
    left_open.flush(10)
    broker.restart(kill=True)
    # The open transaction's producer is replaced: its successor's init aborts it.
    successor = txn_producer(broker.bootstrap, open_id)
    successor.begin_transaction()
    successor.produce(topic, b"end-0", partition=0)
    successor.produce(topic, b"end-1", partition=1)
    successor.commit_transaction(15)
    got = read(broker.bootstrap, topic, has_all(b"end-0", b"end-1"))
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(5)] + [b"end-0", b"end-1"])


async def test_aiokafka_transactional_producer(txn_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic, group = unique("aio-txn"), unique("aio-group")
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=txn_broker.bootstrap, transactional_id=unique("tid")
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(4):
                await producer.send_and_wait(topic, b"aio-%d" % i, partition=i % 2)
            await producer.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 2}, group)
        with pytest.raises(RuntimeError):
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-aborted", partition=0)
                raise RuntimeError("abort it")
        async with producer.transaction():
            await producer.send_and_wait(topic, b"end-0", partition=0)
            await producer.send_and_wait(topic, b"end-1", partition=1)
    finally:
        await producer.stop()
    got = read(txn_broker.bootstrap, topic, has_all(b"end-0", b"end-1"))
    assert sorted(got) == sorted([b"aio-%d" % i for i in range(4)] + [b"end-0", b"end-1"])
    checker = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    try:
        assert checker.committed([TopicPartition(topic, 0)], 10)[0].offset == 2
    finally:
        checker.close()


def test_kafka_python_transactional_producer(txn_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    if not hasattr(kafka.KafkaProducer, "init_transactions"):
        pytest.skip("this kafka-python has no transactional producer")
    topic = unique("kp-txn")
    producer = kafka.KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=unique("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, b"kp-%d" % i, partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-aborted", partition=0).get(10)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"end-0", partition=0)
        producer.send(topic, b"end-1", partition=1)
        producer.commit_transaction()
    finally:
        producer.close(5)
    got = read(txn_broker.bootstrap, topic, has_all(b"end-0", b"end-1"))
    assert sorted(got) == sorted([b"kp-%d" % i for i in range(4)] + [b"end-0", b"end-1"])


def _committed_and_aborted(bootstrap: str, topic: str) -> None:
    producer = txn_producer(bootstrap, unique("tid"))
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(10)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(15)


async def test_aiokafka_read_committed_consumer(txn_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic = unique("aio-rc")
    _committed_and_aborted(txn_broker.bootstrap, topic)
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=txn_broker.bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        partition = aiokafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        batch = await consumer.getmany(partition, timeout_ms=5000)
        assert [r.value for r in batch.get(partition, [])] == [b"committed"]
        # The position is past the markers: the last stable offset (2 records + 2 markers).
        assert await consumer.end_offsets([partition]) == {partition: 4}
    finally:
        await consumer.stop()


def test_kafka_python_read_committed_consumer(txn_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    topic = unique("kp-rc")
    _committed_and_aborted(txn_broker.bootstrap, topic)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=txn_broker.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        partition = kafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        assert [r.value for r in consumer] == [b"committed"]
    finally:
        consumer.close()
