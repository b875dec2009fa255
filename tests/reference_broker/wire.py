"""Raw-frame helpers for the broker's own tests: a blocking wire connection and a Fetch builder.

Real clients hide what a broker answers; tests of the broker itself need to see it exactly, and to
send things no client would. These were in ``reference_broker.testing``; they moved here because
only this project's tests use them, and the public test API should not carry them.
"""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any

from sdk.protocol.codec import decode_response, encode_request
from sdk.protocol.messages import FetchRequest

__all__ = ["WireClient", "fetch_request"]


def fetch_request(
    topic: str,
    partition: int = 0,
    offset: int = 0,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int | None = None,
    isolation_level: int = 0,
    topic_id: uuid.UUID | None = None,
) -> FetchRequest:
    """A sessionless FetchRequest for one partition of one topic from ``offset``, as the tests
    send them; the partition's byte limit is ``max_bytes`` unless given."""
    wanted = FetchRequest.FetchPartition(
        partition=partition,
        fetch_offset=offset,
        partition_max_bytes=max_bytes if partition_max_bytes is None else partition_max_bytes,
    )
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(topic=topic, topic_id=topic_id or uuid.UUID(int=0), partitions=[wanted])
        ],
    )


class WireClient:
    """A blocking raw-protocol connection for tests: any request, any version, any bytes.

    Real clients hide what a broker answers; tests of the broker itself need to see it exactly,
    and to send things no client would (wrong versions, garbage, huge size prefixes).
    """

    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str | None = "wire-test"):
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._next_correlation_id = 1

    def send(self, request: Any, version: int, correlation_id: int | None = None) -> int:
        """Send one request; returns its correlation id."""
        if correlation_id is None:
            correlation_id = self._next_correlation_id
            self._next_correlation_id += 1
        payload = encode_request(request, version, correlation_id, self.client_id)
        self.send_raw(struct.pack(">i", len(payload)) + payload)
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """The next response frame's payload; raises ConnectionError if the broker closed."""
        head = self._read_exactly(4)
        (size,) = struct.unpack(">i", head)
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """The next response, decoded as ``api_key``/``version``: (correlation id, body)."""
        return decode_response(api_key, version, self.read_frame())

    def request(self, request: Any, version: int) -> Any:
        """Send and wait for the matching response body."""
        cid = self.send(request, version)
        got, response = self.receive(type(request).API_KEY, version)
        if got != cid:
            raise AssertionError(f"correlation id {got} does not match request {cid}")
        return response

    def fetch_all(self, topic: str, partition: int = 0) -> bytes:
        """Every stored batch of ``topic``/``partition`` from offset 0 (up to 64 MiB), as the
        broker sends it; fails unless the partition answers without error."""
        request = fetch_request(topic, partition, max_bytes=64 << 20)
        data = self.request(request, 12).responses[0].partitions[0]
        if data.error_code != 0:
            raise AssertionError(f"fetch from {topic}-{partition} failed with error {data.error_code}")
        return bytes(data.records)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` without sending anything."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
