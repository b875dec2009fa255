"""Fixtures for the SDK tests: real brokers, a real consumer, and a fault-injecting TCP proxy.

* ``mock_cluster``: librdkafka's mock cluster (3 brokers, a broker nobody here wrote), alive as long
  as the confluent-kafka object that created it. Topics are auto-created with 4 partitions on
  their first Metadata request.
* ``kafka``: parametrized over the mock cluster, the reference broker and Apache Kafka (the
  session's ``apache_kafka`` node, marked ``apache_kafka``); ``create_topic`` makes a 4-partition
  topic on any of them.
* ``consume``: reads a topic back with confluent-kafka's Consumer (assign mode, partition EOF).
* ``proxy_factory``: an asyncio TCP proxy on 127.0.0.1, one listener per broker, that rewrites
  Metadata responses so clients keep talking through it, and can cut every connection (at once,
  after N more request bytes, or right after the broker answered a Produce request). It keeps
  each connection's answers in request order and can also refuse a partition's batches with
  NOT_LEADER_OR_FOLLOWER (or another error) until the refused batch is retried, hold answers,
  name the wrong leaders, and inject those faults at random with a seed (``produce_chaos``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import struct
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest
import pytest_asyncio

from sdk.client import KafkaClient
from sdk.protocol import messages
from sdk.protocol.codec import decode_request, decode_response, encode_request, encode_response
from sdk.records import BATCH_HEADER_SIZE, RecordBatch

PARTITIONS = 4
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


# -- brokers --------------------------------------------------------------------------------------


class MockCluster:
    """librdkafka's in-process mock cluster."""

    def __init__(self, brokers: int = 3):
        self._owner = confluent_kafka.Producer({"test.mock.num.brokers": brokers, "log_level": 0})
        metadata = self._owner.list_topics(timeout=10)
        self.brokers = sorted((b.id, b.host, b.port) for b in metadata.brokers.values())
        self.bootstrap = ",".join(f"{host}:{port}" for _, host, port in self.brokers)

    def close(self) -> None:
        # The cluster lives as long as the object that created it.
        self._owner.flush(5)
        del self._owner


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[MockCluster]:
    cluster = MockCluster(3)
    try:
        yield cluster
    finally:
        cluster.close()


@dataclass
class KafkaTarget:
    """A running cluster the tests produce to."""

    kind: str
    bootstrap: str

    async def create_topic(self, name: str, partitions: int = PARTITIONS) -> str:
        """A topic with ``partitions`` partitions (the mock auto-creates 4 on first Metadata)."""
        client = KafkaClient(self.bootstrap)
        await client.start()
        try:
            if self.kind in ("reference", "apache"):
                request = messages.CreateTopicsRequest(
                    topics=[
                        messages.CreateTopicsRequest.CreatableTopic(
                            name=name, num_partitions=partitions, replication_factor=1
                        )
                    ],
                    timeout_ms=10000,
                )
                response = await client.send_to_any(request)
                assert response.topics[0].error_code == 0, response
            else:
                assert partitions == PARTITIONS, "the mock cluster auto-creates 4 partitions"
            await client.add_topic(name)
            deadline = time.monotonic() + 10
            while True:
                meta = client.cluster.topic(name)
                ready = meta is not None and len(meta.available) == partitions
                if ready and (self.kind != "apache" or await _leaders_serve(client, name, partitions)):
                    return name
                assert time.monotonic() < deadline, f"topic {name} did not become available"
                await asyncio.sleep(0.05)
                await client.refresh_metadata()
        finally:
            await client.close()


async def _leaders_serve(client: KafkaClient, topic: str, partitions: int) -> bool:
    """Whether every partition's leader answers ListOffsets for it. Kafka lists a new topic's
    leader in Metadata a moment before that broker serves the partition (NOT_LEADER_OR_FOLLOWER
    until then), and a test's first records must not meet that window by accident."""
    by_leader: dict[int, list[int]] = {}
    for partition in range(partitions):
        by_leader.setdefault(client.cluster.leader_for(topic, partition), []).append(partition)
    for leader, indexes in by_leader.items():
        request = messages.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                messages.ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        messages.ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=index, current_leader_epoch=-1, timestamp=-1
                        )
                        for index in indexes
                    ],
                )
            ],
        )
        response = await client.send(leader, request)
        if any(p.error_code for t in response.topics for p in t.partitions):
            return False
    return True


