"""Kafka's connection limits, shared by every listener of one broker.

``max.connections`` caps the broker's connections, ``max.connections.per.ip`` (with
``max.connections.per.ip.overrides``, ``host:count,...``) those from one address, and
``connections.max.idle.ms`` closes a connection with no traffic for that long (a negative value
never closes one). A connection over a limit is closed as soon as it is accepted, before any
request of it is read, as Kafka's acceptor does (``TooManyConnectionsException`` is only logged
there too).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any, Protocol

INT_MAX = 2**31 - 1


class Admittable(Protocol):
    peer_host: str
    admitted: bool


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` entries separated by commas; hosts
    may be names or addresses. Raises ``ValueError`` naming the bad entry."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host:
            raise ValueError(f"'{entry}' is not host:count")
        try:
            limit = int(count)
        except ValueError:
            raise ValueError(f"'{entry}': the count is not an integer") from None
        if limit < 0:
            raise ValueError(f"'{entry}': the count must be at least 0")
        overrides[host.strip()] = limit
    return overrides


def check_ip_overrides(value: Any) -> str | None:
    """Config check for ``max.connections.per.ip.overrides``."""
    try:
        parse_ip_overrides(value or "")
    except ValueError as exc:
        return str(exc)
    return None


class ConnectionLimits:
    """Counts open connections per broker and per address; says which ones to refuse."""

    def __init__(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] | None = None,
        idle_ms: int = -1,
    ):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.idle_ms = idle_ms
        self._overrides = self._resolve(per_ip_overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}

    @classmethod
    def from_config(cls, config: Any) -> ConnectionLimits:
        """The limits a ``BrokerConfig`` sets."""
        return cls(
            config.get("max.connections"),
            config.get("max.connections.per.ip"),
            parse_ip_overrides(config.get("max.connections.per.ip.overrides") or ""),
            config.get("connections.max.idle.ms"),
        )

    @staticmethod
    def _resolve(overrides: Mapping[str, int]) -> dict[str, int]:
        """Overrides by address: a host name counts for each address it resolves to."""
        resolved: dict[str, int] = {}
        for host, limit in overrides.items():
            resolved[host] = limit
            try:
                infos = socket.getaddrinfo(host, None)
            except OSError:
                continue
            for info in infos:
                resolved.setdefault(str(info[4][0]), limit)
        return resolved

    def limit_for(self, host: str) -> int:
        return self._overrides.get(host, self.max_per_ip)

    def admit(self, conn: Admittable) -> str | None:
        """Count ``conn`` in, or say why it is refused (it is then not counted)."""
        host = conn.peer_host
        per_ip = self._per_ip.get(host, 0)
        limit = self.limit_for(host)
        if per_ip >= limit:
            return f"too many connections from {host} (max.connections.per.ip: {limit})"
        if self.total >= self.max_connections:
            return f"too many connections ({self.total}, max.connections: {self.max_connections})"
        self._per_ip[host] = per_ip + 1
        self.total += 1
        conn.admitted = True
        return None

    def release(self, conn: Admittable) -> None:
        """``conn`` closed; forget it if it was counted."""
        if not conn.admitted:
            return
        conn.admitted = False
        self.total -= 1
        left = self._per_ip.get(conn.peer_host, 1) - 1
        if left > 0:
            self._per_ip[conn.peer_host] = left
        else:
            self._per_ip.pop(conn.peer_host, None)

    def connections_from(self, host: str) -> int:
        return self._per_ip.get(host, 0)
