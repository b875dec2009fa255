"""The peer clients through a partition leader's crash on a three-node cluster, ours and Apache
Kafka's: aiokafka, kafka-python and kcat (librdkafka) each produce numbered records with acks=all
and idempotence to an RF=3, ``min.insync.replicas=2`` partition while a consumer of the same
library reads it, and the leader is killed with SIGKILL (and restarted) midway. Every acknowledged
record is stored once, in send order, and the consumer that read through the crash saw exactly
the stored records. (confluent-kafka and the SDK run the same scenario in
``test_cluster_acceptance.py``.)
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from tests.reference_broker.cluster.three_nodes import ThreeNodes, create_topic, until

pytestmark = [pytest.mark.interop, pytest.mark.slow]

BEFORE_KILL = 150
AFTER_KILL = 150


class Run:
    """One client's run: acknowledged values, the values its consumer read, the kill's moment."""

    def __init__(self, nodes: ThreeNodes, topic: str) -> None:
        self.nodes = nodes
        self.topic = topic
        self.acked: list[bytes] = []
        self.read: list[bytes] = []
        self.killed = threading.Event()
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self.kill_count = 0

    def wants_more(self) -> bool:
        """Produce on until ``AFTER_KILL`` records were acknowledged after the leader's crash."""
        if not self.killed.is_set():
            if len(self.acked) >= BEFORE_KILL:
                leader = self.nodes.leader_of(self.topic, 0)
                self.nodes.crash_and_restart(leader)
                self.kill_count = len(self.acked)
                self.killed.set()
            return True
        return len(self.acked) < self.kill_count + AFTER_KILL

    def in_thread(self, target: Callable[[], None]) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:  # reported by check()
                self.errors.append(exc)

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        return thread

    def check(self) -> None:
        assert not self.errors, self.errors
        assert self.killed.is_set(), "the leader was not killed while producing"
        expected = [value(i) for i in range(len(self.acked))]
        assert self.acked == expected, "acknowledged out of order"
        assert self.read == expected, (len(self.read), len(expected), self.read[-3:], expected[-3:])


def value(i: int) -> bytes:
    return f"v-{i:06d}".encode()


@pytest.fixture
def topic(nodes: ThreeNodes) -> str:
    name = f"peers-{uuid.uuid4().hex[:8]}"
    create_topic(nodes.bootstrap, name, partitions=1)
    return name


def test_aiokafka_produces_and_consumes_through_a_leader_crash(
    nodes: ThreeNodes, topic: str
) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    run = Run(nodes, topic)

    async def produce() -> None:
        async with aiokafka.AIOKafkaProducer(
            bootstrap_servers=nodes.bootstrap, acks="all", enable_idempotence=True,
            request_timeout_ms=5000, retry_backoff_ms=200,
        ) as producer:
            while run.wants_more():
                start = len(run.acked)
                futures = [await producer.send(topic, value(start + i), partition=0) for i in range(10)]
                for future in futures:
                    await future
                run.acked += [value(start + i) for i in range(len(futures))]
        run.done.set()

    async def consume() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=nodes.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
            request_timeout_ms=10000, retry_backoff_ms=200,
        )
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=300)
                for records in batches.values():
                    run.read += [r.value for r in records]
                if run.done.is_set() and len(run.read) >= len(run.acked):
                    await asyncio.sleep(1)  # a duplicate would arrive now
                    batches = await consumer.getmany(timeout_ms=300)
                    run.read += [r.value for records in batches.values() for r in records]
                    return
        finally:
            await consumer.stop()

    consumer = run.in_thread(lambda: asyncio.run(consume()))
    run.in_thread(lambda: asyncio.run(produce())).join(180)
    run.done.set()
    consumer.join(150)
    run.check()


def test_kafka_python_produces_and_consumes_through_a_leader_crash(
    nodes: ThreeNodes, topic: str
) -> None:
    kafka = pytest.importorskip("kafka")
    run = Run(nodes, topic)

    def produce() -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=nodes.bootstrap.split(","), acks="all",
                                       enable_idempotence=True, request_timeout_ms=5000,
                                       retry_backoff_ms=200, max_block_ms=60000)
        try:
            while run.wants_more():
                start = len(run.acked)
                futures = [producer.send(topic, value(start + i), partition=0) for i in range(10)]
                for future in futures:
                    future.get(timeout=90)
                run.acked += [value(start + i) for i in range(len(futures))]
        finally:
            producer.close(10)
            run.done.set()

    def consume() -> None:
        consumer = kafka.KafkaConsumer(bootstrap_servers=nodes.bootstrap.split(","),
                                       auto_offset_reset="earliest", enable_auto_commit=False,
                                       request_timeout_ms=10000, retry_backoff_ms=200)
        try:
            partition = kafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek_to_beginning(partition)
            deadline = time.monotonic() + 120
            settled = None
            while time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=300).values():
                    run.read += [r.value for r in records]
                if run.done.is_set() and len(run.read) >= len(run.acked):
                    settled = settled or time.monotonic() + 1  # a duplicate would arrive now
                    if time.monotonic() > settled:
                        return
        finally:
            consumer.close()

    consumer = run.in_thread(consume)
    run.in_thread(produce).join(180)
    run.done.set()
    consumer.join(150)
    run.check()


def test_kcat_produces_and_consumes_through_a_leader_crash(
    nodes: ThreeNodes, topic: str
) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed (.ci/run installs it)")
    run = Run(nodes, topic)
    common = ["-b", nodes.bootstrap, "-t", topic, "-p", "0"]
    # One kcat producer for the whole run, a record per line: kcat reports a failed delivery on
    # stderr and exits non-zero, so exit 0 means every line was acknowledged.
    producer = subprocess.Popen(
        [kcat, "-P", *common, "-X", "acks=all", "-X", "enable.idempotence=true",
         "-X", "message.timeout.ms=90000", "-X", "linger.ms=5"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    consumer = subprocess.Popen(
        [kcat, "-C", *common, "-o", "beginning", "-u", "-f", "%s\\n"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(consumer.stdout.readline, b"")), daemon=True)
    reader.start()
    written = 0
    assert producer.stdin is not None
    try:
        while True:
            producer.stdin.write(value(written) + b"\n")
            producer.stdin.flush()
            written += 1
            if written == BEFORE_KILL:
                until(lambda: len(lines) >= BEFORE_KILL // 2, "kcat's consumer reads the first records", 60)
                run.nodes.crash_and_restart(run.nodes.leader_of(topic, 0))
                run.killed.set()
            if written >= BEFORE_KILL + AFTER_KILL:
                break
            time.sleep(0.005)
        producer.stdin.close()
        assert producer.wait(120) == 0, producer.stderr.read().decode() if producer.stderr else ""
        run.acked = [value(i) for i in range(written)]
        until(lambda: len(lines) >= written, f"kcat's consumer reads {written} records", 90)
        time.sleep(1)  # a duplicate would arrive now
    finally:
        for process in (producer, consumer):
            if process.poll() is None:
                process.kill()
            process.wait()
        reader.join(10)
    run.read = [line.rstrip(b"\n") for line in lines]
    run.check()

