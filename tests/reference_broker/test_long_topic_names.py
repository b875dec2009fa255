"""Topics with the longest legal names (up to 249 characters) through create, delete and restart.

A file or directory name may hold 255 bytes. Kafka allows 249-character topic names, so every name
the broker derives from a topic name (partition directories, the topic's metadata file and its
temp file, the renamed directories of a deleted or stray partition) must be shortened or chosen so
that it fits, as Kafka's ``LocalLog.logDeleteDirName`` truncates the topic part of
``<topic>-<partition>.<uuid>-delete``. A creation that fails leaves nothing behind, and nothing a
failed creation or deletion leaves may stop the next start.

The create/delete/restart tests run against Apache Kafka too (``apache_kafka`` marker), which
does all of this.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference_broker.testing import BrokerFactory, BrokerProcess

TIMEOUT = 30.0
#: Names this long make ``<topic>.json.tmp`` (the topic file's temp name) longer than 255 bytes.
CREATE_LENGTHS = (247, 248, 249)
#: Names this long make ``<topic>-0.<32 hex digits>-delete`` longer than 255 bytes.
DELETE_LENGTHS = (214, 230, 246, 247, 249)


class Broker(Protocol):
    """What these tests need of a broker: ours (``BrokerProcess``) or Kafka's (``KafkaNode``)."""

    @property
    def bootstrap(self) -> str: ...

    def restart(self, *, kill: bool = False) -> Any: ...


