"""aiokafka's own example programs and documentation snippets, run against the reference broker
with only the import changed (``aiokafka`` -> ``sdk``).

The programs are aiokafka's (Apache License 2.0): ``examples/*.py``, the snippets of
``docs/index.rst``, ``docs/consumer.rst``, ``docs/producer.rst`` and ``docs/examples/*.rst``, as of
aiokafka 0.14. Each runs as its own process, as a user runs it; the harness only puts the test
broker's address where the text says ``localhost:9092`` (or gives the address to an
``AIOKafkaProducer()`` that relies on that default), and wraps a snippet that uses ``await`` at
top level in ``async def main()`` with the names it assumes defined before it (``PRELUDE``). A
program that runs forever is stopped once its output shows it worked.

Not run: ``examples/ssl_consume_produce.py`` (needs a TLS listener and certificates: the security
tests cover that path), the Redis snippet of "Storing Offsets Outside Kafka" (needs Redis), the
deadlock warning of "Consumer Groups" (it is meant to hang), and ``docs/examples/group_consumer.rst``'s
consumer (it calls ``consume(group_id, msg_cnt)``, defined without parameters: a ``TypeError`` in
aiokafka too).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.testing import BrokerProcess
from sdk.sync import Consumer as SyncConsumer
from sdk.sync import Producer as SyncProducer

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3


@pytest.fixture
def kafka() -> Iterator[BrokerProcess]:
    """A fresh broker per program: the programs use fixed topic and group names."""
    with BrokerProcess(config={"num.partitions": PARTITIONS}) as proc:
        yield proc


class Program:
    """One program as a child process; stdout and stderr go to files read while it runs."""

    def __init__(self, source: str, bootstrap: str, workdir: Path, stdin: bytes | None = None) -> None:
        text = source.replace("localhost:9092", bootstrap)
        text = text.replace("AIOKafkaProducer()", f"AIOKafkaProducer(bootstrap_servers={bootstrap!r})")
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "program.py"
        self.path.write_text(text)
        self.out_path, self.err_path = workdir / "stdout.txt", workdir / "stderr.txt"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   PYTHONUNBUFFERED="1")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(self.path)], stdout=out, stderr=err, cwd=workdir, env=env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            )
        if stdin is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def describe(self) -> str:
        out, err = self.stdout[-3000:], self.stderr[-3000:]
        return f"exit {self.proc.poll()}\n--- stdout\n{out}\n--- stderr\n{err}"

    def finish(self, timeout: float = 90) -> str:
        """Wait for the program to exit; its stdout (fails unless it exited 0)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"did not finish within {timeout} s\n{self.describe()}") from None
        assert self.proc.returncode == 0, self.describe()
        return self.stdout

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60) -> list[str]:
        """Wait until stdout has ``count`` matches of ``pattern`` (fails if it exits first)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.findall(pattern, self.stdout)
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"exited before printing {pattern!r} x{count}\n{self.describe()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"no {pattern!r} x{count} within {timeout} s\n{self.describe()}")
            time.sleep(0.05)

    def alive_for(self, seconds: float) -> None:
        """The program keeps running (no error) for ``seconds``."""
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return
        raise AssertionError(f"exited early\n{self.describe()}")

    def stop(self) -> None:
        """SIGINT first (a user's Ctrl-C: the program's ``finally`` stops its client), then kill."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def snippet(imports: str, body: str, prelude: str = "") -> str:
    """A documentation fragment that uses ``await`` at top level, as a program."""
    return (
        "import asyncio\n" + textwrap.dedent(imports) + "\n" + textwrap.dedent(prelude)
        + "\nasync def main():\n" + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n\nasyncio.run(main())\n"
    )


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None,
            key: bytes | None = None) -> None:
    with SyncProducer(bootstrap_servers=bootstrap) as producer:
        futures = [producer.send(topic, v, key=key, partition=partition) for v in values]
        for f in futures:
            f.result(timeout=30)


