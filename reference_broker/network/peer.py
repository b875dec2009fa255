"""Requests from this node to another node of the cluster: the broker's own outbound client.

The broker imports only the sans-IO core, never the SDK's client, so the few requests a node sends
(KRaft's Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch between controllers, a broker's registration
and heartbeats, AlterPartition, follower fetches) go through this small client, as Kafka's
brokers use their own ``NetworkClient`` through ``NodeToControllerChannelManager`` and the replica
fetchers.

Invariants:
- One TCP connection per ``PeerConnection``; requests may be pipelined, responses are matched by
  correlation id (Kafka answers in order on one connection, and so does this broker).
- The version of each request is the highest both sides support, learnt by ApiVersions on
  connect; a request the peer does not serve raises ``PeerUnsupportedError`` before it is sent.
- Any failure of the connection (refused, reset, timed out, a frame that does not decode) fails
  every request in flight with ``PeerConnectionError`` and closes the connection; the next
  ``send`` reconnects. Callers decide about retrying: raft and replication retry on their own
  schedule, never here.
- Security is the caller's (``reference_broker.cluster.inter_broker`` owns it): ``ssl_context``
  wraps the connection in TLS (the host name checked as the context says), and ``authenticate``
  runs the SASL exchange after ApiVersions, before any request is sent; its failure fails the
  connection like any other.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sdk.protocol.codec import decode_response, encode_request, supported_versions
from sdk.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, Message

log = logging.getLogger("reference_broker.peer")

_SIZE = struct.Struct(">i")
#: Largest response frame accepted from a peer (a follower fetch is bounded by its own
#: ``replica.fetch.response.max.bytes``; this only guards against a garbled size prefix).
MAX_RESPONSE_BYTES = 256 * 1024 * 1024

M = TypeVar("M", bound=Message)


class PeerConnectionError(ConnectionError):
    """The connection to the peer failed or timed out; the request may or may not have arrived."""


class PeerUnsupportedError(Exception):
    """The peer does not serve this API at any version this node can send."""


class PeerConnection:
    """A lazily (re)connected connection to one peer node at ``host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 30.0,
        local_host: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Callable[[PeerConnection], Awaitable[None]] | None = None,
    ) -> None:
        self.host = host
        self.ssl_context = ssl_context
        self.authenticate = authenticate
        #: The address outbound connections are bound to (the node's own listener host): on a
        #: loopback cluster each node has its own 127.0.0.x, so a proxy in front of a node can
        #: tell which node a connection comes from (``reference_broker.testing``'s partitions).
        self.local_host = local_host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._versions: dict[int, tuple[int, int]] = {}
        self._pending: dict[int, tuple[int, int, asyncio.Future[Message]]] = {}
        self._correlation = itertools.count(1)
        self._read_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._closed = False
        #: ApiVersions (and the SASL exchange) done: requests may go out
        self._ready = False

    @property
    def connected(self) -> bool:
        return self._ready and self._writer is not None and not self._writer.is_closing()

    async def send(self, request: M | Message, *, version: int | None = None,
                   timeout_s: float | None = None) -> Message:
        """Send ``request`` at ``version`` (default: the highest both sides support) and return
        the peer's response. Raises ``PeerConnectionError`` or ``PeerUnsupportedError``."""
        if self._closed:
            raise PeerConnectionError(f"connection to {self.host}:{self.port} is closed")
        await self._ensure_connected()
        api_key = type(request).API_KEY
        assert api_key is not None
        if version is None:
            version = self.version_for(api_key)
        return await self._roundtrip(request, version, timeout_s or self.request_timeout_s)

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this node and the (connected) peer support."""
        ours = supported_versions(api_key)
        theirs = self._versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
            raise PeerUnsupportedError(f"{self.host}:{self.port} does not serve api key {api_key}")
        return min(ours[1], theirs[1])

    async def _ensure_connected(self) -> None:
        if self.connected:
            return
        async with self._connecting:
            if self.connected:
                return
            try:
                reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host, self.port,
                        local_addr=(self.local_host, 0) if self.local_host else None,
                        ssl=self.ssl_context,
                    ),
                    self.connect_timeout_s,
                )
            except (TimeoutError, OSError) as exc:
                raise PeerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
            self._reader = reader
            self._read_task = asyncio.get_running_loop().create_task(self._read_loop(reader))
            versions = await self._roundtrip(
                ApiVersionsRequest(client_software_name="topicwright-broker", client_software_version="1"),
                3,
                self.connect_timeout_s,
            )
            assert isinstance(versions, ApiVersionsResponse)
            if versions.error_code:
                error = PeerConnectionError(
                    f"ApiVersions refused by {self.host}:{self.port}: error {versions.error_code}"
                )
                self._fail(error)
                raise error
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            if self.authenticate is not None:
                try:
                    await self.authenticate(self)
                except Exception as exc:
                    error = exc if isinstance(exc, PeerConnectionError) else PeerConnectionError(
                        f"authentication to {self.host}:{self.port} failed: {exc}"
                    )
                    self._fail(error)
                    raise error from exc
            self._ready = True

    async def exchange(self, request: Message, version: int) -> Message:
        """One request on the connection being opened (the SASL exchange of ``authenticate``),
        bounded by the connect timeout."""
        return await self._roundtrip(request, version, self.connect_timeout_s)

    async def _roundtrip(self, request: Message, version: int, timeout_s: float) -> Message:
        writer = self._writer
        if writer is None or writer.is_closing():
            raise PeerConnectionError(f"not connected to {self.host}:{self.port}")
        api_key = type(request).API_KEY
        assert api_key is not None
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        payload = encode_request(request, version, correlation_id, self.client_id)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, version, future)
        writer.write(_SIZE.pack(len(payload)) + payload)
        try:
            await writer.drain()
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError as exc:
            error = PeerConnectionError(f"request {api_key} v{version} to {self.host}:{self.port} timed out")
            self._fail(error)
            raise error from exc
        except OSError as exc:
            error = PeerConnectionError(f"connection to {self.host}:{self.port} failed: {exc!r}")
            self._fail(error)
            raise error from exc
        finally:
            self._pending.pop(correlation_id, None)
            # Nobody waits on the future any more: a caller that timed out or was cancelled left
            # it to ``_fail``, whose error would otherwise be reported as never retrieved.
            if future.done():
                if not future.cancelled():
                    future.exception()
            else:
                future.cancel()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(_SIZE.size)
                (size,) = _SIZE.unpack(head)
                if size < 0 or size > MAX_RESPONSE_BYTES:
                    raise PeerConnectionError(f"bad response size {size} from {self.host}:{self.port}")
                frame = await reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.get(correlation_id)
                if entry is None:
                    raise PeerConnectionError(
                        f"unexpected correlation id {correlation_id} from {self.host}:{self.port}"
                    )
                api_key, version, future = entry
                _, response = decode_response(api_key, version, frame)
                if not future.done():
                    future.set_result(response)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc if isinstance(exc, PeerConnectionError) else PeerConnectionError(
                f"connection to {self.host}:{self.port} lost: {exc!r}"
            )
            self._fail(error)

    def _fail(self, error: Exception) -> None:
        """Close the connection and fail every request in flight with ``error``."""
        for _, _, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._ready = False
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._reader = None
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        """Close for good: requests in flight fail, later sends raise."""
        self._closed = True
        self._fail(PeerConnectionError(f"connection to {self.host}:{self.port} closed"))


class PeerChannels:
    """One ``PeerConnection`` per node id, to addresses that may change (a node re-registers with
    new endpoints after a restart on another port): ``update`` replaces a node's connection."""

    def __init__(self, client_id: str, *, connect_timeout_s: float = 5.0, request_timeout_s: float = 30.0,
                 local_host: str | None = None,
                 factory: Callable[..., PeerConnection] = PeerConnection) -> None:
        self.client_id = client_id
        self._local_host = local_host
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._factory = factory
        self._addresses: dict[int, tuple[str, int]] = {}
        self._connections: dict[int, PeerConnection] = {}

    def update(self, node_id: int, host: str, port: int) -> None:
        """Set the address of ``node_id``; an existing connection to an old address is closed."""
        if self._addresses.get(node_id) == (host, port):
            return
        self._addresses[node_id] = (host, port)
        old = self._connections.pop(node_id, None)
        if old is not None:
            asyncio.get_running_loop().create_task(old.close())

    def address(self, node_id: int) -> tuple[str, int] | None:
        return self._addresses.get(node_id)

    def connection(self, node_id: int) -> PeerConnection:
        """The connection to ``node_id`` (KeyError for a node whose address is unknown)."""
        conn = self._connections.get(node_id)
        if conn is None:
            host, port = self._addresses[node_id]
            conn = self._factory(host, port, client_id=self.client_id,
                                 connect_timeout_s=self._connect_timeout_s,
                                 request_timeout_s=self._request_timeout_s,
                                 local_host=self._local_host)
            self._connections[node_id] = conn
        return conn

    async def send(self, node_id: int, request: Message, *, version: int | None = None,
                   timeout_s: float | None = None) -> Message:
        return await self.connection(node_id).send(request, version=version, timeout_s=timeout_s)

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()