def _reference_available() -> bool:
    try:
        import reference_broker.testing  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(params=["mock", "reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def kafka(request: pytest.FixtureRequest) -> KafkaTarget:
    if request.param == "mock":
        return KafkaTarget("mock", request.getfixturevalue("mock_cluster").bootstrap)
    if request.param == "apache":
        return KafkaTarget("apache", request.getfixturevalue("apache_kafka").bootstrap)
    if not _reference_available():
        pytest.skip("reference_broker.testing is not available")
    broker = request.getfixturevalue("broker")
    return KafkaTarget("reference", broker.bootstrap)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


# -- reading back ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: int = PARTITIONS,
    expected: int | None = None,
    timeout: float = 30.0,
) -> list[Consumed]:
    """Everything in ``topic`` (until every partition reached its end, and ``expected`` records)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sdk-tests-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        records: list[Consumed] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(at_end) == partitions and (expected is None or len(records) >= expected):
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_end.discard(msg.partition())
            records.append(
                Consumed(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    tuple(msg.headers() or ()),
                    msg.timestamp()[1],
                )
            )
        else:
            raise AssertionError(
                f"timed out reading {topic}: {len(records)} records, at end {sorted(at_end)}"
            )
        return records
    finally:
        consumer.close()


@pytest.fixture
def consume() -> Callable[..., Any]:
    """``await consume(bootstrap, topic, partitions=4, expected=None)`` in a worker thread."""

    async def run(
        bootstrap: str,
        topic: str,
        partitions: int = PARTITIONS,
        expected: int | None = None,
        timeout: float = 30.0,
    ) -> list[Consumed]:
        return await asyncio.to_thread(consume_all, bootstrap, topic, partitions, expected, timeout)

    return run


@pytest.fixture
def consume_sync() -> Callable[..., list[Consumed]]:
    """``consume_all`` for synchronous tests."""
    return consume_all


def by_partition(records: list[Consumed]) -> dict[int, list[Consumed]]:
    result: dict[int, list[Consumed]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        result.setdefault(record.partition, []).append(record)
    return result


@pytest.fixture
def group_by_partition() -> Callable[[list[Consumed]], dict[int, list[Consumed]]]:
    return by_partition


# -- the fault-injecting proxy --------------------------------------------------------------------

NOT_LEADER_OR_FOLLOWER = 6
_PRODUCE = 0
_METADATA = 3
_API_VERSIONS = 18

PartitionKey = tuple[Any, int]


@dataclass
class _Answer:
    """One request's place in the order of answers on its connection (Kafka answers in order).

    ``frame`` is the answer to write once known: the broker's (with ``rejected`` partitions
    merged in as NOT_LEADER_OR_FOLLOWER), or one the proxy made for a request it did not forward.
    """

    correlation_id: int
    api_key: int
    api_version: int
    frame: bytes | None = None
    rejected: list[tuple[Any, int, int]] | None = None  # (topic, partition, error code)
    delay: float = 0.0
    drop: bool = False  # the broker wrote it, the client never hears so: cut instead


@dataclass
class _Window:
    """A partition a broker has (as far as the client can tell) stopped leading.

    It opens on the Produce request the proxy rejects first, and closes when the retry of that
    batch, or of an earlier one (same producer id and epoch, base sequence not above it), or a
    batch of another epoch arrives. Every other batch for the partition in between is rejected
    too, as a broker that lost leadership rejects all of them; so a rejected batch never leaves
    a gap that a broker which does not check sequences (librdkafka's mock) would fill with a
    later batch, and a client that retries in sequence order always gets through.
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    error_code: int = NOT_LEADER_OR_FOLLOWER


@dataclass
class ProduceChaos:
    """Seeded random Produce faults, at most ``faults`` of them (each roll per forwarded Produce
    request): NOT_LEADER_OR_FOLLOWER windows, answers held up to ``max_delay_s`` (and those
    behind them on the connection), requests dropped with the connection (never written),
    and with ``drop_responses`` answers dropped with the connection (written, never
    acknowledged: only for brokers that deduplicate by sequence number)."""

    seed: int
    faults: int = 40
    not_leader: float = 0.05
    delay: float = 0.08
    max_delay_s: float = 0.15
    drop_request: float = 0.02
    drop_response: float = 0.0
    injected: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.injected = {"not_leader": 0, "delay": 0, "drop_request": 0, "drop_response": 0}

    def roll(self, kind: str) -> bool:
        assert self.injected is not None
        if sum(self.injected.values()) >= self.faults:
            return False
        if self.random.random() < getattr(self, kind):
            self.injected[kind] += 1
            return True
        return False


class _Pair:
    """One client connection, its upstream connection and its answers in order."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter):
        self.client = client
        self.upstream = upstream
        self.closed = False
        self.answers: deque[_Answer] = deque()
        self.changed = asyncio.Event()
        #: A request was dropped: nothing more is forwarded; cut once the answers before it are out.
        self.dropping = False

    def cut(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.changed.set()
        for writer in (self.client, self.upstream):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()


class KafkaProxy:
    """Forwards Kafka traffic to brokers and breaks it on request (see module docstring)."""

    def __init__(self, upstreams: list[tuple[str, int]]):
        self.upstreams = upstreams
        self._servers: list[asyncio.Server] = []
        self._local: dict[tuple[str, int], int] = {}
        self._pairs: set[_Pair] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cut_after: int | None = None
        self._drop_produce_responses = 0
        self._held_produce_answers = 0
        self._produce_hold_s = 0.0
        self._lying_metadata = 0
        self._windows: dict[tuple[tuple[str, int], Any, int], _Window] = {}
        self._open_windows = 0
        self._window_error = NOT_LEADER_OR_FOLLOWER
        self._window_first_hold_s = 0.0
        self._window_hold_s = 0.0
        self._not_leader_once = 0
        self._not_leader_once_hold_s = 0.0
        self._chaos: ProduceChaos | None = None
        self.api_versions_max: int | None = None
        self.api_versions_seen: list[int] = []
        self.metadata_responses = 0
        #: Produce partitions the proxy itself answered with an error (NOT_LEADER_OR_FOLLOWER,
        #: or the error of ``error_windows``).
        self.not_leader_answers = 0
        self.paused = asyncio.Event()
        self.paused.set()  # set = forwarding
        self.bytes_up = 0
        self.cuts = 0
        self.connections = 0

    async def start(self) -> KafkaProxy:
        for upstream in self.upstreams:
            server = await asyncio.start_server(lambda r, w, u=upstream: self._serve(u, r, w), "127.0.0.1", 0)
            self._servers.append(server)
            self._local[upstream] = server.sockets[0].getsockname()[1]
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self._local[u]}" for u in self.upstreams)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        self.cut_all(count=False)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    # -- faults ---------------------------------------------------------------------------------

    def cut_all(self, count: bool = True) -> None:
        """Close every open connection now (both sides), mid-request or not."""
        if count and self._pairs:
            self.cuts += 1
        for pair in list(self._pairs):
            pair.cut()
        self._pairs.clear()

    def cut_after_bytes(self, n: int) -> None:
        """Forward ``n`` more client-to-broker bytes, then cut everything (mid-frame)."""
        self._cut_after = self.bytes_up + n

    def drop_next_produce_responses(self, n: int = 1) -> None:
        """The next ``n`` Produce responses are swallowed and the connection cut: the broker
        wrote the records but the client never hears so (its retry must not duplicate them)."""
        self._drop_produce_responses += n

    def hold_next_produce_answers(self, n: int, seconds: float) -> None:
        """The broker's next ``n`` Produce answers reach the client ``seconds`` late (with the
        answers behind them on their connection), as from a slow broker."""
        self._held_produce_answers += n
        self._produce_hold_s = seconds

    @property
    def produce_responses_to_drop(self) -> int:
        """Produce responses still to be dropped (``drop_next_produce_responses``)."""
        return self._drop_produce_responses

    def misroute_leaders(self, responses: int = 1) -> None:
        """The next ``responses`` Metadata answers name the wrong broker as every partition's
        leader, so the client's next Produce gets NOT_LEADER_OR_FOLLOWER from a real broker."""
        self._lying_metadata += responses

    def not_leader_once(self, count: int = 1, hold_s: float = 0.0) -> None:
        """Answer the next ``count`` Produce requests NOT_LEADER_OR_FOLLOWER, ``hold_s`` late, and
        let every later one through: a broker that serves a new partition a moment after Metadata
        named it leader (Apache Kafka after CreateTopics)."""
        self._not_leader_once += count
        self._not_leader_once_hold_s = hold_s

    def not_leader_windows(self, count: int = 1, first_hold_s: float = 0.0, hold_s: float = 0.0) -> None:
        """The next ``count`` Produce requests are answered NOT_LEADER_OR_FOLLOWER by the proxy
        and open a window for their partitions (see ``_Window``). The opening rejection is
        answered ``first_hold_s`` late (so later batches are sent behind it), the window's later
        rejections ``hold_s`` late, holding the answers behind them on the connection: the retry
        of the first batch can then be written before the client hears of the others."""
        self.error_windows(NOT_LEADER_OR_FOLLOWER, count, first_hold_s, hold_s)

    def error_windows(
        self, error_code: int, count: int = 1, first_hold_s: float = 0.0, hold_s: float = 0.0
    ) -> None:
        """``not_leader_windows`` with another error, e.g. OUT_OF_ORDER_SEQUENCE_NUMBER (45: the
        broker lost a batch the client thinks it wrote) or UNKNOWN_PRODUCER_ID (59)."""
        self._open_windows += count
        self._window_error = error_code
        self._window_first_hold_s = first_hold_s
        self._window_hold_s = hold_s

    def produce_chaos(self, seed: int, **rates: Any) -> ProduceChaos:
        """Inject seeded random faults into Produce traffic from now on (``ProduceChaos`` names
        the rates); the returned object counts what was injected."""
        self._chaos = ProduceChaos(seed, **rates)
        return self._chaos

    def limit_api_versions(self, max_version: int) -> None:
        """Behave like an older broker: answer ApiVersions requests newer than ``max_version``
        with UNSUPPORTED_VERSION in the v0 format (KIP-511), listing ``0..max_version``."""
        self.api_versions_max = max_version

    def pause(self) -> None:
        """Stop forwarding (data is held, connections stay open)."""
        self.paused.clear()

    def resume(self) -> None:
        self.paused.set()

    # -- forwarding -----------------------------------------------------------------------------

    async def _serve(
        self, upstream: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        tasks = [
            asyncio.create_task(self._requests(upstream, pair, reader, up_writer)),
            asyncio.create_task(self._responses(pair, up_reader)),
            asyncio.create_task(self._answers(pair)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            pair.cut()
            self._pairs.discard(pair)
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)

    async def _requests(
        self,
        upstream: tuple[str, int],
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        while not pair.closed:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            body = await reader.readexactly(size)
            if pair.dropping:
                continue  # lost with the connection about to be cut
            api_key, api_version, correlation_id = _HEADER.unpack_from(body, 0)
            answer = _Answer(correlation_id, api_key, api_version)
            if api_key == _API_VERSIONS:
                self.api_versions_seen.append(api_version)
                if self.api_versions_max is not None and api_version > self.api_versions_max:
                    answer.frame = self._api_versions_fallback(correlation_id)
                    self._queue(pair, answer)
                    continue
            await self.paused.wait()
            if api_key == _PRODUCE and self._not_leader_once:
                self._not_leader_once -= 1
                self._reject_whole_produce(pair, answer, body)
                continue
            if api_key == _PRODUCE and (self._open_windows or self._windows or self._chaos is not None):
                body = self._produce_faults(upstream, pair, answer, body)
                if body is None:
                    continue
            frame = _SIZE.pack(len(body)) + body
            self._queue(pair, answer)
            if self._cut_after is not None and self.bytes_up + len(frame) >= self._cut_after:
                keep = max(0, self._cut_after - self.bytes_up)
                self._cut_after = None
                writer.write(frame[:keep])
                self.bytes_up += keep
                await asyncio.sleep(0.01)
                self.cut_all()
                return
            self.bytes_up += len(frame)
            writer.write(frame)

    def _queue(self, pair: _Pair, answer: _Answer) -> None:
        pair.answers.append(answer)
        pair.changed.set()

    async def _responses(self, pair: _Pair, reader: asyncio.StreamReader) -> None:
        while not pair.closed:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            body = await reader.readexactly(size)
            (correlation_id,) = _SIZE.unpack_from(body, 0)
            answer = next((a for a in pair.answers if a.correlation_id == correlation_id), None)
            if answer is None:  # not a request we saw (should not happen): pass it on in place
                answer = _Answer(correlation_id, -1, -1)
                self._queue(pair, answer)
            if answer.api_key == _PRODUCE and self._drop_produce_responses > 0:
                await self.paused.wait()
                self._drop_produce_responses -= 1
                self.cut_all()
                return
            if answer.api_key == _PRODUCE and self._held_produce_answers > 0:
                self._held_produce_answers -= 1
                answer.delay = max(answer.delay, self._produce_hold_s)
            if answer.api_key == _METADATA:
                body = self._rewrite_metadata(answer.api_version, body)
            elif answer.api_key == _PRODUCE and answer.rejected:
                body = self._add_rejections(answer, body)
            answer.frame = _SIZE.pack(len(body)) + body
            pair.changed.set()

    async def _answers(self, pair: _Pair) -> None:
        """Write the answers to the client in request order, each once it is known."""
        answers = pair.answers
        while not pair.closed:
            if not answers or answers[0].frame is None:
                if not answers and pair.dropping:
                    self.cuts += 1
                    return  # everything before the dropped request is answered: cut now
                pair.changed.clear()
                await pair.changed.wait()
                continue
            answer = answers[0]
            if answer.delay:
                await asyncio.sleep(answer.delay)
            await self.paused.wait()
            answers.popleft()
            if answer.drop:
                self.cuts += 1
                return
            assert answer.frame is not None
            pair.client.write(answer.frame)

    # -- Produce faults -------------------------------------------------------------------------

    def _produce_faults(
        self, upstream: tuple[str, int], pair: _Pair, answer: _Answer, body: bytes
    ) -> bytes | None:
        """Apply windows and chaos to one Produce request: the body to forward (maybe without
        rejected partitions), or None when the proxy answers (or drops) it itself."""
        header, request = decode_request(body)
        if request.acks == 0:
            return body  # no answer to hold or change
        batches: list[tuple[Any, int, _Window | None]] = []
        for topic in request.topic_data:
            key = topic.name or topic.topic_id
            for part in topic.partition_data:
                records = part.records
                stamp = None
                if records is not None and len(records) >= BATCH_HEADER_SIZE:
                    batch = RecordBatch(bytes(records))
                    stamp = _Window(batch.producer_id, batch.producer_epoch, batch.base_sequence)
                batches.append((key, part.index, stamp))
        chaos = self._chaos
        open_new = False
        error_code = NOT_LEADER_OR_FOLLOWER
        if self._open_windows:
            self._open_windows -= 1
            open_new = True
            error_code = self._window_error
        elif chaos is not None and chaos.roll("not_leader"):
            open_new = True
        rejected: list[tuple[Any, int, int]] = []
        held = False
        for key, partition, stamp in batches:
            window_key = (upstream, key, partition)
            window = self._windows.get(window_key)
            if window is not None:
                same_epoch = stamp is not None and (stamp.producer_id, stamp.producer_epoch) == (
                    window.producer_id,
                    window.producer_epoch,
                )
                closes = not same_epoch or stamp.base_sequence <= window.base_sequence
                if closes and not open_new:
                    del self._windows[window_key]
                    continue
                rejected.append((key, partition, window.error_code))
                held = True
            elif open_new:
                if stamp is not None:
                    stamp.error_code = error_code
                    self._windows[window_key] = stamp
                rejected.append((key, partition, error_code))
        self.not_leader_answers += len(rejected)
        if held and self._window_hold_s:
            answer.delay = self._window_hold_s
        elif rejected and self._window_first_hold_s:
            answer.delay = self._window_first_hold_s
        elif chaos is not None and chaos.roll("delay"):
            answer.delay = chaos.random.uniform(0.0, chaos.max_delay_s)
        if len(rejected) == len(batches):
            answer.rejected = rejected
            answer.frame = self._rejection_frame(answer, [])
            self._queue(pair, answer)
            return None
        if chaos is not None and chaos.roll("drop_request"):
            pair.dropping = True
            pair.changed.set()
            return None
        if chaos is not None and chaos.roll("drop_response"):
            answer.drop = True
        if not rejected:
            return body
        answer.rejected = rejected
        drop = {(key, partition) for key, partition, _ in rejected}
        for topic in request.topic_data:
            key = topic.name or topic.topic_id
            topic.partition_data = [p for p in topic.partition_data if (key, p.index) not in drop]
        request.topic_data = [t for t in request.topic_data if t.partition_data]
        return encode_request(request, header.request_api_version, header.correlation_id, header.client_id)

    def _reject_whole_produce(self, pair: _Pair, answer: _Answer, body: bytes) -> None:
        _, request = decode_request(body)
        answer.rejected = [
            (topic.name or topic.topic_id, part.index, NOT_LEADER_OR_FOLLOWER)
            for topic in request.topic_data
            for part in topic.partition_data
        ]
        self.not_leader_answers += len(answer.rejected)
        answer.delay = self._not_leader_once_hold_s
        answer.frame = self._rejection_frame(answer, [])
        self._queue(pair, answer)

    def _rejection_frame(self, answer: _Answer, topics: list[Any]) -> bytes:
        response = messages.ProduceResponse(responses=topics)
        self._merge_rejections(answer, response)
        body = encode_response(response, answer.api_version, answer.correlation_id)
        return _SIZE.pack(len(body)) + body

    def _merge_rejections(self, answer: _Answer, response: Any) -> None:
        by_key = {(t.name or t.topic_id): t for t in response.responses}
        Topic = messages.ProduceResponse.TopicProduceResponse
        for key, partition, error_code in answer.rejected or ():
            topic = by_key.get(key)
            if topic is None:
                named = {"name": key} if isinstance(key, str) else {"topic_id": key}
                topic = by_key[key] = Topic(partition_responses=[], **named)
                response.responses.append(topic)
            topic.partition_responses.append(
                Topic.PartitionProduceResponse(
                    index=partition, error_code=error_code, base_offset=-1, log_start_offset=-1
                )
            )

    def _add_rejections(self, answer: _Answer, body: bytes) -> bytes:
        correlation_id, response = decode_response(_PRODUCE, answer.api_version, body)
        self._merge_rejections(answer, response)
        return encode_response(response, answer.api_version, correlation_id)

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        response = messages.ApiVersionsResponse(
            error_code=35,
            api_keys=[
                messages.ApiVersionsResponse.ApiVersion(
                    api_key=18, min_version=0, max_version=self.api_versions_max
                )
            ],
        )
        body = encode_response(response, 0, correlation_id)
        return _SIZE.pack(len(body)) + body

    def _rewrite_metadata(self, version: int, body: bytes) -> bytes:
        correlation_id, response = decode_response(3, version, body)
        self.metadata_responses += 1
        if self._lying_metadata > 0 and len(response.brokers) > 1:
            self._lying_metadata -= 1
            ids = sorted(b.node_id for b in response.brokers)
            for topic in response.topics:
                for partition in topic.partitions:
                    if partition.leader_id in ids:
                        partition.leader_id = ids[(ids.index(partition.leader_id) + 1) % len(ids)]
        for broker in response.brokers:
            local = self._local.get((broker.host, broker.port))
            if local is not None:
                broker.host, broker.port = "127.0.0.1", local
        return encode_response(response, version, correlation_id)


@pytest_asyncio.fixture
async def proxy_factory() -> AsyncIterator[Callable[..., Any]]:
    """``await proxy_factory(bootstrap)``: a started KafkaProxy in front of every broker of
    ``bootstrap`` (a cluster's broker list), closed after the test."""
    proxies: list[KafkaProxy] = []

    async def make(bootstrap: str) -> KafkaProxy:
        upstreams = []
        for item in bootstrap.split(","):
            host, _, port = item.rpartition(":")
            upstreams.append((host, int(port)))
        proxy = await KafkaProxy(upstreams).start()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            await proxy.close()


_counter = itertools.count()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Unique names within the session."""
    return lambda prefix: f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
