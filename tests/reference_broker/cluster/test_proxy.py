"""The cluster proxy with plain sockets: forwarding, cuts by source address, both failure modes, heal.

Node N's "outbound connections" are sockets bound to 127.0.1.N, as the nodes' peer client binds
them; unbound sockets come from 127.0.0.1 and are clients. Behind each node's route is an echo
server, so a working link answers every byte and a cut one resets or stays silent.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from reference_broker.cluster.proxy import CLIENTS, ClusterProxy, CutMode, ProxyError

HOSTS = {f"127.0.1.{n}": n for n in (1, 2, 3)}
#: Long enough for a healthy echo on a loaded machine; silence is asserted with a shorter wait,
#: which can only make a silence test pass more slowly, never wrongly.
ECHO_TIMEOUT_S = 10.0
SILENCE_S = 0.5


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with self.request:
            while data := self.request.recv(65536):
                self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def proxy() -> Iterator[ClusterProxy]:
    servers = []
    with ClusterProxy(HOSTS) as proxy:
        for host, node in HOSTS.items():
            server = _EchoServer((host, 0), _Echo)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
            proxy.add_route(node, "PLAINTEXT", host, 0, host, server.server_address[1])
        yield proxy
    for server in servers:
        server.shutdown()
        server.server_close()


def connect(proxy: ClusterProxy, source: int, node: int) -> socket.socket:
    route = proxy.route(node, "PLAINTEXT")
    sock = socket.socket()
    sock.settimeout(ECHO_TIMEOUT_S)
    if source != CLIENTS:
        sock.bind((f"127.0.1.{source}", 0))
    sock.connect((route.listen_host, route.listen_port))
    return sock


def echoes(sock: socket.socket, payload: bytes = b"ping") -> bool:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            return False
        received += chunk
    return received == payload


def is_reset(sock: socket.socket) -> bool:
    """The connection ends (RST or EOF) instead of answering."""
    try:
        sock.sendall(b"ping")
        return sock.recv(16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def refused(proxy: ClusterProxy, source: int, node: int) -> bool:
    """A new connection is reset (the reset may already arrive during connect)."""
    try:
        sock = connect(proxy, source, node)
    except ConnectionResetError:
        return True
    with sock:
        return is_reset(sock)


def is_silent(sock: socket.socket) -> bool:
    sock.settimeout(SILENCE_S)
    try:
        sock.sendall(b"ping")
        sock.recv(16)
    except TimeoutError:
        return True
    except OSError:
        return False
    return False


def test_forwards_large_payloads_both_ways(proxy: ClusterProxy) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, more than any socket buffer
    with connect(proxy, CLIENTS, 1) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        received = bytearray()
        while len(received) < len(payload):
            chunk = sock.recv(1 << 20)
            assert chunk, "proxy closed a healthy connection"
            received += chunk
        sender.join()
        assert received == payload


def test_reset_cut_drops_existing_and_refuses_new_then_heals(proxy: ClusterProxy) -> None:
    node2_to_1 = connect(proxy, 2, 1)
    node1_to_2 = connect(proxy, 1, 2)
    client_to_1 = connect(proxy, CLIENTS, 1)
    node3_to_1 = connect(proxy, 3, 1)
    assert all(echoes(s) for s in (node2_to_1, node1_to_2, client_to_1, node3_to_1))

    proxy.cut(1, 2)

    assert is_reset(node2_to_1)
    assert is_reset(node1_to_2)
    assert refused(proxy, 2, 1)
    assert refused(proxy, 1, 2)
    assert echoes(client_to_1) and echoes(node3_to_1), "links not cut kept working"
    assert proxy.cuts == {(1, 2): CutMode.RESET, (2, 1): CutMode.RESET}

    proxy.heal()
    assert echoes(connect(proxy, 2, 1)) and echoes(connect(proxy, 1, 2))
    assert proxy.cuts == {}


def test_one_way_cut_keeps_the_other_direction(proxy: ClusterProxy) -> None:
    proxy.cut(2, 1, both_ways=False)
    assert refused(proxy, 2, 1)
    assert echoes(connect(proxy, 1, 2)), "node 1's own connections to node 2 are not cut"


def test_isolate_cuts_other_nodes_and_clients_but_not_the_rest(proxy: ClusterProxy) -> None:
    proxy.isolate(1)
    for source, target in [(CLIENTS, 1), (2, 1), (3, 1), (1, 2), (1, 3)]:
        assert refused(proxy, source, target), f"{source} -> {target} not cut"
    assert echoes(connect(proxy, 1, 1)), "a node keeps reaching itself"
    assert echoes(connect(proxy, 2, 3)) and echoes(connect(proxy, CLIENTS, 2))
    proxy.heal(1)
    assert echoes(connect(proxy, CLIENTS, 1)) and echoes(connect(proxy, 1, 2))


def test_cut_clients_leaves_nodes_connected(proxy: ClusterProxy) -> None:
    proxy.cut_clients(2)
    assert refused(proxy, CLIENTS, 2)
    assert echoes(connect(proxy, 1, 2))


def test_blackhole_silences_existing_and_new_connections_and_heal_resets_them(
    proxy: ClusterProxy,
) -> None:
    existing = connect(proxy, 2, 1)
    assert echoes(existing)
    proxy.cut(1, 2, mode=CutMode.BLACKHOLE)

    assert is_silent(existing)
    new = connect(proxy, 2, 1)  # the handshake completes; nothing is ever answered
    assert is_silent(new)
    assert echoes(connect(proxy, 3, 1))

    proxy.heal()
    existing.settimeout(ECHO_TIMEOUT_S)
    new.settimeout(ECHO_TIMEOUT_S)
    assert is_reset(existing) and is_reset(new), "silenced connections lost bytes; heal resets them"
    assert echoes(connect(proxy, 2, 1))


def test_a_blackholed_link_cut_again_with_reset_resets_its_connections(proxy: ClusterProxy) -> None:
    sock = connect(proxy, CLIENTS, 3)
    assert echoes(sock)
    proxy.cut_clients(3, mode=CutMode.BLACKHOLE)
    assert is_silent(sock)
    sock.settimeout(ECHO_TIMEOUT_S)
    proxy.cut_clients(3, mode=CutMode.RESET)
    assert is_reset(sock)


def test_a_target_that_is_down_resets_the_connection(proxy: ClusterProxy) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.1.1", 0))
        port = unused.getsockname()[1]
    proxy.set_target(1, "PLAINTEXT", "127.0.1.1", port)  # nothing listens there
    assert refused(proxy, CLIENTS, 1)


def test_invalid_control_calls_are_refused(proxy: ClusterProxy) -> None:
    with pytest.raises(ProxyError, match="unknown node 9"):
        proxy.isolate(9)
    with pytest.raises(ProxyError, match="itself"):
        proxy.cut(2, 2)
    with pytest.raises(ProxyError, match="already has a route"):
        proxy.add_route(1, "PLAINTEXT", "127.0.1.1", 0, "127.0.1.1", 1)
    with pytest.raises(ProxyError, match="must be positive"):
        ClusterProxy({"127.0.0.1": CLIENTS})


def test_close_resets_connections_and_stops_listening() -> None:
    with _EchoServer(("127.0.1.1", 0), _Echo) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        proxy = ClusterProxy(HOSTS).start()
        route = proxy.add_route(1, "PLAINTEXT", "127.0.1.1", 0, "127.0.1.1", server.server_address[1])
        sock = connect(proxy, CLIENTS, 1)
        assert echoes(sock)
        proxy.close()
        proxy.close()
        assert is_reset(sock)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((route.listen_host, route.listen_port), timeout=ECHO_TIMEOUT_S)
        with pytest.raises(ProxyError, match="not running"):
            proxy.heal()
        server.shutdown()
