"""The asyncio TCP server: reads frames, dispatches them to handlers, writes responses in order.

Each connection is a protocol plus one writer task. Complete frames wait in a bounded read-ahead
queue (past it the connection stops reading); as on Kafka's channels, a connection serves one
request at a time, in arrival order, and the next starts only once the previous response has been
handed to the transport and sent, so a client that does not read its responses holds one
response's memory, not a growing queue. Connections take turns: after about a millisecond of work
a connection yields to the others (always finishing the request it is on). A synchronous handler
(a plain ``def``: Produce, Metadata, ...) runs in its turn; an ``async def`` one (Fetch's long
poll) runs as its own task, so waiting never stalls other connections. Responses go out in
arrival order (Kafka clients match them by position as much as by correlation id); answers
written at once by the turn go out in one ``send``, which saves the writer's wake-ups. Quota
throttling mutes a connection after its response (KIP-219).

Failure policy follows Kafka's SocketServer: a bad size prefix, an undecodable request, an
unknown api key or an unsupported version (except ApiVersions, which gets the KIP-511 fallback)
closes that one connection with a log line; a handler that raises answers with
UNKNOWN_SERVER_ERROR where the response can carry it and keeps the connection.

Each server is one listener (``reference_broker.security.listeners``): TLS listeners hand the
event loop their ``ssl.SSLContext``, and every connection carries a ``Session`` (its principal
and SASL progress). A request the session refuses (anything but ApiVersions/SaslHandshake/
SaslAuthenticate before SASL authentication, anything after an expired session) closes the
connection, as Kafka's SaslServerAuthenticator does; tokens after a v0 SaslHandshake arrive as raw
frames and are answered as raw frames.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import ssl
import struct
import sys
import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Protocol, cast

from reference_broker.network.framing import SIZE_PREFIX
from reference_broker.network.limits import (
    Admission,
    ConnectionLimits,
    ConnectionThrottled,
    TooManyConnections,
    ip_connection_rate,
)
from reference_broker.network.memory import RequestMemory
from reference_broker.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaManager,
    quota_identity,
)
from reference_broker.security.errors import SaslAuthenticationFailed
from reference_broker.security.listeners import Listener
from reference_broker.security.sasl import SaslSettings
from reference_broker.security.session import SASL_AUTHENTICATE, Session
from reference_broker.security.tls import subject_dn
from sdk.protocol.codec import decode_request, encode_response_parts
from sdk.protocol.errors import DecodeError, ErrorCode, UnsupportedVersionError
from sdk.protocol.messages import ApiVersionsRequest, Message

log = logging.getLogger("reference_broker.network")

API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
PRODUCE_KEY = 0
FETCH_KEY = 1
#: Complete requests a connection may have read ahead of the one being served; past either bound
#: the connection stops reading (the rest waits in the kernel, as behind Kafka's muted channel).
MAX_READ_AHEAD = 64
MAX_READ_AHEAD_BYTES = 4 * 1024 * 1024
#: A connection's turn: after serving requests for this long it yields to the other connections
#: (one request at least, however long it takes).
_TURN_S = 0.001
_SIZE = struct.Struct(">i")
#: Receive buffer for small frames; a frame larger than _SMALL_FRAME gets its own buffer. A
#: connection starts with _FIRST_RECV_BUFFER bytes (an idle or long-polling connection costs little)
#: and grows it, four times at a step up to _RECV_BUFFER, each time a read fills it whole (a client
#: pipelining small requests then needs few ``recv`` calls); a grown buffer is kept.
_FIRST_RECV_BUFFER = 4 * 1024
_RECV_BUFFER = 256 * 1024
_SMALL_FRAME = 64 * 1024
#: Response parts at least this large are handed to the transport uncopied.
_LARGE_WRITE = 64 * 1024
#: Large response parts are written in pieces of this size, each after the previous one left.
_WRITE_CHUNK = 1024 * 1024
#: A connection keeps the buffer of its last large frame, up to this size, for the next one.
_KEEP_FRAME_BUFFER = 16 * 1024 * 1024


class _TimedHandler:
    """Awaits a handler coroutine and adds up the time spent running it, not the time it waits
    (a Fetch's long poll): what Kafka's request quota charges as request handler thread time."""

    __slots__ = ("_coro", "_step_started", "spent")

    def __init__(self, coro: Coroutine[Any, Any, Message | None]):
        self._coro = coro
        self.spent = 0.0  # the finished steps' time
        self._step_started = 0.0  # perf_counter when the running step started, 0 between steps

    def running_s(self) -> float:
        """The time spent so far, the running step's included (asked from inside the handler)."""
        if self._step_started:
            return self.spent + time.perf_counter() - self._step_started
        return self.spent

    def __await__(self) -> Generator[Any, Any, Message | None]:
        coro = self._coro
        sent: Any = None
        error: BaseException | None = None
        while True:
            started = self._step_started = time.perf_counter()
            try:
                waited_on = coro.send(sent) if error is None else coro.throw(error)
            except StopIteration as done:
                self.spent += time.perf_counter() - started
                return cast("Message | None", done.value)
            finally:
                self._step_started = 0.0
            self.spent += time.perf_counter() - started
            try:
                sent, error = (yield waited_on), None
            except BaseException as exc:  # delivered into the handler, as a plain await would
                sent, error = None, exc


def _throttle_ms(throttle_s: float) -> int:
    """A throttle time as responses carry it: whole milliseconds (Kafka rounds), an INT32."""
    return min(round(throttle_s * 1000), 2**31 - 1)


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = (
        "api_key",
        "api_version",
        "charged_s",
        "client_id",
        "close_after",
        "connection",
        "correlation_id",
        "handler_timer",
        "quota_decided",
        "request_size",
    )

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
        self.request_size = 0  # the request frame's bytes (what a producer quota counts)
        # An async handler's running time, and how much of it the request quota counted already.
        self.handler_timer: _TimedHandler | None = None
        self.charged_s = 0.0
        # Set once the handler decided the request's throttling (a fetch, before its response
        # is built): the rest of its time is recorded without throttling this response.
        self.quota_decided = False


class Dispatcher(Protocol):
    """What the server needs from the handler layer (implemented by ``HandlerRegistry``)."""

    def find(self, api_key: int, api_version: int) -> Any: ...

    async def handle(self, ctx: RequestContext, request: Message) -> Message | None: ...

    def handle_now(self, ctx: RequestContext, request: Message) -> Message | None: ...

    def error_response(self, ctx: RequestContext, request: Message, code: int) -> Message | None: ...

    def unsupported_api_versions(self) -> Message: ...


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames read straight into their own buffers, in-order writer task.

    Reading is callback-driven (``asyncio.BufferedProtocol``) rather than ``StreamReader`` based:
    a large frame (a produce request) gets a buffer of its own as soon as its size prefix is known
    and the kernel copies the rest of it straight in, instead of the data being copied into a
    stream buffer, out into ``bytes`` and then trimmed from the buffer. That buffer is used again
    for the connection's next large frame once nothing refers to the last one: a fresh 1 MiB
    ``bytearray`` per produce request was zero-filled first and, never in the CPU's cache, made
    every later pass over the request (CRC, record walk, write) read from memory. Small frames
    are cut out of one reusable receive buffer, so pipelined small requests cost one ``recv``
    between them; each is copied into a ``bytearray`` of its own, writable like a large frame's
    buffer, so that a small produce request's records too are validated and written where they
    are (as ``bytes`` the log had to copy them once more). Requests are decoded and their
    handlers started in arrival order, as before.

    Responses go out in request order. Synchronous handlers' answers with nothing queued before
    them are written by the read callback itself, all of one read's in one ``send``; everything
    else is written by one task, every response already finished in one go, and a Fetch
    response's record data is handed to the transport as the log's buffers, never copied into
    the frame.
    """

    def __init__(self, server: KafkaServer, admission: Admission):
        self.server = server
        self.admission = admission  # its place in the server's connection limits
        self._memory: RequestMemory = server.limits.memory
        self._charged = 0  # request bytes taken from the memory pool and not yet given back
        self.dispatcher = server.dispatcher
        self.max_request_size = server.max_request_size
        self.peer = "?"
        self.peer_host = ""
        self.session = Session(server.listener, server.sasl)
        self.transport: asyncio.Transport | None = None
        self._recv = bytearray(_FIRST_RECV_BUFFER)
        self._recv_filled = False  # the last read filled the receive buffer: grow it
        self._start = 0  # unparsed bytes are self._recv[self._start : self._end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being received into its own buffer
        self._frame_size = 0  # the frame's size; its buffer may be larger
        self._frame_got = 0
        self._spare: bytearray | None = None  # the last large frame's buffer, free for the next
        self._pending: collections.deque[tuple[RequestContext, asyncio.Future[list[Any] | None]]] = (
            collections.deque()
        )
        self._wakeup: asyncio.Future[None] | None = None
        self._writer_idle = False  # the writer waits for work, everything before is written
        self._direct: list[Any] = []  # answers the read callback writes itself (see _on_frame)
        self._direct_size = 0
        self._writable: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._read_done = False  # no more requests will come (EOF, protocol error)
        self._closing = False
        self._write_task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        # Requests read and not yet served, in arrival order: (frame, its own large buffer or None).
        self._ready: collections.deque[tuple[bytes | bytearray | memoryview, bytearray | None]] = (
            collections.deque()
        )
        self._ready_bytes = 0
        # A request is being served: accepted, and its response not yet all handed to the
        # transport. The next one waits (Kafka's one request per connection at a time).
        self._in_service = False
        self._turn_scheduled = False
        self._muted_until = 0.0  # loop time before which no request is served (quota throttling)
        self._unmute: asyncio.TimerHandle | None = None
        # Time spent handing responses to the transport since the request quota last counted it
        # (Kafka's network thread time, charged to the request quota without throttling).
        self._network_s = 0.0
        self.last_active = self._loop.time()

    # -- protocol callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream server hands a Transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if self.server.ssl_context is not None:
            cert = transport.get_extra_info("peercert")
            if cert:
                self.session.principal = f"User:{subject_dn(cert)}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send_buffer = self.server.limits.send_buffer_bytes
            if send_buffer != -1:  # socket.send.buffer.bytes, as Kafka's acceptor sets it
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        # Pause as soon as anything is left unsent, resume once all of it is: ``_write`` hands
        # over the next piece of a large response only then (see there).
        # A TLS transport keeps its own buffer of encrypted data and its default limits.
        if self.server.ssl_context is None:
            cast(asyncio.WriteTransport, transport).set_write_buffer_limits(high=0, low=0)  # a stream's
        self.server._connections.add(self)
        self._write_task = self._loop.create_task(self._write_loop(), name=f"kafka-write-{self.peer}")

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_got : self._frame_size]
        if self._recv_filled and len(self._recv) < _RECV_BUFFER:
            # A new, larger buffer (never a resize: a view of the old one may still be alive).
            grown = bytearray(min(len(self._recv) * 4, _RECV_BUFFER))
            pending = self._end - self._start
            grown[:pending] = self._recv[self._start : self._end]
            self._recv, self._start, self._end = grown, 0, pending
        elif self._end == len(self._recv):
            # Move the start of a partial small frame to the front (same-size slice assignment:
            # the buffer never changes size, so no view of it can be invalidated).
            pending = self._end - self._start
            self._recv[:pending] = self._recv[self._start : self._end]
            self._start, self._end = 0, pending
        self._recv_filled = False
        return memoryview(self._recv)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        if self._frame is not None:
            self._frame_got += nbytes
            if self._frame_got == self._frame_size:
                self._on_large_frame()
                self._parse()  # frames that arrived while reading was paused
            return
        self._end += nbytes
        self._recv_filled = self._end == len(self._recv)
        self._parse()

    def eof_received(self) -> bool:
        if self._frame is not None or self._end > self._start:
            got = self._frame_got if self._frame is not None else self._end - self._start
            log.info("connection from %s ended inside a frame (%d bytes read)", self.peer, got)
        self._stop_reading()
        # Keep the transport open until the writer has sent what was accepted (a TLS transport
        # cannot be half-closed and closes itself).
        return self.server.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection from %s failed: %s", self.peer, exc)
        self._closing = True
        self._stop_reading()
        self._drop_pending()
        self._drop_ready()
        self._memory.forget(id(self))
        if self._unmute is not None:
            self._unmute.cancel()
        self.server.limits.release(self.admission)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self._write_task is not None and not self._write_task.done():
            self._write_task.cancel()
        if not self.closed.done():
            self.closed.set_result(None)
        self.server._connections.discard(self)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.last_active = self._loop.time()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self._ready:
            self._schedule_turn()

    # -- reading --------------------------------------------------------------------------------

    def _parse(self) -> None:
        """Hand every complete frame in the receive buffer to ``_on_frame``, in order."""
        buf = self._recv
        while not self._read_done and not self._read_ahead_full():
            available = self._end - self._start
            if available < SIZE_PREFIX:
                break
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < 0 or size > self.max_request_size:
                reason = (
                    f"negative frame size {size}"
                    if size < 0
                    else f"frame size {size} is larger than socket.request.max.bytes"
                    f" ({self.max_request_size})"
                )
                log.warning("closing connection from %s: %s", self.peer, reason)
                self._stop_reading()
                self._serve_turn()  # the requests read before it are still answered
                return
            body = self._start + SIZE_PREFIX
            complete = self._end - body >= size
            if self._memory.capacity and (complete or size > _SMALL_FRAME) and not self._take(size):
                break  # the pool is empty: reading waits (see _take)
            if complete:
                with memoryview(buf) as view:
                    frame = bytearray(view[body : body + size])
                self._start = body + size
                self._enqueue(frame, None)
                continue
            if size > _SMALL_FRAME:
                # Large: give it its own buffer now and let the kernel fill in the rest.
                frame_buf = self._reusable_spare(size) or bytearray(size)
                got = self._end - body
                with memoryview(buf) as view:
                    frame_buf[:got] = view[body : self._end]
                self._frame, self._frame_size, self._frame_got = frame_buf, size, got
                self._start = self._end
            break
        if self._start == self._end:
            self._start = self._end = 0
        elif self._read_ahead_full():
            self._pause_reading()
        self._serve_turn()

    def _on_large_frame(self) -> None:
        """Queue the large frame just received; its buffer is offered to the next one once it
        has been served (``_recycle``)."""
        buffer, self._frame = self._frame, None
        assert buffer is not None
        size = self._frame_size
        frame = memoryview(buffer)[:size] if len(buffer) > size else buffer
        self._enqueue(frame, buffer)

    def _recycle(self, frame: bytes | bytearray | memoryview, buffer: bytearray) -> None:
        """Offer a served large frame's buffer to the next large frame."""
        if isinstance(frame, memoryview):  # a slice of ``buffer``
            try:
                frame.release()
            except BufferError:  # exported by a view still alive somewhere: not reusable
                return
        if len(buffer) <= _KEEP_FRAME_BUFFER:
            self._spare = buffer

    # -- serving: one request at a time, in arrival order, yielding between turns ---------------

    def _enqueue(self, frame: bytes | bytearray | memoryview, buffer: bytearray | None) -> None:
        if self._ready:
            self._memory.read_ahead()
        self._ready.append((frame, buffer))
        self._ready_bytes += frame.nbytes if type(frame) is memoryview else len(frame)
        if self._read_ahead_full():
            self._pause_reading()

    def _read_ahead_full(self) -> bool:
        """No more requests are read for now. With the memory pool on, as on Kafka's muted channel,
        one request at a time is read and answered; otherwise this connection reads ahead up to its
        own bounds and, beyond its next request, while the broker's ``queued.max.requests`` is not
        reached (see ``reference_broker.network.memory``)."""
        ready = len(self._ready)
        memory = self._memory
        if memory.capacity:
            return ready >= 1 or self._in_service
        if ready >= MAX_READ_AHEAD or self._ready_bytes >= MAX_READ_AHEAD_BYTES:
            return True
        return ready >= 1 and memory.queued >= memory.max_queued

    def _take(self, size: int) -> bool:
        """Take a request's bytes from the memory pool; when it is empty, stop reading until bytes
        come back (the parse starts again from this request then)."""
        if self._memory.try_take(size):
            self._charged += size
            return True
        self._pause_reading()
        self._memory.wait(id(self), self._schedule_turn)
        return False

    def _give_back(self, size: int) -> None:
        size = min(size, self._charged)
        if size > 0:
            self._charged -= size
            self._memory.give_back(size)

    def _drop_ready(self) -> None:
        """Forget the requests read and not served (the connection is refused or gone)."""
        if len(self._ready) > 1:
            self._memory.read_ahead_done(len(self._ready) - 1)
        self._ready.clear()
        self._ready_bytes = 0
        self._give_back(self._charged)

    def _pause_reading(self) -> None:
        if not self._reading_paused and not self._read_done:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def _may_serve(self) -> bool:
        """The next request may start: none is in service, the transport has sent what it was
        given (a client that does not read its responses gets no more of them: the memory held
        for one connection is one response), and the connection is not muted by a quota."""
        if self._in_service or self._closing:
            return False
        if self._writable is not None and not self._writable.done():
            return False
        return not (self._muted_until and self._loop.time() < self._muted_until)

    def _schedule_turn(self) -> None:
        """Serve the next requests on a later loop iteration, after other connections' turns."""
        if not self._turn_scheduled and not self._closing:
            self._turn_scheduled = True
            self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        if self._closing:
            return
        if self._reading_paused and not self._read_ahead_full() and not self._read_done:
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()
            if self._frame is None:
                self._parse()  # frames left in the receive buffer; serves a turn
                return
        self._serve_turn()

    def _serve_turn(self) -> None:
        """Serve ready requests one after the other while each is answered at once, for at most
        ``_TURN_S``; then leave the rest to a later turn so other connections are served between."""
        started = 0.0
        while self._ready and self._may_serve():
            frame, buffer = self._ready.popleft()
            size = frame.nbytes if type(frame) is memoryview else len(frame)
            self._ready_bytes -= size
            if self._ready:
                self._memory.read_ahead_done()
            if not started:
                started = time.perf_counter()
            self._on_frame(frame)
            if self._charged:
                self._give_back(size)  # handed to its handler, as Kafka frees it then
            if buffer is not None:
                self._recycle(frame, buffer)
            if time.perf_counter() - started >= _TURN_S:
                break
        if self._direct:
            self._flush_direct()
        if self._ready or (self._reading_paused and not self._read_done):
            if self._may_serve():
                self._schedule_turn()
            elif self._muted_until and self._unmute is None and not self._in_service:
                self._unmute = self._loop.call_at(self._muted_until, self._on_unmuted)
        elif self._read_done and not self._in_service:
            self._wake_writer()  # nothing more will be served: the writer closes the connection

    def mute(self, seconds: float) -> None:
        """Serve nothing more on this connection for ``seconds`` (Kafka's quota throttling,
        KIP-219: the response goes out at once, then the channel is muted)."""
        until = self._loop.time() + seconds
        if until > self._muted_until:
            self._muted_until = until
            if self._unmute is not None:
                self._unmute.cancel()
                self._unmute = None

    def _on_unmuted(self) -> None:
        self._unmute = None
        if self._loop.time() < self._muted_until:
            self._unmute = self._loop.call_at(self._muted_until, self._on_unmuted)
            return
        self._muted_until = 0.0
        self._schedule_turn()

    def _service_done(self) -> None:
        """The request in service has been answered and its response handed to the transport."""
        self._in_service = False
        self.last_active = self._loop.time()
        if self._muted_until and self._loop.time() < self._muted_until:
            if self._unmute is None:
                self._unmute = self._loop.call_at(self._muted_until, self._on_unmuted)
        else:
            self._schedule_turn()

    def _wake_writer(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _reusable_spare(self, size: int) -> bytearray | None:
        """The last large frame's buffer, if it holds ``size`` bytes and nothing refers to it.

        Asked when the next large frame starts, not when the last one was handled: the transport
        still holds the view it read the last bytes into until the read callback returns. A
        synchronous handler (Produce) is done with its request by then; a request still referred
        to (an async handler's, a view kept anywhere) keeps views of the buffer, each holding a
        reference to it, and the buffer is then left to them.
        """
        spare, self._spare = self._spare, None
        # Referred to by ``spare`` and getrefcount's argument only: no view of it is alive.
        if spare is not None and len(spare) >= size and sys.getrefcount(spare) == 2:
            return spare
        return None

    def _on_frame(self, frame: bytes | bytearray | memoryview) -> None:
        work = self._accept(frame)
        if work is None:
            self._stop_reading()
            self._drop_ready()  # nothing after a refused request is served
            return
        ctx, answer = work
        if answer is None or isinstance(answer, list):
            # Answered already. With nothing queued before it and the transport keeping up, it
            # joins this turn's direct write; otherwise it goes through the writer.
            if not self._pending and self._writer_idle and not ctx.close_after:
                size = sum(part.nbytes if type(part) is memoryview else len(part) for part in answer or ())
                writable = self._writable is None or self._writable.done()
                if writable and self._direct_size + size < _LARGE_WRITE:
                    if answer:
                        self._direct += answer
                        self._direct_size += size
                    return
            done = self._loop.create_future()
            done.set_result(answer)
            self._pending.append((ctx, done))
        else:
            self._pending.append((ctx, asyncio.ensure_future(answer)))
        self._in_service = True
        self._wake_writer()

    def _stop_reading(self) -> None:
        """No more requests: the writer answers what was accepted, then closes the connection."""
        if not self._read_done and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()  # whatever else the peer sends is ignored
        self._read_done = True
        self._frame = None
        self._start = self._end = 0
        if self._direct:
            self._flush_direct()
        if not self._ready and not self._in_service:
            self._wake_writer()

    def _accept(
        self, frame: bytes | bytearray | memoryview
    ) -> tuple[RequestContext, list[Any] | Awaitable[list[Any] | None] | None] | None:
        """Decode one request and answer it (synchronous handlers: the response frame's parts, or
        None for no response) or prepare its handler (a coroutine); None means close the
        connection."""
        session = self.session
        if session.raw_tokens:
            return self._raw_token(frame)
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
        handler = self.dispatcher.find(api_key, version)
        if handler is None:
            log.warning(
                "closing connection from %s: api key %s version %s is not implemented",
                self.peer,
                api_key,
                version,
            )
            return None
        if not session.authenticated or session.expires_at_ms is not None:
            refusal = session.refusal(api_key)
            if refusal is not None:
                log.warning("closing connection from %s (%s): %s", self.peer, session.principal, refusal)
                return None
        ctx = RequestContext(api_key, version, header.correlation_id, header.client_id, self)
        ctx.request_size = frame.nbytes if type(frame) is memoryview else len(frame)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s v%d (correlation id %d) from %s, client %r",
                type(request).__name__,
                version,
                header.correlation_id,
                self.peer,
                header.client_id,
            )
        if handler.synchronous:
            return ctx, self._run_now(ctx, request)
        return ctx, self._run(ctx, request)

    def _raw_token(self, frame: bytes | bytearray | memoryview) -> tuple[RequestContext, list[Any]] | None:
        """A SASL token after SaslHandshake v0: no Kafka header, the answer a raw frame too."""
        try:
            challenge, _ = self.session.authenticate(bytes(frame))
        except SaslAuthenticationFailed as exc:
            log.warning("closing connection from %s: SASL authentication failed: %s", self.peer, exc)
            return None
        ctx = RequestContext(SASL_AUTHENTICATE, 0, 0, None, self)
        return ctx, [_SIZE.pack(len(challenge)), challenge]

    # -- handling -------------------------------------------------------------------------------

    def _encoded(self, ctx: RequestContext, response: Message) -> list[Any]:
        """The response frame as buffers for the transport: size prefix, header and body, with
        large record data left where it is (``encode_response_parts``)."""
        parts = encode_response_parts(response, ctx.api_version, ctx.correlation_id)
        size = sum(part.nbytes if type(part) is memoryview else len(part) for part in parts)
        return [_SIZE.pack(size), *parts]

    async def _run(self, ctx: RequestContext, request: Message) -> list[Any] | None:
        handler = ctx.handler_timer = _TimedHandler(self.dispatcher.handle(ctx, request))
        try:
            response = await handler
        except asyncio.CancelledError:
            raise
        except Exception:
            return self._failed(ctx, request)
        return self._answer(ctx, request, response, handler.spent)

    def _run_now(self, ctx: RequestContext, request: Message) -> list[Any] | None:
        started = time.perf_counter()
        try:
            response = self.dispatcher.handle_now(ctx, request)
        except Exception:
            return self._failed(ctx, request)
        return self._answer(ctx, request, response, time.perf_counter() - started)

    def fetch_throttle_ms(self, ctx: RequestContext, response_size: int) -> int:
        """Record a consumer's fetch response of ``response_size`` bytes against its
        ``consumer_byte_rate`` quota, before the response is built, as Kafka's KafkaApis does.

        Within the quota: 0, and the bytes stay counted. Over it: the bytes are taken back, the
        connection is muted for the throttle time, which is returned (ms), and the handler answers
        without records (Kafka's ``getThrottledResponse``): what a throttled consumer reads is what
        its quota lets through, not one more response per throttle. A client over its request
        quota gets the same empty answer."""
        quotas = self.server.quotas
        if quotas is None or not quotas.enabled:
            return 0
        user, client_id = quota_identity(self.session.principal, ctx.client_id)
        throttle = quotas.record(user, client_id, CONSUMER_BYTE_RATE, response_size)
        # The handler's time so far, as Kafka records the request thread time at this point.
        ctx.charged_s = ctx.handler_timer.running_s() if ctx.handler_timer is not None else 0.0
        ctx.quota_decided = True
        request_throttle = self._request_quota(user, client_id, ctx.charged_s)
        if max(throttle, request_throttle) <= 0:
            return 0
        quotas.unrecord(user, client_id, CONSUMER_BYTE_RATE, response_size)
        throttle = max(throttle, request_throttle)
        self.mute(throttle)
        return _throttle_ms(throttle)

    def _request_quota(self, user: str, client_id: str, handler_s: float) -> float:
        """Charge ``request_percentage`` as Kafka does: the request's handler time, and the network
        time spent sending this connection's responses since last charged (Kafka records that
        without throttling when a response has gone out, so it throttles the next request)."""
        quotas = self.server.quotas
        assert quotas is not None
        spent, self._network_s = handler_s + self._network_s, 0.0
        return quotas.record(user, client_id, REQUEST_PERCENTAGE, spent * 100, max_window=True)

    def _throttle(self, ctx: RequestContext, handler_s: float) -> int:
        """Record the request against the client's request and producer quotas (a fetch's bytes
        were recorded by its handler, ``fetch_throttle_ms``); mute the connection for the throttle
        time, which is returned (ms) for the response to carry (KIP-219)."""
        quotas = self.server.quotas
        assert quotas is not None
        rest_s = max(0.0, handler_s - ctx.charged_s)
        if ctx.quota_decided:
            # Kafka records a fetch's request time once, where it decides the throttle (a
            # throttled fetch is answered without records); what the handler spends after that
            # counts against the next request, as the time of sending a response does.
            self._network_s += rest_s
            return 0
        user, client_id = quota_identity(self.session.principal, ctx.client_id)
        throttle = self._request_quota(user, client_id, rest_s)
        if ctx.api_key == PRODUCE_KEY:
            throttle = max(throttle, quotas.record(user, client_id, PRODUCER_BYTE_RATE, ctx.request_size))
        if throttle <= 0:
            return 0
        self.mute(throttle)
        return _throttle_ms(throttle)

    def _failed(self, ctx: RequestContext, request: Message) -> list[Any] | None:
        """The handler raised: log it and answer with an error."""
        log.exception(
            "%s v%d from %s (correlation id %d) failed",
            type(request).__name__,
            ctx.api_version,
            self.peer,
            ctx.correlation_id,
        )
        return self._error_answer(ctx, request)

    def _answer(
        self, ctx: RequestContext, request: Message, response: Message | None, handler_s: float = 0.0
    ) -> list[Any] | None:
        quotas = self.server.quotas
        if response is None:
            if quotas is not None and quotas.enabled:
                self._throttle(ctx, handler_s)
            return None
        try:
            frame = self._encoded(ctx, response)
            if quotas is not None and quotas.enabled:
                throttle_ms = self._throttle(ctx, handler_s)
                if throttle_ms > getattr(response, "throttle_time_ms", throttle_ms):
                    response.throttle_time_ms = throttle_ms  # type: ignore[attr-defined]
                    frame = self._encoded(ctx, response)
            return frame
        except Exception:
            log.exception(
                "cannot encode the response to %s v%d for %s",
                type(request).__name__,
                ctx.api_version,
                self.peer,
            )
            return self._error_answer(ctx, request)

    def _error_answer(self, ctx: RequestContext, request: Message) -> list[Any] | None:
        """UNKNOWN_SERVER_ERROR where the response can carry it; otherwise (or if even that
        cannot be encoded) nothing, and the connection closes after the answers before it."""
        try:
            response = self._error_response(ctx, request)
            if response is not None:
                return self._encoded(ctx, response)
        except Exception:
            log.exception("cannot encode an error response to %s", type(request).__name__)
        ctx.close_after = True
        return None

    def _error_response(self, ctx: RequestContext, request: Message) -> Message | None:
        try:
            return self.dispatcher.error_response(ctx, request, ErrorCode.UNKNOWN_SERVER_ERROR)
        except Exception:
            log.exception("cannot build an error response for %s", type(request).__name__)
            return None

    # -- writing --------------------------------------------------------------------------------

    async def _next(self) -> tuple[RequestContext, asyncio.Future[list[Any] | None]] | None:
        """The oldest accepted request, waiting for one; None once reading is over and all are
        answered."""
        while not self._pending:
            if self._closing or (self._read_done and not self._ready and not self._in_service):
                return None
            self._wakeup = self._loop.create_future()
            self._writer_idle = True
            try:
                await self._wakeup
            finally:
                self._writer_idle = False
        return self._pending.popleft()

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._next()
                if item is None:
                    break
                ctx, task = item
                out: list[Any] = []
                close = False
                while True:
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
                        out += frame
                    if ctx.close_after:
                        close = True
                        break
                    # Answers that are already done go out with this one, in the same call.
                    if not self._pending or not self._pending[0][1].done():
                        break
                    ctx, task = self._pending.popleft()
                if out and not await self._write(out):
                    return
                if not self._pending:
                    self._service_done()
                if close:
                    log.info(
                        "closing connection from %s after %s response as Kafka does", self.peer, ctx.api_key
                    )
                    self._close_now()
                    return
                if self._writable is not None and not self._writable.done():
                    await self._writable  # the transport's buffer is above its high-water mark
        finally:
            if not self._closing and self.transport is not None:
                self._closing = True
                self.transport.close()  # sends what is buffered, then closes

    async def _write(self, parts: list[Any]) -> bool:
        """Give ``parts`` to the transport; small ones are joined into one buffer, large ones (a
        Fetch response's records) are passed as views, ``_WRITE_CHUNK`` bytes at a time.

        A chunk is only written once the transport's own buffer is empty (high-water mark 0, see
        ``connection_made``), so the transport sends it straight from the log's buffer and copies
        at most the part of one chunk the kernel did not take. Handing it a whole multi-MiB
        response at once made it copy everything beyond the socket buffer into its ``bytearray``
        (growing it by reallocation), tens of MiB for an 8-partition fetch, before the client
        could read the end of the response it is waiting for.
        """
        small: list[Any] = []
        for part in parts:
            size = part.nbytes if type(part) is memoryview else len(part)
            if size < _LARGE_WRITE:
                small.append(part)
                continue
            if small:
                if not await self._send(b"".join(small) if len(small) > 1 else small[0]):
                    return False
                small = []
            # Not released explicitly: a transport may keep a slice of it until sent (3.12+).
            view = memoryview(part)
            for start in range(0, size, _WRITE_CHUNK):
                if not await self._send(view[start : start + _WRITE_CHUNK]):
                    return False
        if small:
            return await self._send(b"".join(small) if len(small) > 1 else small[0])
        return True

    async def _send(self, data: bytes | memoryview) -> bool:
        """Write ``data`` once the transport has sent everything before it; False if closed."""
        if self._writable is not None and not self._writable.done():
            await self._writable
        transport = self.transport
        if transport is None or transport.is_closing():
            self._close_now()
            return False
        started = time.perf_counter()
        transport.write(data)
        self._network_s += time.perf_counter() - started
        self.last_active = self._loop.time()
        return True

    def _flush_direct(self) -> None:
        """Write the answers ``_on_frame`` kept for this read, in one call."""
        data = b"".join(self._direct) if len(self._direct) > 1 else self._direct[0]
        self._direct = []
        self._direct_size = 0
        transport = self.transport
        if transport is not None and not transport.is_closing():
            started = time.perf_counter()
            transport.write(data)
            self._network_s += time.perf_counter() - started
            self.last_active = self._loop.time()

    def _drop_pending(self) -> None:
        while self._pending:
            _, task = self._pending.popleft()
            task.cancel()

    def _close_now(self) -> None:
        self._closing = True
        self._stop_reading()
        if self.transport is not None:
            self.transport.abort()
        self._drop_pending()

    @property
    def in_service(self) -> bool:
        """A request of this connection is being served or its response written."""
        return self._in_service

    def abort(self) -> None:
        """Drop the connection (broker shutdown, idle expiry)."""
        self._close_now()


class KafkaServer:
    """Listens on one listener's address and runs a ``Connection`` per client.

    Connections are taken by an acceptor task per listening socket, as Kafka's ``Acceptor``: each
    accepted connection is admitted by the broker-wide ``ConnectionLimits`` first, and while the
    acceptor waits there (no slot under ``max.connections``, a creation-rate throttle) the
    connections after it wait in the kernel's listen backlog. A connection over its address's
    limit is closed at once; one over its address's creation-rate quota is kept unread and closed
    when its throttle time is over.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str,
        port: int,
        max_request_size: int,
        *,
        listener: Listener | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslSettings | None = None,
        limits: ConnectionLimits | None = None,
        quotas: QuotaManager | None = None,
    ):
        self.dispatcher = dispatcher
        self.limits = limits or ConnectionLimits()
        self.quotas = quotas
        if quotas is not None:
            store = quotas.store
            self.limits.ip_rate = lambda host: ip_connection_rate(store.entries, host)
        self._idle_task: asyncio.Task[None] | None = None
        self.host = host
        self.port = port
        self.max_request_size = max_request_size
        self.listener = listener or Listener("PLAINTEXT", "PLAINTEXT", host, port)
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._starting: set[asyncio.Task[None]] = set()  # connections being set up (TLS handshakes)
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}  # closed when their time is up
        self._connections: set[Connection] = set()

    async def start(self, *, accept: bool = True) -> tuple[str, int]:
        """Bind and listen; returns the real address (``port=0`` picks a free port). With
        ``accept`` False the port is held but connections wait in the backlog until
        :meth:`start_accepting`."""
        loop = asyncio.get_running_loop()
        self._sockets = self._listen()
        self.limits.add_listener(self.listener.name, self._evict_least_recent)
        if accept:
            self.start_accepting()
        if self.limits.idle_ms >= 0:
            self._idle_task = loop.create_task(self._close_idle(), name="kafka-idle-connections")
        sockname = self._sockets[0].getsockname()
        self.port = sockname[1]
        self.listener.port = sockname[1]
        return sockname[0], sockname[1]

    def start_accepting(self) -> None:
        """Take the connections of the listening sockets (once; after :meth:`start`). A cluster's
        broker binds its ports at start but takes clients only once it has caught up with the
        cluster's metadata, as Kafka's BrokerServer enables request processing only then: before,
        it would answer from an empty image (no brokers, every topic unknown), which clients
        take for a deleted topic."""
        if self._acceptors or not self._sockets:
            return
        loop = asyncio.get_running_loop()
        self._acceptors = [
            loop.create_task(self._accept_loop(sock), name=f"kafka-acceptor-{self.listener.name}")
            for sock in self._sockets
        ]

    @property
    def accepting(self) -> bool:
        return bool(self._acceptors)

    def _listen(self) -> list[socket.socket]:
        """A listening socket per address of the host (every interface when it is empty), all on
        one port (the first one's when ``port`` is 0)."""
        infos = socket.getaddrinfo(
            self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        sockets: list[socket.socket] = []
        port = self.port
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if self.limits.receive_buffer_bytes != -1:  # socket.receive.buffer.bytes
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.limits.receive_buffer_bytes)
                sock.bind((address[0], port, *address[2:]))
                port = sock.getsockname()[1]
                sock.listen(self.limits.listen_backlog)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    async def _accept_loop(self, listening: socket.socket) -> None:
        """Take every connection waiting in the backlog each time the socket is readable (one at a
        time would leave the backlog to overflow while the loop serves others, and a connection
        whose SYN is dropped then waits a second for its retry)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                await self._readable(loop, listening)
                continue
            except OSError as exc:  # out of file descriptors, say: Kafka logs it and goes on
                log.error("listener %s cannot accept a connection: %s", self.listener.name, exc)
                await asyncio.sleep(0.1)
                continue
            host = str(address[0]) if isinstance(address, tuple) else str(address)
            try:
                admission = await self.limits.admit(self.listener.name, host)
            except TooManyConnections as exc:
                log.info("closing connection from %s: %s", host, exc)
                sock.close()
                continue
            except ConnectionThrottled as exc:
                log.debug("delaying the close of a connection from %s: %s", host, exc)
                self._throttled[sock] = loop.call_at(
                    exc.close_at - self.limits.clock() + loop.time(), self._close_throttled, sock
                )
                continue
            except BaseException:
                sock.close()
                raise
            sock.setblocking(False)
            task = loop.create_task(self._connect(sock, admission))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    @staticmethod
    async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        ready: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(sock, on_readable)
        try:
            await ready
        finally:
            loop.remove_reader(sock)

    def _close_throttled(self, sock: socket.socket) -> None:
        self._throttled.pop(sock, None)
        sock.close()

    async def _connect(self, sock: socket.socket, admission: Admission) -> None:
        """Run a ``Connection`` on an admitted socket (after the TLS handshake on a TLS listener)."""
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: Connection(self, admission), sock, ssl=self.ssl_context
            )
        except BaseException as exc:
            self.limits.release(admission)
            sock.close()
            if not isinstance(exc, Exception):
                raise
            log.info("connection on listener %s not set up: %s", self.listener.name, exc)

    def _evict_least_recent(self) -> Admission | None:
        """Close this listener's least recently active connection (the inter-broker listener took
        the broker over ``max.connections``); its admission, or None when there is none."""
        if not self._connections:
            return None
        conn = min(self._connections, key=lambda c: c.last_active)
        log.info("closing connection from %s: the inter-broker listener is over max.connections", conn.peer)
        self._connections.discard(conn)
        conn.abort()
        return conn.admission

    async def _close_idle(self) -> None:
        """Close connections with no traffic for ``connections.max.idle.ms`` (one with a request
        in service, a long poll say, is not idle)."""
        idle_s = self.limits.idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.01), 30.0))
            now = loop.time()
            for conn in list(self._connections):
                if not conn.in_service and now - conn.last_active > idle_s:
                    log.info("closing connection from %s: idle for connections.max.idle.ms", conn.peer)
                    conn.abort()

    async def close(self) -> None:
        """Stop listening and drop every connection (in-flight requests are abandoned)."""
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        for task in self._acceptors:
            task.cancel()
        for sock in self._sockets:
            sock.close()
        for sock, timer in list(self._throttled.items()):
            timer.cancel()
            sock.close()
        self._throttled.clear()
        for task in list(self._starting):
            task.cancel()
        connections = list(self._connections)
        for conn in connections:
            conn.abort()
        if connections:
            await asyncio.wait([conn.closed for conn in connections], timeout=5)
            tasks = [conn._write_task for conn in connections if conn._write_task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*self._acceptors, *self._starting, return_exceptions=True)
        self._acceptors = []
        self._sockets = []
