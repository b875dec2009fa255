"""Exactly-once copy with bounces, as Kafka's transactions system test does it (bounded form):
numbered messages on a 3-partition input topic are copied and transformed to an output topic by
a confluent-kafka copier process (read_committed consumer + transactional producer + offsets sent
to the transaction), while the copier and the broker are killed with SIGKILL and restarted. The
output, read with read_committed, must be exactly the transformed input: nothing missing, nothing
twice, in order per partition."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.messages import ListOffsetsRequest
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

PARTITIONS = 3
MESSAGES = 3000
BROKER = {
    "num.partitions": PARTITIONS,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}

COPIER = textwrap.dedent(
    """
    import os
    import sys
    import time
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    bootstrap, source, sink, group, partitions = sys.argv[1:6]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    # assign, not subscribe: a killed copier leaves no member behind for its successor to wait for.
    consumer.assign([TopicPartition(source, p) for p in range(int(partitions))])
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": group + "-copier", "linger.ms": 2,
        "transaction.timeout.ms": 5000, "message.timeout.ms": 4000,
    })
    producer.init_transactions(20)
    try:
        while True:
            # Small transactions, paced, so that the bounces land in the middle of the copy.
            messages = [m for m in consumer.consume(50, 0.3) if m.error() is None]
            time.sleep(0.1)
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, b"copied-" + m.value(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 5)
            producer.commit_transaction(5)
    except KafkaException as exc:
        # A copier that fails dies and is restarted by the test, like a crashed one; os._exit
        # because librdkafka's destroy can wait on a broker connection that was cut.
        print("copier stops:", exc, file=sys.stderr, flush=True)
        os._exit(3)
    """
)


def output_by_partition(
    bootstrap: str, topic: str, expected: int, timeout_s: float
) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and sum(map(len, got.values())) < expected:
            for m in consumer.consume(500, 0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append(m.value())
    finally:
        consumer.close()
    return got


def stable_end(bootstrap: str, topic: str) -> int:
    """The sum of the topic's last stable offsets (ListOffsets latest under read_committed)."""
    wanted = [
        ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(PARTITIONS)
    ]
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=wanted)],
    )
    with WireClient(bootstrap) as wire:
        answer = wire.request(request, 5)
    return sum(max(p.offset, 0) for t in answer.topics for p in t.partitions)


class Copier:
    def __init__(self, script: Path, args: list[str], log: Path):
        self.args = [sys.executable, str(script), *args]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(self.args, stdout=log, stderr=log)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def test_exactly_once_copy_with_copier_and_broker_bounces(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(BROKER)
    source, sink, group = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("in", "out", "eos"))
    seed = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(MESSAGES):
        seed.produce(source, b"%06d" % i, partition=i % PARTITIONS)
    assert seed.flush(20) == 0
    script = tmp_path / "copier.py"
    script.write_text(COPIER)
    copier = Copier(script, [broker.bootstrap, source, sink, group, str(PARTITIONS)], tmp_path / "copier.log")
    try:
        copier.ensure_running()
        progress = []
        for _ in range(3):
            time.sleep(1.0)
            copier.kill()
            copier.ensure_running()
            time.sleep(1.0)
            progress.append(stable_end(broker.bootstrap, sink))
            broker.restart(kill=True)
            copier.ensure_running()
        # A watchdog, as a copier's supervisor would have: librdkafka 2.x can block in
        # send_offsets_to_transaction past its timeout once the broker it cached as group
        # coordinator was decommissioned after a restart (confluentinc/librdkafka#5456, #5511),
        # so a copier that makes no progress for 4 s is killed and restarted.
        deadline = time.monotonic() + 60
        last_end, last_progress = -1, time.monotonic()
        while time.monotonic() < deadline:
            end = stable_end(broker.bootstrap, sink)
            if (
                end >= MESSAGES + 1
                and sum(map(len, output_by_partition(broker.bootstrap, sink, MESSAGES, 2).values()))
                >= MESSAGES
            ):
                break
            if end != last_end:
                last_end, last_progress = end, time.monotonic()
            elif time.monotonic() - last_progress > 4:
                copier.kill()
                last_progress = time.monotonic()
            copier.ensure_running()
            time.sleep(0.3)
    finally:
        copier.kill()
    got = output_by_partition(broker.bootstrap, sink, MESSAGES, 20)
    # Output records and markers below the last stable offsets: fewer than the input means the copy
    # was still going when the broker was killed.
    assert progress[1] < MESSAGES, f"the copy finished before the second broker bounce: {progress}"
    for p in range(PARTITIONS):
        expected = [b"copied-%06d" % i for i in range(p, MESSAGES, PARTITIONS)]
        assert got[p] == expected, (
            p,
            len(got[p]),
            len(expected),
            (tmp_path / "copier.log").read_text()[-2000:],
        )


WRITER = textwrap.dedent(
    """
    import os
    import sys
    import uuid
    from confluent_kafka import KafkaException, Producer

    bootstrap, topic, transactional_id, partitions = sys.argv[1:5]
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 1,
        "transaction.timeout.ms": 5000, "message.timeout.ms": 4000,
    })
    run = uuid.uuid4().hex[:8]
    try:
        producer.init_transactions(10)
        for n in range(1_000_000):
            producer.begin_transaction()
            for p in range(int(partitions)):
                producer.produce(topic, f"{run}-{n}".encode(), partition=p)
            producer.commit_transaction(5)
    except KafkaException as exc:
        print("writer stops:", exc, file=sys.stderr, flush=True)
        os._exit(3)
    """
)


def test_transactions_stay_atomic_across_broker_kills(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """Each transaction writes one record to every partition; whatever moment the broker is
    killed, a read_committed reader finds each transaction on all partitions or on none."""
    broker = broker_factory(BROKER)
    topic, transactional_id = f"atomic-{uuid.uuid4().hex[:8]}", f"writer-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = Copier(
        script, [broker.bootstrap, topic, transactional_id, str(PARTITIONS)], tmp_path / "writer.log"
    )
    try:
        writer.ensure_running()
        for _ in range(3):
            time.sleep(1.0)
            broker.restart(kill=True)
            writer.ensure_running()
        time.sleep(1.0)
    finally:
        writer.kill()
    # A successor with the same transactional id aborts whatever the writer left open.
    Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}).init_transactions(
        15
    )
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 20
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.2):
                if m.error() is not None:
                    assert m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                else:
                    seen[m.partition()].append(m.value())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS
    assert seen[0], "nothing was committed"
    for p in range(1, PARTITIONS):
        assert seen[p] == seen[0], f"partition {p} differs: a transaction is half-visible"
