"""``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes`` size the kernel buffers of the
broker's side of a client connection, as Kafka's acceptor sets them (-1: the operating system's
default). The broker's socket is read from the outside with ``ss`` (iproute2), which shows each
socket's ``rb`` (receive) and ``tb`` (send) buffer; Linux doubles a size set with setsockopt."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from reference_broker.testing import BrokerFactory
from sdk.protocol.messages import ApiVersionsRequest
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def _broker_side_buffers(broker_port: int, client_port: int) -> tuple[int, int]:
    """(receive, send) buffer bytes of the broker's socket of the connection from ``client_port``."""
    out = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{broker_port} and dport = :{client_port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"rb(\d+),t\d+,tb(\d+)", out)
    assert found, f"no socket of the broker's side in ss's output:\n{out}"
    return int(found.group(1)), int(found.group(2))


def _connected(bootstrap: str) -> tuple[WireClient, int, int]:
    client = WireClient(bootstrap)
    client.request(ApiVersionsRequest(), 0)  # the broker has accepted and set the socket up
    broker_port = int(bootstrap.rsplit(":", 1)[1])
    return client, broker_port, client.sock.getsockname()[1]


def test_the_configured_buffer_sizes_are_set_on_the_brokers_sockets(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(
        config={"socket.send.buffer.bytes": 48 * 1024, "socket.receive.buffer.bytes": 40 * 1024}
    )
    client, broker_port, client_port = _connected(broker.bootstrap)
    with client:
        assert _broker_side_buffers(broker_port, client_port) == (2 * 40 * 1024, 2 * 48 * 1024)


def test_minus_one_leaves_the_operating_systems_sizes(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(config={"socket.send.buffer.bytes": -1, "socket.receive.buffer.bytes": -1})
    client, broker_port, client_port = _connected(broker.bootstrap)
    with client:
        receive, send = _broker_side_buffers(broker_port, client_port)
    with open("/proc/sys/net/ipv4/tcp_rmem") as rmem, open("/proc/sys/net/ipv4/tcp_wmem") as wmem:
        default_receive, default_send = int(rmem.read().split()[1]), int(wmem.read().split()[1])
    # Autotuned sockets start from tcp_rmem/tcp_wmem's default and may have grown since.
    assert receive >= default_receive and send >= default_send
