"""A loopback TCP proxy in front of each node of a local cluster, so a test can cut links on purpose.

Every listener of every node (its broker and controller listeners) gets a route: the proxy
listens where the node advertises itself and forwards bytes both ways to where the node really
listens. Nodes reach each other only through the advertised addresses, so all traffic between
nodes and from clients crosses the proxy, which tells the connecting side by its source address:
node N binds its outbound connections to its own loopback address (``peer.py``'s
``local_host``), anything else (the test's clients connect from 127.0.0.1) is :data:`CLIENTS`.

A cut is a set of directed links ``(source, destination)``: the connections ``source`` opens to
``destination``'s listeners. ``cut(a, b)`` cuts both directions, ``cut(a, b, both_ways=False)``
only the connections ``a`` opens (replies to ``b``'s own connections still flow, which is what a
one-way partition looks like to request/response protocols), ``isolate(n)`` every link of ``n``
with other nodes and with clients, ``cut_clients(n)`` clients only. A node's connections to itself
are never cut. Two failure modes, because Kafka's clients and raft react differently to them:

* :attr:`CutMode.RESET`: existing connections are reset (RST on both ends) and new ones are
  accepted and reset at once, as a host that is down or firewalled with REJECT.
* :attr:`CutMode.BLACKHOLE`: existing connections go silent (nothing more is forwarded, nothing
  is closed) and new ones are accepted but never answered, as a pulled cable or a DROP rule:
  the peers notice only through their own timeouts. The silent connections are reset when
  the link is healed (their bytes are lost, as a peer that forgot the connection answers).

The proxy runs an asyncio loop in a daemon thread of the process that controls the cluster (the
test process, or ``python -m reference_broker cluster``), never in a node's process: a node that is
SIGSTOPped, SIGKILLed or restarted must not take its proxy or the cut state with it, and the
controlling process is the one that is never paused. In a thread, control calls are plain method
calls that return only once the cut is in effect (existing connections already reset), with no
control protocol to keep in step, and the proxy ends with the controlling process. The cost is
sharing that process's GIL: forwarding slows while the test runs pure-Python code at full speed,
which delays bytes but never reorders or loses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import struct
import threading
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger("reference_broker.cluster.proxy")

#: The source id of every connection that does not come from a node's own address.
CLIENTS = 0
_CHUNK = 64 * 1024
_CONTROL_TIMEOUT_S = 10.0
_LINGER_RESET = struct.pack("ii", 1, 0)

T = TypeVar("T")


class ProxyError(RuntimeError):
    """A control call was invalid (unknown node, bad link) or the proxy is not running."""


class CutMode(enum.Enum):
    """How a cut link fails: reset connections, or silently drop everything."""

    RESET = "reset"
    BLACKHOLE = "blackhole"


@dataclass(frozen=True)
class Route:
    """One listener of one node: where the proxy listens and where the node really listens."""

    node_id: int
    name: str
    listen_host: str
    listen_port: int
    target_host: str
    target_port: int


@dataclass(eq=False)
class _Connection:
    source: int
    route: Route
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    silenced: bool = False

    @property
    def link(self) -> tuple[int, int]:
        return self.source, self.route.node_id


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0), dropping anything unsent, as a refusing host would."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


class ClusterProxy:
    """Routes for every node listener plus the link cuts; control methods are thread-safe.

    ``node_hosts`` maps each node's own loopback address (the source of its outbound
    connections) to its node id; node ids must be positive (0 is :data:`CLIENTS`).
    """

    def __init__(self, node_hosts: Mapping[str, int]) -> None:
        for host, node_id in node_hosts.items():
            if node_id <= 0:
                raise ProxyError(f"node id {node_id} of {host} must be positive (0 means clients)")
        if len(set(node_hosts.values())) != len(node_hosts):
            raise ProxyError(f"two addresses map to one node: {dict(node_hosts)}")
        self.node_hosts = dict(node_hosts)
        self._nodes = frozenset(node_hosts.values())
        self._routes: dict[tuple[int, str], Route] = {}
        self._servers: dict[tuple[int, str], asyncio.Server] = {}
        self._cuts: dict[tuple[int, int], CutMode] = {}
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> ClusterProxy:
        if self._thread is not None:
            raise ProxyError("proxy already started")
        self._thread = threading.Thread(target=self._run, name="cluster-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(_CONTROL_TIMEOUT_S):
            raise ProxyError("proxy thread did not start")
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def close(self) -> None:
        """Stop listening, reset every connection and end the thread. Safe to call twice."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        with contextlib.suppress(ProxyError):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CONTROL_TIMEOUT_S)

    def __enter__(self) -> ClusterProxy:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise ProxyError("proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CONTROL_TIMEOUT_S)

    # -- routes ----------------------------------------------------------------------------------

    def add_route(self, node_id: int, name: str, listen_host: str, listen_port: int,
                  target_host: str, target_port: int) -> Route:
        """Listen on ``listen_host:listen_port`` (0 picks a free port) for ``node_id``'s listener
        ``name`` and forward to ``target_host:target_port``. Returns the route with its bound port."""
        self._check_node(node_id)
        route = Route(node_id, name, listen_host, listen_port, target_host, target_port)
        return self._call(self._add_route(route))

    def set_target(self, node_id: int, name: str, target_host: str, target_port: int) -> Route:
        """Forward new connections of a route to another address (a node restarted elsewhere)."""
        return self._call(self._set_target(node_id, name, target_host, target_port))

    @property
    def routes(self) -> list[Route]:
        return list(self._routes.values())

    def route(self, node_id: int, name: str) -> Route:
        try:
            return self._routes[(node_id, name)]
        except KeyError:
            raise ProxyError(f"no route for listener {name!r} of node {node_id}") from None

    # -- cuts ------------------------------------------------------------------------------------

    def cut(self, a: int, b: int, *, both_ways: bool = True, mode: CutMode = CutMode.RESET) -> None:
        """Cut the connections ``a`` opens to ``b`` (and ``b`` to ``a`` when ``both_ways``).

        ``a`` may be :data:`CLIENTS`; a node cannot be cut from itself."""
        if a == b:
            raise ProxyError(f"a node cannot be cut from itself ({a})")
        for node in (a, b):
            if node != CLIENTS:
                self._check_node(node)
        if b == CLIENTS and not both_ways:
            raise ProxyError("clients have no listeners: cut (clients -> node) instead")
        links = [(a, b)] if b != CLIENTS else []
        if both_ways and a != CLIENTS:
            links.append((b, a))
        self._call(self._cut(links, CutMode(mode)))

    def isolate(self, node_id: int, *, mode: CutMode = CutMode.RESET) -> None:
        """Cut ``node_id`` from every other node (both ways) and from clients."""
        self._check_node(node_id)
        links = [(CLIENTS, node_id)]
        for other in self._nodes - {node_id}:
            links += [(node_id, other), (other, node_id)]
        self._call(self._cut(links, CutMode(mode)))

    def cut_clients(self, node_id: int, *, mode: CutMode = CutMode.RESET) -> None:
        """Cut clients (any source that is not a node) off from ``node_id``; nodes still reach it."""
        self._check_node(node_id)
        self._call(self._cut([(CLIENTS, node_id)], CutMode(mode)))

    def heal(self, node_id: int | None = None) -> None:
        """Restore every cut link, or only those to and from ``node_id``."""
        if node_id is not None:
            self._check_node(node_id)
        self._call(self._heal(node_id))

    @property
    def cuts(self) -> dict[tuple[int, int], CutMode]:
        """The cut directed links ``(source, destination) -> mode`` (a snapshot)."""
        return dict(self._cuts)

    def connection_count(self, node_id: int | None = None) -> int:
        """Open proxied connections (to ``node_id``'s listeners, or all), silenced ones included."""
        return sum(1 for c in list(self._connections) if node_id in (None, c.route.node_id))

    def _check_node(self, node_id: int) -> None:
        if node_id not in self._nodes:
            raise ProxyError(f"unknown node {node_id}; nodes are {sorted(self._nodes)}")

    # -- on the proxy's loop ---------------------------------------------------------------------

    async def _add_route(self, route: Route) -> Route:
        key = (route.node_id, route.name)
        if key in self._routes:
            raise ProxyError(f"listener {route.name!r} of node {route.node_id} already has a route")

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accept(key, reader, writer)

        server = await asyncio.start_server(accept, route.listen_host, route.listen_port,
                                            reuse_address=True)
        port = server.sockets[0].getsockname()[1]
        bound = Route(route.node_id, route.name, route.listen_host, port,
                      route.target_host, route.target_port)
        self._routes[key] = bound
        self._servers[key] = server
        return bound

    async def _set_target(self, node_id: int, name: str, host: str, port: int) -> Route:
        old = self.route(node_id, name)
        new = Route(old.node_id, old.name, old.listen_host, old.listen_port, host, port)
        self._routes[(node_id, name)] = new
        return new

    def _source_of(self, writer: asyncio.StreamWriter) -> int:
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else ""
        return self.node_hosts.get(host, CLIENTS)

    async def _accept(self, key: tuple[int, str], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        route = self._routes[key]
        conn = _Connection(self._source_of(writer), route, writer)
        mode = self._cuts.get(conn.link)
        if mode is CutMode.RESET:
            _reset(writer)
            return
        self._connections.add(conn)
        if mode is CutMode.BLACKHOLE:
            conn.silenced = True
            return
        try:
            up_reader, conn.upstream = await asyncio.open_connection(route.target_host, route.target_port)
        except OSError:
            # The node is down: the client sees its connection reset, as with a refused connect.
            self._drop(conn)
            return
        mode = self._cuts.get(conn.link)  # cut while connecting
        if mode is not None:
            self._apply(conn, mode)
            return
        loop = asyncio.get_running_loop()
        conn.tasks = [
            loop.create_task(self._pump(conn, reader, conn.upstream)),
            loop.create_task(self._pump(conn, up_reader, writer)),
        ]

    async def _pump(self, conn: _Connection, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            self._drop(conn)
            return
        if all(t.done() or t is asyncio.current_task() for t in conn.tasks):
            self._connections.discard(conn)
            writer.close()
            conn.client.close()
            if conn.upstream is not None:
                conn.upstream.close()

    def _drop(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        for task in conn.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        _reset(conn.client)
        _reset(conn.upstream)

    def _apply(self, conn: _Connection, mode: CutMode) -> None:
        if mode is CutMode.RESET:
            self._drop(conn)
            return
        conn.silenced = True
        for task in conn.tasks:
            task.cancel()
        conn.tasks = []

    async def _cut(self, links: Iterable[tuple[int, int]], mode: CutMode) -> None:
        changed = set(links)
        for link in changed:
            self._cuts[link] = mode
        for conn in list(self._connections):
            if conn.link in changed and not conn.silenced:
                self._apply(conn, mode)
            elif conn.link in changed and mode is CutMode.RESET:
                self._drop(conn)
        log.info("cut %s (%s)", sorted(changed), mode.value)

    async def _heal(self, node_id: int | None) -> None:
        healed = {link for link in self._cuts if node_id is None or node_id in link}
        for link in healed:
            del self._cuts[link]
        for conn in list(self._connections):
            if conn.silenced and conn.link in healed:
                self._drop(conn)
        log.info("healed %s", sorted(healed))

    async def _close(self) -> None:
        for server in self._servers.values():
            server.close()
        for conn in list(self._connections):
            self._drop(conn)
        for server in self._servers.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        self._servers.clear()
