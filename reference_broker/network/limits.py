"""Kafka's connection limits (its ``ConnectionQuotas``), shared by every listener of one broker.

Counts: ``max.connections`` caps the broker's connections and ``listener.name.<l>.max.connections``
one listener's (it defaults to the broker-wide value). A listener at either limit stops accepting:
its acceptor waits for a slot with the connection it has just accepted, and the ones after it
wait in the listen backlog (``socket.listen.backlog.size``). The inter-broker listener is exempt
from the broker-wide limit when the broker has more than one listener (only its own limit
applies); when a connection there takes the broker over ``max.connections``, the least recently
active connection of another listener is closed. ``max.connections.per.ip`` (with
``max.connections.per.ip.overrides``, ``host:count,...``) is checked after the wait: a connection
over it is closed at once (``TooManyConnectionsException`` is only logged, as Kafka does).

Rates (KIP-612): ``max.connection.creation.rate`` broker-wide (not counted on the exempt
inter-broker listener) and per listener throttle the acceptor: a connection that takes a rate
over its limit waits ``(rate - limit) / limit * window`` (at most one ``quota.window.size.seconds``)
before it is taken, the longer of the two delays. The ``connection_creation_rate`` client quota
of an ``ip`` entity (or of the default ip entity, for addresses without their own) is measured per
address: a connection over it is taken and closed after the throttle delay, without being counted
anywhere (it is unrecorded from the address's, the listener's and the broker's rates), so a
client reconnecting in a loop is slowed down rather than refused outright. Rates are Kafka's
sampled ``Rate`` over ``quota.window.num`` windows.

``connections.max.idle.ms`` closes a connection with no traffic for that long (a negative value
never closes one).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from reference_broker.network.memory import RequestMemory
from reference_broker.quotas import IP, Rate

INT_MAX = 2**31 - 1
CONNECTION_CREATION_RATE = "connection_creation_rate"


class TooManyConnections(Exception):
    """The address is at its ``max.connections.per.ip``: the connection is closed at once."""


class ConnectionThrottled(Exception):
    """The address is over its ``connection_creation_rate`` quota: the connection is closed at
    ``close_at`` (the limits' clock)."""

    def __init__(self, message: str, close_at: float):
        super().__init__(message)
        self.close_at = close_at


class Admission:
    """One accepted connection's place in the counts; released once (``ConnectionLimits.release``)."""

    __slots__ = ("counted", "host", "listener")

    def __init__(self, listener: str, host: str):
        self.listener = listener
        self.host = host
        self.counted = True


class _RateQuota:
    """A connection rate and its limit: recording one says how long to throttle (s)."""

    __slots__ = ("limit", "rate")

    def __init__(self, limit: float, window_num: int, window_s: float):
        self.limit = limit
        self.rate = Rate(window_num, window_s)

    def record(self, now: float, max_throttle_s: float) -> float:
        self.rate.record(1.0, now)
        if self.limit >= INT_MAX:
            return 0.0
        measured = self.rate.value(now)
        if measured <= self.limit:
            return 0.0
        if self.limit <= 0:
            return max_throttle_s
        return min((measured - self.limit) / self.limit * self.rate.span(now), max_throttle_s)

    def unrecord(self, now: float) -> None:
        self.rate.record(-1.0, now)


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


def ip_connection_rate(entries: Mapping[Any, Mapping[str, float]], host: str) -> float | None:
    """The ``connection_creation_rate`` quota of ``host`` in a quota store's entries: its own ip
    entity's (the name an address or a host name resolving to it), else the default ip entity's;
    None when neither sets one."""
    own = entries.get(((IP, host),))
    if own is not None and CONNECTION_CREATION_RATE in own:
        return own[CONNECTION_CREATION_RATE]
    default = None
    for entity, values in entries.items():
        if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
            continue
        name = entity[0][1]
        if name is None:
            default = values[CONNECTION_CREATION_RATE]
        elif _same_address(name, host):
            return values[CONNECTION_CREATION_RATE]
    return default


def _same_address(name: str, host: str) -> bool:
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return any(str(info[4][0]) == host for info in socket.getaddrinfo(name, None))
    except OSError:
        return False


class ConnectionLimits:
    """Counts open connections per broker, listener and address; makes acceptors wait, throttles
    them, or says which connections to close (see the module's docstring)."""

    def __init__(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] | None = None,
        idle_ms: int = -1,
        *,
        listen_backlog: int = 50,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        max_creation_rate: int = INT_MAX,
        listener_setting: Callable[[str, str], Any] | None = None,
        inter_broker_listener: str | None = None,
        window_num: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        memory: RequestMemory | None = None,
    ):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.idle_ms = idle_ms
        self.listen_backlog = listen_backlog  # where connections wait while the acceptor is held
        #: SO_SNDBUF of accepted connections and SO_RCVBUF of the listening socket (which accepted
        #: connections inherit, and which sets the TCP window scale they announce); -1: the
        #: operating system's default (Linux's autotuning).
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        #: Requests read and not yet handled (``queued.max.request.bytes``, ``queued.max.requests``).
        self.memory = memory or RequestMemory()
        self.max_creation_rate = max_creation_rate
        self._listener_setting = listener_setting
        self.inter_broker_listener = inter_broker_listener.upper() if inter_broker_listener else None
        self.window_num = window_num
        self.window_s = window_s
        self.clock = clock
        #: The ``connection_creation_rate`` quota of an address (None: no quota); set by the server
        #: from the client quota store.
        self.ip_rate: Callable[[str], float | None] = lambda host: None
        self._overrides = self._resolve(per_ip_overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._listeners: dict[str, int] = {}  # listener -> open connections
        self._listener_max: dict[str, int] = {}
        self._listener_rates: dict[str, _RateQuota] = {}
        self._broker_rate = _RateQuota(max_creation_rate, window_num, window_s)
        self._ip_rates: dict[str, _RateQuota] = {}
        self._evictors: dict[str, Callable[[], Admission | None]] = {}
        self._changed: list[asyncio.Future[None]] = []

    @classmethod
    def from_config(cls, config: Any) -> ConnectionLimits:
        """The limits a ``BrokerConfig`` sets."""
        inter_broker = config.get("inter.broker.listener.name") or config.get(
            "security.inter.broker.protocol"
        )
        return cls(
            config.get("max.connections"),
            config.get("max.connections.per.ip"),
            parse_ip_overrides(config.get("max.connections.per.ip.overrides") or ""),
            config.get("connections.max.idle.ms"),
            listen_backlog=config.get("socket.listen.backlog.size"),
            send_buffer_bytes=config.get("socket.send.buffer.bytes"),
            receive_buffer_bytes=config.get("socket.receive.buffer.bytes"),
            max_creation_rate=config.get("max.connection.creation.rate"),
            listener_setting=config.listener_get,
            inter_broker_listener=inter_broker,
            window_num=config.get("quota.window.num"),
            window_s=float(config.get("quota.window.size.seconds")),
            memory=RequestMemory.from_config(config),
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

    # -- listeners --------------------------------------------------------------------------------

    def add_listener(self, listener: str, evict: Callable[[], Admission | None] | None = None) -> None:
        """Start counting ``listener``'s connections, with its own limits (``listener.name.<l>.``
        settings, the broker-wide ones by default). ``evict`` closes the listener's least recently
        active connection and returns its admission (None if it has none)."""
        listener = listener.upper()
        setting = self._listener_setting
        max_connections = setting(listener, "max.connections") if setting else self.max_connections
        rate = setting(listener, "max.connection.creation.rate") if setting else self.max_creation_rate
        self._listeners.setdefault(listener, 0)
        self._listener_max[listener] = INT_MAX if max_connections is None else int(max_connections)
        self._listener_rates[listener] = _RateQuota(
            INT_MAX if rate is None else int(rate), self.window_num, self.window_s
        )
        if evict is not None:
            self._evictors[listener] = evict
        self._notify()

    def protected(self, listener: str) -> bool:
        """The inter-broker listener of a broker with more than one listener: not held to
        ``max.connections`` or the broker-wide creation rate."""
        return listener == self.inter_broker_listener and len(self._listeners) > 1

    def _slot_available(self, listener: str) -> bool:
        if self._listeners.get(listener, 0) >= self._listener_max.get(listener, INT_MAX):
            return False
        return self.protected(listener) or self.total < self.max_connections

    # -- admission --------------------------------------------------------------------------------

    async def admit(self, listener: str, host: str) -> Admission:
        """Count in a connection just accepted on ``listener`` from ``host``, after waiting for a
        slot and for the creation-rate throttle. Raises ``TooManyConnections`` (close it now) or
        ``ConnectionThrottled`` (close it later); neither is counted."""
        listener = listener.upper()
        if listener not in self._listeners:
            self.add_listener(listener)
        start = self.clock()
        throttle_until = start + self._record_creation(listener, start)
        while True:
            now = self.clock()
            if now >= throttle_until and self._slot_available(listener):
                break
            await self._wait(throttle_until - now if now < throttle_until else None)
        self._check_ip_rate(listener, host)
        count = self._per_ip.get(host, 0)
        self._per_ip[host] = count + 1
        self.total += 1
        self._listeners[listener] += 1
        admission = Admission(listener, host)
        limit = self.limit_for(host)
        if count >= limit:
            self.release(admission)
            raise TooManyConnections(f"too many connections from {host} (max.connections.per.ip: {limit})")
        if self.total > self.max_connections and self.protected(listener):
            self._evict_excess()
        return admission

    def _record_creation(self, listener: str, now: float) -> float:
        """Record a new connection in the listener's rate (and the broker's, unless the listener is
        protected); the longer of the throttle delays (s)."""
        throttle = 0.0
        if not self.protected(listener):
            throttle = self._broker_rate.record(now, self.window_s)
        listener_rate = self._listener_rates.get(listener)
        if listener_rate is not None:
            throttle = max(throttle, listener_rate.record(now, self.window_s))
        return throttle

    def _check_ip_rate(self, listener: str, host: str) -> None:
        limit = self.ip_rate(host)
        if limit is None:
            self._ip_rates.pop(host, None)
            return
        quota = self._ip_rates.get(host)
        if quota is None:
            if len(self._ip_rates) >= 4096:
                self._ip_rates.clear()  # forget idle addresses' rates rather than grow
            quota = self._ip_rates[host] = _RateQuota(limit, self.window_num, self.window_s)
        quota.limit = limit
        now = self.clock()
        throttle = quota.record(now, self.window_s)
        if throttle <= 0:
            return
        quota.unrecord(now)  # a connection that is not taken does not count anywhere
        if not self.protected(listener):
            self._broker_rate.unrecord(now)
        listener_rate = self._listener_rates.get(listener)
        if listener_rate is not None:
            listener_rate.unrecord(now)
        raise ConnectionThrottled(
            f"connection_creation_rate of {host} ({limit:g}/s) exceeded; closing in {throttle * 1000:.0f} ms",
            now + throttle,
        )

    def _evict_excess(self) -> None:
        """Close least recently active connections of the other listeners until the broker is
        back within ``max.connections``."""
        for listener, evict in self._evictors.items():
            if self.protected(listener):
                continue
            while self.total > self.max_connections:
                admission = evict()
                if admission is None:
                    break
                self.release(admission)

    def release(self, admission: Admission) -> None:
        """A counted connection closed (a second call does nothing); waiting acceptors look again."""
        if not admission.counted:
            return
        admission.counted = False
        self.total -= 1
        left = self._per_ip.get(admission.host, 1) - 1
        if left > 0:
            self._per_ip[admission.host] = left
        else:
            self._per_ip.pop(admission.host, None)
        if self._listeners.get(admission.listener, 0) > 0:
            self._listeners[admission.listener] -= 1
        self._notify()

    async def _wait(self, timeout: float | None) -> None:
        """Until a count changes or ``timeout`` seconds pass."""
        waiter = asyncio.get_running_loop().create_future()
        self._changed.append(waiter)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter, timeout)
        finally:
            with contextlib.suppress(ValueError):
                self._changed.remove(waiter)

    def _notify(self) -> None:
        waiters, self._changed = self._changed, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- reading ----------------------------------------------------------------------------------

    def limit_for(self, host: str) -> int:
        return self._overrides.get(host, self.max_per_ip)

    def connections_from(self, host: str) -> int:
        return self._per_ip.get(host, 0)

    def listener_connections(self, listener: str) -> int:
        return self._listeners.get(listener.upper(), 0)
