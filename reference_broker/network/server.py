"""The asyncio TCP server: reads frames, dispatches them to handlers, writes responses in order.

Each connection runs two tasks. The reader decodes a frame and starts its handler at once as its
own task, so a Fetch long poll never stalls other connections and pipelined requests overlap;
the writer awaits those tasks strictly in arrival order, because Kafka clients match responses
to requests by position as much as by correlation id. Handlers start in arrival order and run
synchronously up to their first ``await``, so a Produce followed by a Fetch on one connection
sees its own write, as with Kafka's one-request-at-a-time channels.

Failure policy follows Kafka's SocketServer: a bad size prefix, an undecodable request, an
unknown api key or an unsupported version (except ApiVersions, which gets the KIP-511 fallback)
closes that one connection with a log line; a handler that raises answers with
UNKNOWN_SERVER_ERROR where the response can carry it and keeps the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable
from typing import Any, Protocol

from reference_broker.network.framing import FrameError, finish_frame, read_frame, start_frame
from sdk.protocol.codec import decode_request, encode_response_into
from sdk.protocol.errors import DecodeError, ErrorCode, UnsupportedVersionError
from sdk.protocol.messages import Message

log = logging.getLogger("reference_broker.network")

API_VERSIONS_KEY = 18
MAX_IN_FLIGHT = 64  # pipelined requests per connection before the reader stops reading


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("api_key", "api_version", "client_id", "close_after", "connection", "correlation_id")

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        connection: Connection,
    ):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.connection = connection
        # Set by a handler that must drop the connection after answering (Kafka does so for an
        # acks=0 produce that failed: the client cannot otherwise learn of the error).
        self.close_after = False


class Dispatcher(Protocol):
    """What the server needs from the handler layer (implemented by ``HandlerRegistry``)."""

    def find(self, api_key: int, api_version: int) -> Any: ...

    async def handle(self, ctx: RequestContext, request: Message) -> Message | None: ...

    def error_response(self, ctx: RequestContext, request: Message, code: int) -> Message | None: ...

    def unsupported_api_versions(self) -> Message: ...


class Connection:
    """One client connection: a reader task and an in-order writer task."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dispatcher: Dispatcher,
        max_request_size: int,
    ):
        self.reader = reader
        self.writer = writer
        self.dispatcher = dispatcher
        self.max_request_size = max_request_size
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._pending: asyncio.Queue[tuple[RequestContext, asyncio.Future[bytearray | None]] | None] = (
            asyncio.Queue(MAX_IN_FLIGHT)
        )
        self._closing = False

    async def serve(self) -> None:
        """Run until the peer leaves, a protocol error closes us, or the server shuts down."""
        write_task = asyncio.create_task(self._write_loop(), name=f"kafka-write-{self.peer}")
        try:
            await self._read_loop()
            if not write_task.done():
                # Let the writer send what was already accepted, then stop.
                put = asyncio.ensure_future(self._pending.put(None))
                await asyncio.wait({put, write_task}, return_when=asyncio.FIRST_COMPLETED)
                put.cancel()
                await write_task
        finally:
            write_task.cancel()
            self._drop_pending()
            self.writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.wait_closed(), 1)

    def _drop_pending(self) -> None:
        while not self._pending.empty():
            item = self._pending.get_nowait()
            if item is not None:
                item[1].cancel()

    async def _read_loop(self) -> None:
        while not self._closing:
            try:
                frame = await read_frame(self.reader, self.max_request_size)
            except FrameError as exc:
                log.warning("closing connection from %s: %s", self.peer, exc)
                return
            except asyncio.IncompleteReadError as exc:
                log.info(
                    "connection from %s ended inside a frame (%d bytes read)", self.peer, len(exc.partial)
                )
                return
            except (ConnectionError, OSError) as exc:
                log.debug("connection from %s failed: %s", self.peer, exc)
                return
            if frame is None:
                return
            work = self._accept(frame)
            if work is None:
                return
            ctx, coro = work
            await self._pending.put((ctx, asyncio.ensure_future(coro)))

    def _accept(self, frame: bytes) -> tuple[RequestContext, Awaitable[bytearray | None]] | None:
        """Decode one request and prepare its handler; None means close the connection."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS_KEY and exc.correlation_id is not None:
                # KIP-511: answer a too-new ApiVersions in v0 so the client can learn our range.
                log.info(
                    "ApiVersions v%s from %s is newer than supported; answering with v0",
                    exc.api_version,
                    self.peer,
                )
                ctx = RequestContext(API_VERSIONS_KEY, 0, exc.correlation_id, None, self)
                return ctx, self._encoded(ctx, self.dispatcher.unsupported_api_versions())
            log.warning(
                "closing connection from %s: unsupported request (api key %s, version %s)",
                self.peer,
                exc.api_key,
                exc.api_version,
            )
            return None
        except DecodeError as exc:
            log.warning("closing connection from %s: undecodable request: %s", self.peer, exc)
            return None
        api_key, version = header.request_api_key, header.request_api_version
        if self.dispatcher.find(api_key, version) is None:
            log.warning(
                "closing connection from %s: api key %s version %s is not implemented",
                self.peer,
                api_key,
                version,
            )
            return None
        ctx = RequestContext(api_key, version, header.correlation_id, header.client_id, self)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s v%d (correlation id %d) from %s, client %r",
                type(request).__name__,
                version,
                header.correlation_id,
                self.peer,
                header.client_id,
            )
        return ctx, self._run(ctx, request)

    async def _encoded(self, ctx: RequestContext, response: Message) -> bytearray:
        out = start_frame()
        encode_response_into(out, response, ctx.api_version, ctx.correlation_id)
        return finish_frame(out)

    async def _run(self, ctx: RequestContext, request: Message) -> bytearray | None:
        try:
            response = await self.dispatcher.handle(ctx, request)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "%s v%d from %s (correlation id %d) failed",
                type(request).__name__,
                ctx.api_version,
                self.peer,
                ctx.correlation_id,
            )
            response = self._error_response(ctx, request)
            if response is None:
                ctx.close_after = True
                return None
        if response is None:
            return None
        try:
            return await self._encoded(ctx, response)
        except Exception:
            log.exception(
                "cannot encode the response to %s v%d for %s",
                type(request).__name__,
                ctx.api_version,
                self.peer,
            )
            response = self._error_response(ctx, request)
            if response is None:
                ctx.close_after = True
                return None
            return await self._encoded(ctx, response)

    def _error_response(self, ctx: RequestContext, request: Message) -> Message | None:
        try:
            return self.dispatcher.error_response(ctx, request, ErrorCode.UNKNOWN_SERVER_ERROR)
        except Exception:
            log.exception("cannot build an error response for %s", type(request).__name__)
            return None

    async def _write_loop(self) -> None:
        while True:
            item = await self._pending.get()
            if item is None:
                return
            ctx, task = item
            try:
                frame = await task
            except asyncio.CancelledError:
                if self._closing:
                    return
                raise
            except Exception:  # _run already turns handler failures into responses
                log.exception("request to %s failed unexpectedly; closing", self.peer)
                self._close_now()
                return
            if frame is not None:
                try:
                    self.writer.write(frame)
                    await self.writer.drain()
                except (ConnectionError, OSError) as exc:
                    log.debug("cannot write to %s: %s", self.peer, exc)
                    self._close_now()
                    return
            if ctx.close_after:
                log.info("closing connection from %s after %s response as Kafka does", self.peer, ctx.api_key)
                self._close_now()
                return

    def _close_now(self) -> None:
        self._closing = True
        if self.writer.transport is not None:
            self.writer.transport.abort()
        # Free the queue so a reader blocked on a full queue wakes up and sees ``_closing``.
        self._drop_pending()

    def abort(self) -> None:
        """Drop the connection (broker shutdown)."""
        self._close_now()


class KafkaServer:
    """Listens on one address and runs a ``Connection`` per client."""

    def __init__(self, dispatcher: Dispatcher, host: str, port: int, max_request_size: int):
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_request_size = max_request_size
        self._server: asyncio.Server | None = None
        self._connections: dict[Connection, asyncio.Task[None]] = {}

    async def start(self) -> tuple[str, int]:
        """Bind and listen; returns the real address (``port=0`` picks a free port)."""
        self._server = await asyncio.start_server(
            self._on_connect,
            self.host,
            self.port,
            reuse_address=True,
            limit=2**20,
            backlog=128,
        )
        sockname = self._server.sockets[0].getsockname()
        self.port = sockname[1]
        return sockname[0], sockname[1]

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(reader, writer, self.dispatcher, self.max_request_size)
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn] = task
        try:
            await conn.serve()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection from %s crashed", conn.peer)
        finally:
            self._connections.pop(conn, None)

    async def close(self) -> None:
        """Stop listening and drop every connection (in-flight requests are abandoned)."""
        if self._server is not None:
            self._server.close()
        for conn, task in list(self._connections.items()):
            conn.abort()
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections.values(), return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
