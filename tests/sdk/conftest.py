"""Fixtures for the SDK tests: real brokers, a real consumer, and a fault-injecting TCP proxy.

* ``mock_cluster``: librdkafka's mock cluster (3 brokers, a broker nobody here wrote), alive as long
  as the confluent-kafka object that created it. Topics are auto-created with 4 partitions on
  their first Metadata request.
* ``kafka``: parametrized over the mock cluster and the reference broker; ``create_topic`` makes a
  4-partition topic on either.
* ``consume``: reads a topic back with confluent-kafka's Consumer (assign mode, partition EOF).
* ``proxy_factory``: an asyncio TCP proxy on 127.0.0.1, one listener per broker, that rewrites
  Metadata responses so clients keep talking through it, and can cut every connection (at once,
  after N more request bytes, or right after the broker answered a Produce request).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest
import pytest_asyncio

from sdk.client import KafkaClient
from sdk.protocol import messages
from sdk.protocol.codec import decode_response, encode_response

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
            if self.kind == "reference":
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
                if meta is not None and len(meta.available) == partitions:
                    return name
                assert time.monotonic() < deadline, f"topic {name} did not become available"
                await asyncio.sleep(0.05)
                await client.refresh_metadata()
        finally:
            await client.close()


def _reference_available() -> bool:
    try:
        import reference_broker.testing  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(params=["mock", "reference"])
def kafka(request: pytest.FixtureRequest) -> KafkaTarget:
    if request.param == "mock":
        return KafkaTarget("mock", request.getfixturevalue("mock_cluster").bootstrap)
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


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter):
        self.client = client
        self.upstream = upstream
        self.closed = False

    def cut(self) -> None:
        if self.closed:
            return
        self.closed = True
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
        self._lying_metadata = 0
        self.api_versions_max: int | None = None
        self.api_versions_seen: list[int] = []
        self.metadata_responses = 0
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

    def misroute_leaders(self, responses: int = 1) -> None:
        """The next ``responses`` Metadata answers name the wrong broker as every partition's
        leader, so the client's next Produce gets NOT_LEADER_OR_FOLLOWER from a real broker."""
        self._lying_metadata += responses

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
        pending: dict[int, tuple[int, int]] = {}
        tasks = [
            asyncio.create_task(self._requests(pair, reader, up_writer, pending)),
            asyncio.create_task(self._responses(pair, up_reader, writer, pending)),
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
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        while not pair.closed:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            body = await reader.readexactly(size)
            api_key, api_version, correlation_id = _HEADER.unpack_from(body, 0)
            if api_key == 18:
                self.api_versions_seen.append(api_version)
                if self.api_versions_max is not None and api_version > self.api_versions_max:
                    pair.client.write(self._api_versions_fallback(correlation_id))
                    continue
            pending[correlation_id] = (api_key, api_version)
            frame = head + body
            await self.paused.wait()
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

    async def _responses(
        self,
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        while not pair.closed:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            body = await reader.readexactly(size)
            (correlation_id,) = _SIZE.unpack_from(body, 0)
            api_key, api_version = pending.pop(correlation_id, (-1, -1))
            await self.paused.wait()
            if api_key == 0 and self._drop_produce_responses > 0:
                self._drop_produce_responses -= 1
                self.cut_all()
                return
            if api_key == 3:
                body = self._rewrite_metadata(api_version, body)
                head = _SIZE.pack(len(body))
            writer.write(head + body)

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