def read_all(bootstrap: str, topic: str, expected: int, **settings: object) -> list[bytes]:
    """Every record of ``topic`` (read_committed unless told), until ``expected`` came or 20 s."""
    options = {"auto_offset_reset": "earliest", "isolation_level": "read_committed", **settings}
    values: list[bytes] = []
    with SyncConsumer(bootstrap_servers=bootstrap, **options) as consumer:
        consumer.assign([(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.getmany(timeout_ms=500).values():
                values.extend(r.value for r in records)
    return values


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    with SyncConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        return {p: consumer.committed((topic, p)) for p in range(PARTITIONS)}


def wait_then_produce(program: Program, bootstrap: str, topic: str, value: bytes, pattern: str,
                      partition: int | None = None) -> None:
    """Produce ``value`` (to every partition, or to ``partition``) until ``pattern`` shows in the
    program's output: a consumer starting at 'latest' may take a moment to have its positions."""
    deadline = time.monotonic() + 60
    while not re.search(pattern, program.stdout):
        assert program.proc.poll() is None, program.describe()
        assert time.monotonic() < deadline, program.describe()
        for p in range(PARTITIONS) if partition is None else [partition]:
            produce(bootstrap, topic, [value], partition=p)
        time.sleep(0.5)


# -- examples/*.py --------------------------------------------------------------------------------

EXAMPLE_BATCH_PRODUCE = '''
import asyncio
import random

from sdk import AIOKafkaProducer


async def send_many(num):
    topic  = "my_topic"
    producer = AIOKafkaProducer()
    await producer.start()

    batch = producer.create_batch()

    i = 0
    while i < num:
        msg = ("Test message %d" % i).encode("utf-8")
        metadata = batch.append(key=None, value=msg, timestamp=None)
        if metadata is None:
            partitions = await producer.partitions_for(topic)
            partition = random.choice(tuple(partitions))
            await producer.send_batch(batch, topic, partition=partition)
            print("%d messages sent to partition %d"
                  % (batch.record_count(), partition))
            batch = producer.create_batch()
            continue
        i += 1
    partitions = await producer.partitions_for(topic)
    partition = random.choice(tuple(partitions))
    await producer.send_batch(batch, topic, partition=partition)
    print("%d messages sent to partition %d"
          % (batch.record_count(), partition))
    await producer.stop()


asyncio.run(send_many(1000))
'''


def test_example_batch_produce(kafka: BrokerProcess, tmp_path: Path) -> None:
    out = Program(EXAMPLE_BATCH_PRODUCE, kafka.bootstrap, tmp_path).finish()
    sent = [int(n) for n in re.findall(r"(\d+) messages sent to partition", out)]
    assert sum(sent) == 1000 and len(sent) > 1, out
    values = read_all(kafka.bootstrap, "my_topic", 1000)
    assert sorted(values) == sorted(b"Test message %d" % i for i in range(1000))


EXAMPLE_SIMPLE_PRODUCE = '''
from sdk import AIOKafkaProducer
import asyncio

async def send_one():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092'{options})

    # Get cluster layout and topic/partition allocation
    await producer.start()
    while True:
        try:
            # Produce messages
            res = await producer.send_and_wait("test-topic", b"Super message")
            print(res)
            await asyncio.sleep(1)
        except:
            await producer.stop()
            raise

asyncio.run(send_one())
'''


@pytest.mark.parametrize("options", ["", ", enable_idempotence=True"], ids=["simple", "idempotent"])
def test_example_simple_and_idempotent_produce(kafka: BrokerProcess, tmp_path: Path, options: str) -> None:
    program = Program(EXAMPLE_SIMPLE_PRODUCE.replace("{options}", options), kafka.bootstrap, tmp_path)
    try:
        program.wait_for(r"RecordMetadata\(topic='test-topic'", count=2)
    finally:
        program.stop()
    assert read_all(kafka.bootstrap, "test-topic", 2)[:2] == [b"Super message"] * 2


EXAMPLE_SIMPLE_CONSUMER = '''
from sdk import AIOKafkaConsumer
import asyncio

async def consume():
    consumer = AIOKafkaConsumer(
        "my_topic", bootstrap_servers='localhost:9092')
    # Get cluster layout and topic/partition allocation
    await consumer.start()
    try:
        async for msg in consumer:
            print(msg.value)
    finally:
        await consumer.stop()

asyncio.run(consume())
'''


def test_example_simple_consumer_reads_every_partition_without_a_group(
    kafka: BrokerProcess, tmp_path: Path
) -> None:
    produce(kafka.bootstrap, "my_topic", [b"old"])  # before the consumer: 'latest' skips it
    program = Program(EXAMPLE_SIMPLE_CONSUMER, kafka.bootstrap, tmp_path)
    try:
        for p in range(PARTITIONS):
            wait_then_produce(program, kafka.bootstrap, "my_topic", b"new-%d" % p, f"b'new-{p}'", partition=p)
    finally:
        program.stop()
    assert "b'old'" not in program.stdout


EXAMPLE_LOCAL_STATE_CONSUMER = '''
import asyncio
from sdk import AIOKafkaConsumer, ConsumerRebalanceListener
from sdk.errors import OffsetOutOfRangeError


import json
import pathlib
from collections import Counter

FILE_NAME_TMPL = "/tmp/my-partition-state-{tp.topic}-{tp.partition}.json"


class RebalanceListener(ConsumerRebalanceListener):

    def __init__(self, consumer, local_state):
        self.consumer = consumer
        self.local_state = local_state

    async def on_partitions_revoked(self, revoked):
        print("Revoked", revoked)
        self.local_state.dump_local_state()

    async def on_partitions_assigned(self, assigned):
        print("Assigned", assigned)
        self.local_state.load_local_state(assigned)
        for tp in assigned:
            last_offset = self.local_state.get_last_offset(tp)
            if last_offset < 0:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, last_offset + 1)


class LocalState:

    def __init__(self):
        self._counts = {}
        self._offsets = {}

    def dump_local_state(self):
        for tp in self._counts:
            fpath = pathlib.Path(FILE_NAME_TMPL.format(tp=tp))
            with fpath.open("w+") as f:
                json.dump({
                    "last_offset": self._offsets[tp],
                    "counts": dict(self._counts[tp])
                }, f)

    def load_local_state(self, partitions):
        self._counts.clear()
        self._offsets.clear()
        for tp in partitions:
            fpath = pathlib.Path(FILE_NAME_TMPL.format(tp=tp))
            state = {
                "last_offset": -1,  # Non existing, will reset
                "counts": {}
            }
            if fpath.exists():
                with fpath.open("r+") as f:
                    try:
                        state = json.load(f)
                    except json.JSONDecodeError:
                        pass
            self._counts[tp] = Counter(state['counts'])
            self._offsets[tp] = state['last_offset']

    def add_counts(self, tp, counts, last_offset):
        self._counts[tp] += counts
        self._offsets[tp] = last_offset

    def get_last_offset(self, tp):
        return self._offsets[tp]

    def discard_state(self, tps):
        for tp in tps:
            self._offsets[tp] = -1
            self._counts[tp] = Counter()


async def save_state_every_second(local_state):
    while True:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            break
        local_state.dump_local_state()


async def consume():
    consumer = AIOKafkaConsumer(
        bootstrap_servers='localhost:9092',
        group_id="my_group",           # Consumer must be in a group to commit
        enable_auto_commit=False,      # Will disable autocommit
        auto_offset_reset="none",
        key_deserializer=lambda key: key.decode("utf-8") if key else "",
    )
    await consumer.start()

    local_state = LocalState()
    listener = RebalanceListener(consumer, local_state)
    consumer.subscribe(topics=["test"], listener=listener)

    save_task = asyncio.create_task(save_state_every_second(local_state))

    try:

        while True:
            try:
                msg_set = await consumer.getmany(timeout_ms=1000)
            except OffsetOutOfRangeError as err:
                # This means that saved file is outdated and should be
                # discarded
                tps = err.args[0].keys()
                local_state.discard_state(tps)
                await consumer.seek_to_beginning(*tps)
                continue

            for tp, msgs in msg_set.items():
                counts = Counter()
                for msg in msgs:
                    print("Process", tp, msg.key)
                    counts[msg.key] += 1
                local_state.add_counts(tp, counts, msg.offset)

    finally:
        await consumer.stop()
        save_task.cancel()
        await save_task


if __name__ == "__main__":
    asyncio.run(consume())
'''


def test_example_local_state_consumer(kafka: BrokerProcess, tmp_path: Path) -> None:
    # The example keeps its state in /tmp/my-partition-state-test-<p>.json: this run's own name.
    topic = f"test{os.getpid()}x{time.monotonic_ns()}"
    source = EXAMPLE_LOCAL_STATE_CONSUMER.replace('topics=["test"]', f"topics=[{topic!r}]")
    for p in range(PARTITIONS):
        produce(kafka.bootstrap, topic, [b"v"], partition=p, key=b"k%d" % p)
    program = Program(source, kafka.bootstrap, tmp_path)
    try:
        program.wait_for(r"Process TopicPartition", count=PARTITIONS)
        assert "Assigned" in program.stdout
    finally:
        program.stop()
        for p in range(PARTITIONS):
            Path(f"/tmp/my-partition-state-{topic}-{p}.json").unlink(missing_ok=True)


EXAMPLE_TRANSACTIONAL_PRODUCE = '''
from sdk import AIOKafkaProducer
import asyncio

async def send_one():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        transactional_id="transactional_test")

    # Get cluster layout and topic/partition allocation
    await producer.start()
    try:
        async with producer.transaction():
            # Produce messages
            res = await producer.send_and_wait(
                "test-topic", b"Super transactional message")
            input()
            raise ValueError()
    finally:
        await producer.stop()
    print(res)

asyncio.run(send_one())
'''


def test_example_transactional_produce_aborts_on_the_error(kafka: BrokerProcess, tmp_path: Path) -> None:
    program = Program(EXAMPLE_TRANSACTIONAL_PRODUCE, kafka.bootstrap, tmp_path, stdin=b"\n")
    program.proc.wait(90)
    assert program.proc.returncode == 1 and "ValueError" in program.stderr, program.describe()
    produce(kafka.bootstrap, "test-topic", [b"after"])
    assert read_all(kafka.bootstrap, "test-topic", 1) == [b"after"]  # the aborted record is hidden


# -- docs/index.rst -------------------------------------------------------------------------------

INDEX_CONSUMER = '''
from sdk import AIOKafkaConsumer
import asyncio

async def consume():
    consumer = AIOKafkaConsumer(
        'my_topic', 'my_other_topic',
        bootstrap_servers='localhost:9092',
        group_id="my-group")
    # Get cluster layout and join group `my-group`
    await consumer.start()
    try:
        # Consume messages
        async for msg in consumer:
            print("consumed: ", msg.topic, msg.partition, msg.offset,
                  msg.key, msg.value, msg.timestamp)
    finally:
        # Will leave consumer group; perform autocommit if enabled.
        await consumer.stop()

asyncio.run(consume())
'''

INDEX_PRODUCER = '''
from sdk import AIOKafkaProducer
import asyncio

async def send_one():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092')
    # Get cluster layout and initial topic/partition leadership information
    await producer.start()
    try:
        # Produce message
        await producer.send_and_wait("my_topic", b"Super message")
    finally:
        # Wait for all pending messages to be delivered or expire.
        await producer.stop()

asyncio.run(send_one())
'''


def test_index_consumer_and_producer(kafka: BrokerProcess, tmp_path: Path) -> None:
    consumer = Program(INDEX_CONSUMER, kafka.bootstrap, tmp_path / "consumer")
    try:
        # The group is joined inside start(): wait until it committed its starting point, so the
        # producer's record is after the 'latest' position.
        deadline = time.monotonic() + 60
        while any(v is None for v in committed(kafka.bootstrap, "my-group", "my_topic").values()):
            assert consumer.proc.poll() is None, consumer.describe()
            assert time.monotonic() < deadline, consumer.describe()
            time.sleep(0.5)
        Program(INDEX_PRODUCER, kafka.bootstrap, tmp_path / "producer").finish()
        consumer.wait_for(r"consumed:  my_topic \d \d+ None b'Super message'")
    finally:
        consumer.stop()


# -- docs/consumer.rst ----------------------------------------------------------------------------

CONSUMER_SIMPLEST = snippet("import sdk as aiokafka", '''
consumer = aiokafka.AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092'
)
await consumer.start()
try:
    async for msg in consumer:
        print(
            "{}:{:d}:{:d}: key={} value={} timestamp_ms={}".format(
                msg.topic, msg.partition, msg.offset, msg.key, msg.value,
                msg.timestamp)
        )
finally:
    await consumer.stop()
''')


def test_consumer_simplest_usage(kafka: BrokerProcess, tmp_path: Path) -> None:
    program = Program(CONSUMER_SIMPLEST, kafka.bootstrap, tmp_path)
    try:
        pattern = r"my_topic:\d:\d+: key=None value=b'hi'"
        wait_then_produce(program, kafka.bootstrap, "my_topic", b"hi", pattern)
    finally:
        program.stop()


CONSUMER_POSITION = snippet("import sdk as aiokafka", '''
consumer = aiokafka.AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092',
    group_id="my_group",           # Consumer must be in a group to commit
    enable_auto_commit=True,       # Is True by default anyway
    auto_commit_interval_ms=1000,  # Autocommit every second
    auto_offset_reset="earliest",  # If committed offset not found, start
                                   # from beginning
)
await consumer.start()
msg = await consumer.getone()
print(msg.offset)  # Unique msg autoincrement ID in this topic-partition.

tp = aiokafka.TopicPartition(msg.topic, msg.partition)

position = await consumer.position(tp)
# Position is the next fetched offset
assert position == msg.offset + 1

committed = await consumer.committed(tp)
print(committed)
async for msg in consumer:  # Will periodically commit returned messages.
    # process message
    print("processed", msg.offset)
''')


def test_consumer_position_committed_and_auto_commit(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "my_topic", [b"a", b"b", b"c"], partition=0)
    program = Program(CONSUMER_POSITION, kafka.bootstrap, tmp_path)
    try:
        program.wait_for(r"processed 2")
        deadline = time.monotonic() + 30
        while committed(kafka.bootstrap, "my_group", "my_topic")[0] != 3:
            assert time.monotonic() < deadline, program.describe()
            time.sleep(0.5)
    finally:
        program.stop()


CONSUMER_MANUAL_COMMIT = snippet("from sdk import AIOKafkaConsumer", '''
consumer = AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092',
    group_id="my_group",           # Consumer must be in a group to commit
    enable_auto_commit=False,      # Will disable autocommit
    auto_offset_reset="earliest",  # If committed offset not found, start
                                   # from beginning
)
await consumer.start()

batch = []
async for msg in consumer:
    batch.append(msg)
    if len(batch) == 100:
        await process_msg_batch(batch)
        await consumer.commit()
        batch = []
''', prelude='''
async def process_msg_batch(batch):
    print("batch of", len(batch))
''')


def test_consumer_manual_commit_in_batches(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "my_topic", [b"%d" % i for i in range(200)], partition=1)
    program = Program(CONSUMER_MANUAL_COMMIT, kafka.bootstrap, tmp_path)
    try:
        program.wait_for(r"batch of 100", count=2)
        deadline = time.monotonic() + 30
        while committed(kafka.bootstrap, "my_group", "my_topic")[1] != 200:
            assert time.monotonic() < deadline, program.describe()
            time.sleep(0.5)
    finally:
        program.stop()


CONSUMER_COMMIT_PER_PARTITION = snippet("from sdk import AIOKafkaConsumer", '''
consumer = AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092',
    group_id="my_group",           # Consumer must be in a group to commit
    enable_auto_commit=False,      # Will disable autocommit
    auto_offset_reset="earliest",  # If committed offset not found, start
                                   # from beginning
)
await consumer.start()
while True:
    result = await consumer.getmany(timeout_ms=10 * 1000)
    for tp, messages in result.items():
        if messages:
            await process_msg_batch(messages)
            # Commit progress only for this partition
            await consumer.commit({tp: messages[-1].offset + 1})
''', prelude='''
async def process_msg_batch(batch):
    print("processed", len(batch))
''')


def test_consumer_commit_per_partition(kafka: BrokerProcess, tmp_path: Path) -> None:
    for p in range(PARTITIONS):
        produce(kafka.bootstrap, "my_topic", [b"x"] * (p + 1), partition=p)
    program = Program(CONSUMER_COMMIT_PER_PARTITION, kafka.bootstrap, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while committed(kafka.bootstrap, "my_group", "my_topic") != {p: p + 1 for p in range(PARTITIONS)}:
            assert program.proc.poll() is None, program.describe()
            assert time.monotonic() < deadline, program.describe()
            time.sleep(0.5)
    finally:
        program.stop()


CONSUMER_LATEST_AND_SEEK = snippet("from sdk import AIOKafkaConsumer, TopicPartition", '''
consumer = AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092',
    auto_offset_reset="latest",
)
await consumer.start()
print("started")

msg = await consumer.getone()
tp = TopicPartition(msg.topic, msg.partition)

consumer.seek(tp, msg.offset)
msg2 = await consumer.getone()

assert msg2 == msg
print("re-consumed", msg2.value)
''')


def test_consumer_latest_then_seek_back(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "my_topic", [b"old"])
    program = Program(CONSUMER_LATEST_AND_SEEK, kafka.bootstrap, tmp_path)
    try:
        # One partition: the snippet's second getone() must find the seeked partition's record
        # first, as on the single-partition topic the documentation has in mind.
        wait_then_produce(program, kafka.bootstrap, "my_topic", b"new", r"re-consumed b'new'", partition=0)
    finally:
        program.stop()


CONSUMER_PATTERN = snippet("from sdk import AIOKafkaConsumer", '''
consumer = AIOKafkaConsumer(
    bootstrap_servers='localhost:9092',
    metadata_max_age_ms=30000,  # This controls the polling interval
)
consumer.subscribe(pattern="^MyGreatTopic-.*$")
await consumer.start()
async for msg in consumer:  # Will detect metadata changes
    print("Consumed msg %s %s %s" % (msg.topic, msg.partition, msg.value))
''')


def test_consumer_pattern_subscription_before_start(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "MyGreatTopic-1", [b"first"])  # the topic exists before the consumer
    program = Program(CONSUMER_PATTERN, kafka.bootstrap, tmp_path)
    try:
        pattern = r"Consumed msg MyGreatTopic-1 \d b'm'"
        wait_then_produce(program, kafka.bootstrap, "MyGreatTopic-1", b"m", pattern)
    finally:
        program.stop()


CONSUMER_MANUAL_ASSIGNMENT = snippet("from sdk import AIOKafkaConsumer, TopicPartition", '''
consumer = AIOKafkaConsumer(
    bootstrap_servers='localhost:9092'
)
tp1 = TopicPartition("my_topic", 1)
tp2 = TopicPartition("my_topic", 2)
consumer.assign([tp1, tp2])
await consumer.start()

async for msg in consumer:
    print("Consumed msg %s %s %s", msg.topic, msg.partition, msg.value)
''')


def test_consumer_manual_assignment_before_start(kafka: BrokerProcess, tmp_path: Path) -> None:
    """The documentation's text never calls ``start()`` (aiokafka fails the same way without
    it); the one added line is that call, after ``assign``."""
    produce(kafka.bootstrap, "my_topic", [b"create"], partition=0)
    program = Program(CONSUMER_MANUAL_ASSIGNMENT, kafka.bootstrap, tmp_path)
    try:
        wait_then_produce(program, kafka.bootstrap, "my_topic", b"m", r"my_topic 2 b'm'")
        assert "my_topic 0" not in program.stdout
    finally:
        program.stop()


CONSUMER_FLOW_CONTROL = snippet("import time\nfrom sdk import AIOKafkaConsumer", '''
consumer = AIOKafkaConsumer("my_topic", bootstrap_servers='localhost:9092', auto_offset_reset="earliest")
await consumer.start()
partitions = []  # Fetch all partitions on first request
while True:
    msgs = await consumer.getmany(*partitions)
    # process messages
    await process_messages(msgs)
    # Prioritize partitions, that lag behind.
    partitions = []
    for partition in consumer.assignment():
        highwater = consumer.highwater(partition)
        position = await consumer.position(partition)
        position_lag = highwater - position
        timestamp = consumer.last_poll_timestamp(partition)
        time_lag = time.time() * 1000 - timestamp
        if position_lag > POSITION_THRESHOLD or time_lag > TIME_THRESHOLD:
            partitions.append(partition)
    print("time lag below threshold", time_lag < TIME_THRESHOLD)
''', prelude='''
POSITION_THRESHOLD = 1000
TIME_THRESHOLD = 60_000

async def process_messages(msgs):
    for tp, records in msgs.items():
        print("got", tp.partition, len(records))
    await asyncio.sleep(0.1 if msgs else 1)  # an idle application backs off
''')


def test_consumer_flow_control(kafka: BrokerProcess, tmp_path: Path) -> None:
    """The documentation's text passes ``...`` for the options; here the broker's address.
    ``highwater()`` is None until the partition's first fetch response (in aiokafka too), so the
    snippet's ``highwater - position`` needs the application to take a moment before its first
    pass over the assignment (``process_messages`` backs off on an empty poll)."""
    for p in range(PARTITIONS):
        produce(kafka.bootstrap, "my_topic", [b"x"], partition=p)
    program = Program(CONSUMER_FLOW_CONTROL, kafka.bootstrap, tmp_path)
    try:
        program.wait_for(r"got \d 1", count=PARTITIONS)
        program.wait_for(r"time lag below threshold True", count=3)
        assert "time lag below threshold False" not in program.stdout
    finally:
        program.stop()


CONSUMER_READ_COMMITTED = snippet("import sdk as aiokafka\nfrom sdk import TopicPartition", '''
consumer = aiokafka.AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers='localhost:9092',
    isolation_level="read_committed"
)
await consumer.start()
async for msg in consumer:  # Only read committed tranasctions
    tp = TopicPartition(msg.topic, msg.partition)
    lso = consumer.last_stable_offset(tp)
    lag = lso - msg.offset
    print(f"Consumer is behind by {lag} messages")
    end_offsets = await consumer.end_offsets([tp])
    assert end_offsets[tp] == lso
''')


def test_consumer_read_committed_and_last_stable_offset(kafka: BrokerProcess, tmp_path: Path) -> None:
    program = Program(CONSUMER_READ_COMMITTED, kafka.bootstrap, tmp_path)
    try:
        wait_then_produce(program, kafka.bootstrap, "my_topic", b"m", r"Consumer is behind by \d+ messages")
    finally:
        program.stop()


CONSUMER_CLIENT_RACK = snippet("import sdk as aiokafka", '''
consumer = aiokafka.AIOKafkaConsumer(
    "my_topic",
    bootstrap_servers="localhost:9092",
    client_rack="us-east-1a",  # this consumer lives in rack/AZ "us-east-1a"
)
await consumer.start()
msg = await consumer.getone()
print("read", msg.value)
await consumer.stop()
''')


def test_consumer_client_rack(kafka: BrokerProcess, tmp_path: Path) -> None:
    program = Program(CONSUMER_CLIENT_RACK, kafka.bootstrap, tmp_path)
    try:
        wait_then_produce(program, kafka.bootstrap, "my_topic", b"r", r"read b'r'")
        program.finish()
    finally:
        program.stop()


# -- docs/producer.rst ----------------------------------------------------------------------------

PRODUCER_SNIPPETS = snippet("import sdk as aiokafka\nfrom sdk import TopicPartition", '''
producer = aiokafka.AIOKafkaProducer(bootstrap_servers="localhost:9092")
await producer.start()
try:
    await producer.send_and_wait("my_topic", b"Super message")
    # Will add the message to 1st partition's batch. If this method times out,
    # we can say for sure that message will never be sent.

    fut = await producer.send("my_topic", b"Super message", partition=1)

    # Message will either be delivered or an unrecoverable error will occur.
    # Cancelling this future will not cancel the send.
    msg = await fut
    print("sent to", msg.partition)

    # Create the batch without queueing for delivery.
    batch = producer.create_batch()

    # Populate the batch. The append() method will return metadata for the
    # added message or None if batch is full.
    for i in range(2):
        metadata = batch.append(value=b"msg %d" % i, key=None, timestamp=None)
        assert metadata is not None

    # Optionally close the batch to further submission. If left open, the batch
    # may be appended to by producer.send().
    batch.close()

    # Add the batch to the first partition's submission queue. If this method
    # times out, we can say for sure that batch will never be sent.
    fut = await producer.send_batch(batch, "my_topic", partition=1)

    # Batch will either be delivered or an unrecoverable error will occur.
    # Cancelling this future will not cancel the send.
    record = await fut
    print("batch at", record.partition, record.offset)
finally:
    await producer.stop()

producer = aiokafka.AIOKafkaProducer(
    bootstrap_servers='localhost:9092',
    enable_idempotence=True)
await producer.start()
try:
    await producer.send_and_wait("my_topic", b"Super message")
finally:
    await producer.stop()

producer = aiokafka.AIOKafkaProducer(
    bootstrap_servers='localhost:9092',
    transactional_id="transactional_test")
await producer.start()
try:
    async with producer.transaction():
        res = await producer.send_and_wait(
            "test-topic", b"Super transactional message")
    async with producer.transaction():
        commit_offsets = {
            TopicPartition("some-topic", 0): 100
        }
        await producer.send_offsets_to_transaction(
            commit_offsets, "some-consumer-group")
finally:
    await producer.stop()
print("done")
''')


def test_producer_snippets(kafka: BrokerProcess, tmp_path: Path) -> None:
    """The simplest usage, send + await, direct batch control, idempotent and transactional
    producers and offsets in a transaction (docs/producer.rst, in its order)."""
    produce(kafka.bootstrap, "some-topic", [b"x"])  # the offsets' topic exists
    out = Program(PRODUCER_SNIPPETS, kafka.bootstrap, tmp_path).finish()
    assert "sent to 1" in out and "done" in out, out
    batch_offset = int(re.search(r"batch at 1 (\d+)", out).group(1))  # type: ignore[union-attr]
    with SyncConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("my_topic", 1)])
        consumer.seek(("my_topic", 1), batch_offset)
        first = consumer.getone(timeout_ms=20000)
    assert first is not None and first.value == b"msg 0"  # the batch's first record
    assert sorted(read_all(kafka.bootstrap, "my_topic", 5)) == sorted(
        [b"Super message"] * 3 + [b"msg 0", b"msg 1"]
    )
    assert read_all(kafka.bootstrap, "test-topic", 1) == [b"Super transactional message"]
    assert committed(kafka.bootstrap, "some-consumer-group", "some-topic")[0] == 100


# -- docs/examples/*.rst --------------------------------------------------------------------------

SERIALIZE_PRODUCER = '''
import json
import asyncio
from sdk import AIOKafkaProducer

def serializer(value):
    return json.dumps(value).encode()

async def produce():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        value_serializer=serializer,
        compression_type="gzip")

    await producer.start()
    data = {"a": 123.4, "b": "some string"}
    await producer.send('foobar', data)
    data = [1,2,3,4]
    await producer.send('foobar', data)
    await producer.stop()

asyncio.run(produce())
'''

SERIALIZE_CONSUMER = '''
import json
import asyncio
from sdk.errors import KafkaError
from sdk import AIOKafkaConsumer

def deserializer(serialized):
    return json.loads(serialized)

async def consume():
    # consumer will decompress messages automatically
    # in accordance to compression type specified in producer
    consumer = AIOKafkaConsumer(
        'foobar',
        bootstrap_servers='localhost:9092',
        value_deserializer=deserializer,
        auto_offset_reset='earliest')
    await consumer.start()
    data = await consumer.getmany(timeout_ms=10000)
    for tp, messages in data.items():
        for message in messages:
            print(type(message.value), message.value)
    await consumer.stop()

asyncio.run(consume())
'''


def test_serialize_and_compress(kafka: BrokerProcess, tmp_path: Path) -> None:
    Program(SERIALIZE_PRODUCER, kafka.bootstrap, tmp_path / "producer").finish()
    out = Program(SERIALIZE_CONSUMER, kafka.bootstrap, tmp_path / "consumer").finish()
    assert "<class 'dict'> {'a': 123.4, 'b': 'some string'}" in out, out
    assert "<class 'list'> [1, 2, 3, 4]" in out, out


MANUAL_COMMIT = '''
import json
import asyncio
from sdk.errors import KafkaError
from sdk import AIOKafkaConsumer

async def consume():
    consumer = AIOKafkaConsumer(
        'foobar',
        bootstrap_servers='localhost:9092',
        auto_offset_reset='earliest',
        group_id="some-consumer-group",
        enable_auto_commit=False)
    await consumer.start()
    # we want to consume 10 messages from "foobar" topic
    # and commit after that
    for _ in range(10):
        msg = await consumer.getone()
    await consumer.commit()
    await consumer.stop()

asyncio.run(consume())
'''


def test_manual_commit_example(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "foobar", [b"%d" % i for i in range(10)], partition=0)
    Program(MANUAL_COMMIT, kafka.bootstrap, tmp_path).finish()
    assert committed(kafka.bootstrap, "some-consumer-group", "foobar")[0] == 10


TRANSACTION_EXAMPLE = '''
import asyncio
from collections import defaultdict, Counter

from sdk import TopicPartition, AIOKafkaConsumer, AIOKafkaProducer


IN_TOPIC = "in_topic"
GROUP_ID = "processing-group"
OUT_TOPIC = "out_topic"
TRANSACTIONAL_ID = "my-txn-id"
BOOTSTRAP_SERVERS = "localhost:9092"

POLL_TIMEOUT = 60_000


def process_batch(msgs):
    # Group by key do simple count sampling by a minute window
    buckets_by_key = defaultdict(Counter)
    for msg in msgs:
        timestamp = (msg.timestamp // 60_000) * 60
        buckets_by_key[msg.key][timestamp] += 1

    res = []
    for key, counts in buckets_by_key.items():
        for timestamp, count in counts.items():
            value = str(count).encode()
            res.append((key, value, timestamp))

    return res


async def transactional_process():
    consumer = AIOKafkaConsumer(
        IN_TOPIC,
        bootstrap_servers=BOOTSTRAP_SERVERS,
        enable_auto_commit=False,
        group_id=GROUP_ID,
        isolation_level="read_committed"  # <-- This will filter aborted txn's
    )
    await consumer.start()

    producer = AIOKafkaProducer(
        bootstrap_servers=BOOTSTRAP_SERVERS,
        transactional_id=TRANSACTIONAL_ID
    )
    await producer.start()

    try:
        while True:
            msg_batch = await consumer.getmany(timeout_ms=POLL_TIMEOUT)

            async with producer.transaction():
                commit_offsets = {}
                in_msgs = []
                for tp, msgs in msg_batch.items():
                    in_msgs.extend(msgs)
                    commit_offsets[tp] = msgs[-1].offset + 1

                out_msgs = process_batch(in_msgs)
                for key, value, timestamp in out_msgs:
                    await producer.send(
                        OUT_TOPIC, value=value, key=key,
                        timestamp_ms=int(timestamp * 1000)
                    )
                # We commit through the producer because we want the commit
                # to only succeed if the whole transaction is done
                # successfully.
                await producer.send_offsets_to_transaction(
                    commit_offsets, GROUP_ID)
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(transactional_process())
'''


def test_transactional_consume_process_produce(kafka: BrokerProcess, tmp_path: Path) -> None:
    produce(kafka.bootstrap, "in_topic", [b"x"], partition=0)  # the topic exists
    program = Program(TRANSACTION_EXAMPLE, kafka.bootstrap, tmp_path)
    try:
        # The group is joined inside start() at 'latest': records produced once its position is
        # committed are copied.
        deadline = time.monotonic() + 60
        while True:
            produce(kafka.bootstrap, "in_topic", [b"a", b"b"], partition=0, key=b"k")
            done = committed(kafka.bootstrap, "processing-group", "in_topic")[0]
            if done is not None and done >= 3 and read_all(kafka.bootstrap, "out_topic", 1):
                break
            assert program.proc.poll() is None, program.describe()
            assert time.monotonic() < deadline, program.describe()
            time.sleep(1)
    finally:
        program.stop()


CUSTOM_PARTITIONER = '''
import asyncio
import random
from sdk import AIOKafkaProducer

def my_partitioner(key, all_partitions, available_partitions):
   if key == b'first':
       return all_partitions[0]
   elif key == b'last':
       return all_partitions[-1]
   return random.choice(all_partitions)

async def produce_one(producer, key, value):
    future = await producer.send('foobar', value, key=key)
    resp = await future
    print("'%s' produced in partition: %i"%(value.decode(), resp.partition))

async def produce_task():
    producer = AIOKafkaProducer(
        bootstrap_servers='localhost:9092',
        partitioner=my_partitioner)
    await producer.start()
    await produce_one(producer, b'last', b'1')
    await produce_one(producer, b'some', b'2')
    await produce_one(producer, b'first', b'3')
    await producer.stop()

asyncio.run(produce_task())
'''


def test_custom_partitioner(kafka: BrokerProcess, tmp_path: Path) -> None:
    out = Program(CUSTOM_PARTITIONER, kafka.bootstrap, tmp_path).finish()
    assert f"'1' produced in partition: {PARTITIONS - 1}" in out, out
    assert "'3' produced in partition: 0" in out, out


# -- aiokafka's names ------------------------------------------------------------------------------

#: Where the retriable flag differs from aiokafka's: Kafka's (Java's) flag for the broker codes,
#: and the client's own behaviour for the two client-side errors (README, "Coming from aiokafka").
RETRIABLE_AS_KAFKA = {
    "CorruptRecordException", "InvalidMessageError", "ReplicaNotAvailableError", "StaleLeaderEpochCodeError",
    "ConcurrentTransactions", "FetchSessionIdNotFound", "InvalidFetchSessionEpoch", "ListenerNotFound",
    "NoBrokersAvailable", "KafkaTimeoutError",
}


def aiokafka_exceptions() -> dict[str, type[BaseException]]:
    import inspect

    import aiokafka.errors

    return {
        name: value for name, value in vars(aiokafka.errors).items()
        if not name.startswith("_") and inspect.isclass(value) and issubclass(value, BaseException)
    }


def test_every_aiokafka_error_name_is_importable_with_its_errno_and_retriable_flag() -> None:
    import sdk.errors

    theirs = aiokafka_exceptions()
    assert len(theirs) > 100
    missing = sorted(name for name in theirs if not hasattr(sdk.errors, name))
    assert missing == []
    for name, cls in theirs.items():
        ours = getattr(sdk.errors, name)
        errno = getattr(cls, "errno", None)
        if isinstance(errno, int):
            assert ours.errno == errno, name
        if name not in RETRIABLE_AS_KAFKA and getattr(cls, "retriable", None) is not None:
            assert bool(ours.retriable) == bool(cls.retriable), name
    assert issubclass(sdk.errors.NotLeaderForPartitionError, sdk.errors.BrokerResponseError)
    assert issubclass(sdk.errors.NoGroupIdError, sdk.errors.IllegalOperation)
    assert sdk.errors.NotLeaderForPartitionError("x").errno == 6


def test_aiokafka_structs_and_top_level_names() -> None:
    import aiokafka
    import aiokafka.structs

    import sdk
    import sdk.structs

    assert [n for n in aiokafka.structs.__all__ if not hasattr(sdk.structs, n)] == []
    assert [n for n in aiokafka.__all__ if n != "AIOKafkaClient" and not hasattr(sdk, n)] == []
    assert sdk.structs.TopicPartition("t", 1) == sdk.TopicPartition("t", 1) == ("t", 1)
