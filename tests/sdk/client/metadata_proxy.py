"""A TCP proxy in front of one broker that answers Metadata for chosen topics as Apache Kafka does
while it is still creating them, or with a leader nobody can reach, or with a refusal.

Everything else passes through unchanged, and the brokers a Metadata response lists are
rewritten to the proxy's own address so clients keep talking through it. Each rule applies to
the next ``count`` Metadata responses that name its topic (None: to all of them); every response
naming a watched topic is logged with its arrival time, so a test can read how often and how
far apart a client asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sdk.errors import ErrorCode
from sdk.protocol.codec import decode_response, encode_response

__all__ = ["MetadataFault", "MetadataRewritingProxy", "running_proxy"]

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_METADATA = 3
#: A broker id no Metadata response of a single-node cluster lists.
FOREIGN_LEADER = 4242

#: What a rule makes of the topic's entry.
NOT_READY = "not_ready"  # LEADER_NOT_AVAILABLE, no partitions: Kafka right after auto-creation
UNKNOWN = "unknown"  # UNKNOWN_TOPIC_OR_PARTITION, no partitions: Kafka before the topic exists
LEADERLESS = "leaderless"  # partitions listed, leader -1, LEADER_NOT_AVAILABLE per partition
FOREIGN = "foreign_leader"  # partitions led by a broker the response does not list
UNAUTHORIZED = "unauthorized"  # TOPIC_AUTHORIZATION_FAILED, no partitions
_KINDS = (NOT_READY, UNKNOWN, LEADERLESS, FOREIGN, UNAUTHORIZED)


@dataclass
class MetadataFault:
    kind: str
    #: Responses still to rewrite; None: every one.
    count: int | None
    #: Monotonic times (s) of the responses that named the topic, rewritten or not.
    answered_at: list[float] = field(default_factory=list)
    rewritten: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown metadata fault {self.kind!r}; one of {_KINDS}")


class MetadataRewritingProxy:
    """One listener on 127.0.0.1 forwarding to ``upstream`` (see the module docstring)."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.faults: dict[str, MetadataFault] = {}
        self._server: asyncio.Server | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self._port}"

    def rewrite(self, topic: str, kind: str, count: int | None = None) -> MetadataFault:
        """Answer the next ``count`` Metadata responses naming ``topic`` as ``kind`` says."""
        fault = self.faults[topic] = MetadataFault(kind, count)
        return fault

    async def start(self) -> MetadataRewritingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        pending: dict[int, tuple[int, int]] = {}
        tasks = [
            asyncio.create_task(self._requests(reader, up_writer, pending)),
            asyncio.create_task(self._responses(up_reader, writer, pending)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pending: dict[int, tuple[int, int]]
    ) -> None:
        while True:
            head = await reader.readexactly(4)
            body = await reader.readexactly(_SIZE.unpack(head)[0])
            api_key, api_version, correlation_id = _HEADER.unpack_from(body, 0)
            pending[correlation_id] = (api_key, api_version)
            writer.write(head + body)

    async def _responses(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pending: dict[int, tuple[int, int]]
    ) -> None:
        while True:
            head = await reader.readexactly(4)
            body = await reader.readexactly(_SIZE.unpack(head)[0])
            (correlation_id,) = _SIZE.unpack_from(body, 0)
            api_key, api_version = pending.pop(correlation_id, (-1, -1))
            if api_key == _METADATA:
                body = self._rewrite_metadata(api_version, body)
                head = _SIZE.pack(len(body))
            writer.write(head + body)

    def _rewrite_metadata(self, version: int, body: bytes) -> bytes:
        correlation_id, response = decode_response(_METADATA, version, body)
        for broker in response.brokers:
            broker.host, broker.port = "127.0.0.1", self._port
        now = time.monotonic()
        for topic in response.topics:
            fault = self.faults.get(topic.name)
            if fault is None:
                continue
            fault.answered_at.append(now)
            if fault.count is not None and fault.count <= 0:
                continue
            if fault.count is not None:
                fault.count -= 1
            fault.rewritten += 1
            _apply(fault.kind, topic)
        return encode_response(response, version, correlation_id)


def _apply(kind: str, topic: object) -> None:
    if kind in (NOT_READY, UNKNOWN, UNAUTHORIZED):
        topic.error_code = {  # type: ignore[attr-defined]
            NOT_READY: ErrorCode.LEADER_NOT_AVAILABLE,
            UNKNOWN: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            UNAUTHORIZED: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }[kind]
        topic.partitions = []  # type: ignore[attr-defined]
        return
    for partition in topic.partitions:  # type: ignore[attr-defined]
        if kind == LEADERLESS:
            partition.leader_id = -1
            partition.error_code = ErrorCode.LEADER_NOT_AVAILABLE
        else:
            partition.leader_id = FOREIGN_LEADER


@contextlib.asynccontextmanager
async def running_proxy(bootstrap: str) -> AsyncIterator[MetadataRewritingProxy]:
    """A started proxy in front of the single broker ``bootstrap`` names, closed on exit."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    proxy = await MetadataRewritingProxy((host, int(port))).start()
    try:
        yield proxy
    finally:
        await proxy.close()