@pytest.fixture(params=["reference_broker", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def any_broker(request: pytest.FixtureRequest, broker_factory: BrokerFactory) -> Broker:
    """A fresh broker with 2 partitions per auto-created topic, ours or Apache Kafka."""
    if request.param == "reference_broker":
        return broker_factory({"num.partitions": 2})
    start: Callable[..., Broker] = request.getfixturevalue("apache_kafka_factory")
    return start(**{"num.partitions": 2})


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


def long_name(length: int, tag: str) -> str:
    """A legal topic name of exactly ``length`` characters, unique per ``tag``."""
    head = f"{tag}-{length}-"
    return head + "x" * (length - len(head))


def admin_for(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topics(broker: Broker, names: list[str], partitions: int = 2) -> None:
    admin = admin_for(broker)  # kept referenced: the futures fail once the client is destroyed
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for name in names:
        futures[name].result(TIMEOUT)


def delete_topics(broker: Broker, names: list[str]) -> None:
    admin = admin_for(broker)
    futures = admin.delete_topics(names, operation_timeout=10)
    for name in names:
        futures[name].result(TIMEOUT)


def topic_names(broker: Broker) -> set[str]:
    return set(admin_for(broker).list_topics(timeout=TIMEOUT).topics)


def produce(broker: Broker, topic: str, values: list[bytes], partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    failures: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0, "records still undelivered"
    assert not failures, failures


def consume_all(broker: Broker, topic: str, partitions: int, expected: int) -> list[bytes]:
    """Every record of ``topic`` from offset 0, waiting until ``expected`` have arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return sorted(got)


def end_offsets(broker: Broker, topic: str, partitions: int) -> list[tuple[int, int]] | None:
    """Low and high watermark of each partition; None while the broker does not know them yet."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offsets-reader"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 5) for p in range(partitions)]
    except KafkaException:
        return None
    finally:
        consumer.close()


def values_for(topic: str, count: int = 6) -> list[bytes]:
    return [f"{len(topic)}:{i}".encode() for i in range(count)]


@pytest.mark.slow
def test_topics_named_up_to_249_characters_are_created_and_survive_restarts(any_broker: Broker) -> None:
    broker = any_broker
    tag = uuid.uuid4().hex[:6]
    names = [long_name(n, tag) for n in CREATE_LENGTHS]
    create_topics(broker, names)
    for name in names:
        produce(broker, name, values_for(name))
    broker.restart()
    wait_for(lambda: set(names) <= topic_names(broker), "the topics are listed after the restart")
    for name in names:
        assert consume_all(broker, name, 2, 6) == sorted(values_for(name))
        produce(broker, name, [b"after-restart"])
    broker.restart(kill=True)
    for name in names:
        assert consume_all(broker, name, 2, 7) == sorted([*values_for(name), b"after-restart"])


@pytest.mark.slow
def test_a_producer_auto_creates_a_249_character_topic_that_survives_a_restart(any_broker: Broker) -> None:
    broker = any_broker
    name = long_name(249, uuid.uuid4().hex[:6])
    produce(broker, name, values_for(name))
    broker.restart()
    assert consume_all(broker, name, 2, 6) == sorted(values_for(name))


@pytest.mark.slow
def test_deleting_long_named_topics_then_restarting_leaves_no_trace(any_broker: Broker) -> None:
    broker = any_broker
    tag = uuid.uuid4().hex[:6]
    names = [long_name(n, tag) for n in DELETE_LENGTHS]
    create_topics(broker, names)
    for name in names:
        produce(broker, name, values_for(name))
    delete_topics(broker, names)
    wait_for(lambda: not set(names) & topic_names(broker), "the deleted topics are no longer listed")
    broker.restart()
    assert not set(names) & topic_names(broker)
    if isinstance(broker, BrokerProcess):
        # ``-delete`` directories wait out log.segment.delete.delay.ms, as Kafka's do
        leftovers = [p.name for p in broker.data_dir.iterdir()
                     if p.name.startswith(f"{tag}-") and not p.name.endswith("-delete")]
        assert leftovers == []
    # The names are free again, and the new topics start empty.
    create_topics(broker, names)
    for name in names:
        wait_for(lambda name=name: end_offsets(broker, name, 2) == [(0, 0), (0, 0)],
                 f"{name[:20]}... answers as an empty topic")
    produce(broker, names[-1], [b"second-life"])
    broker.restart(kill=True)
    assert consume_all(broker, names[-1], 2, 1) == [b"second-life"]


def test_a_creation_that_fails_leaves_nothing_behind_and_the_broker_restarts(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    name = long_name(230, uuid.uuid4().hex[:6])
    # A directory where the topic's metadata temp file must go makes its write fail after the
    # partition directories were made.
    blocker = broker.data_dir / ".topics" / f"{name}.json.tmp"
    blocker.mkdir()
    with pytest.raises(KafkaException):
        create_topics(broker, [name], partitions=3)
    assert partition_dirs(broker.data_dir, name) == []
    assert name not in topic_names(broker)
    broker.restart()
    assert name not in topic_names(broker)
    blocker.rmdir()
    create_topics(broker, [name], partitions=3)
    produce(broker, name, values_for(name), partitions=3)
    broker.restart()
    assert consume_all(broker, name, 3, 6) == sorted(values_for(name))


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    """Directories of ``topic``'s partitions, live or renamed (by their full-name prefix)."""
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(f"{topic}-"))


def test_directories_no_topic_owns_never_stop_a_start(broker_factory: BrokerFactory) -> None:
    """A partition directory of a 249-character name no topic owns (as a failed creation used to
    leave) is moved aside under a name that fits; one that cannot be moved aside at all (its
    ``-stray`` name cannot fit) is logged and left in place, unserved; the broker starts."""
    broker = broker_factory()
    broker.terminate()
    orphan_topic = long_name(249, uuid.uuid4().hex[:6])
    orphan = broker.data_dir / f"{orphan_topic}-0"
    orphan.mkdir()
    (orphan / "00000000000000000000.log").write_bytes(b"")
    immovable = broker.data_dir / f"immovable-{'9' * 240}"
    immovable.mkdir()
    broker.start()
    assert not orphan.exists()
    strays = [p.name for p in broker.data_dir.iterdir() if p.name.endswith("-stray")]
    assert len(strays) == 1 and strays[0].startswith(orphan_topic[:200]), strays
    assert len(strays[0]) <= 255
    assert immovable.is_dir()
    assert orphan_topic not in topic_names(broker)
    # The orphan's name is free: a new topic of that name starts empty.
    create_topics(broker, [orphan_topic], partitions=1)
    assert end_offsets(broker, orphan_topic, 1) == [(0, 0)]
