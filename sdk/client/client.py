"""KafkaClient: bootstrap, one connection per broker, and a metadata cache that stays fresh.

Shared by the producer, consumer and admin client. Connections are made lazily, one per broker,
with exponential reconnect backoff; ``ready(node)`` answers "can I send to this broker now?"
without blocking and starts a connection attempt when the answer is no, which is what a sender
loop needs. Metadata is refreshed by one background task, timed by a ``RefreshSchedule``: at once
for newly tracked topics, every ``metadata_max_age_ms``, and after a backoff (``retry_backoff_ms``
growing to ``retry_backoff_max_ms``) when ``request_metadata_update()`` asked for it (callers do on
NOT_LEADER_OR_FOLLOWER and lost connections) or when the last answer left a tracked topic
incomplete (``ClusterMetadata.incomplete_topics``: Apache Kafka answers LEADER_NOT_AVAILABLE or
UNKNOWN_TOPIC_OR_PARTITION for a topic it is still creating), so such a topic is found soon after
it exists rather than at the next periodic refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import BrokerMetadata, ClusterMetadata
from sdk.client.config import ClientConfig
from sdk.client.connection import SECURITY_PROTOCOLS, Connection
from sdk.client.refresh_schedule import RefreshSchedule
from sdk.client.sasl import SaslMechanism, create_mechanism
from sdk.errors import (
    AuthenticationError,
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    NoBrokersAvailableError,
    make_error,
)
from sdk.protocol import messages
from sdk.protocol.messages import Message

__all__ = ["KafkaClient", "broker_node_id", "coordinator_node_id", "parse_bootstrap_servers"]

log = logging.getLogger(__name__)


def _now_ms() -> float:
    return time.monotonic() * 1000


#: Coordinator requests go over a connection of their own, named by a node id of its own as in
#: Kafka's Java client (``Integer.MAX_VALUE - broker id``): a broker answers one connection's
#: requests in order, so a JoinGroup or OffsetCommit sharing the consumer's fetch connection would
#: wait out the Fetch long poll ahead of it, and every eager rebalance with it.
_COORDINATOR_NODE_BASE = 2**31 - 1
#: Real broker ids are below this; the coordinator connections' ids above it.
_COORDINATOR_NODE_MIN = 2**30


def coordinator_node_id(node_id: int) -> int:
    """The id of the dedicated coordinator connection to broker ``node_id``."""
    return _COORDINATOR_NODE_BASE - node_id


def broker_node_id(node_id: int) -> int:
    """The broker a connection's node id names (the id itself unless it is a coordinator's)."""
    return _COORDINATOR_NODE_BASE - node_id if node_id >= _COORDINATOR_NODE_MIN else node_id


def parse_bootstrap_servers(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or a list of ``host:port`` (``[v6addr]:port`` for IPv6)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    result = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.lstrip(":") or "9092"
        else:
            host, sep, port_text = item.rpartition(":")
            if not sep:
                host, port_text = item, "9092"
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError("bootstrap_servers", f"bad port in {item!r}") from None
        if not host or not 0 < port < 65536:
            raise ConfigError("bootstrap_servers", f"bad address {item!r}")
        result.append((host, port))
    if not result:
        raise ConfigError("bootstrap_servers", "no host:port given")
    return result


class _NodeBackoff:
    __slots__ = ("authentication_error", "failures", "next_attempt_ms", "wake_scheduled")

    def __init__(self) -> None:
        self.failures = 0
        self.next_attempt_ms = 0.0
        self.wake_scheduled = False
        #: The broker refused the last login (cleared by the next connection that is made).
        self.authentication_error: AuthenticationError | None = None


class KafkaClient:
    """Connections to a cluster plus its metadata. Start with ``await start()``."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str | None = "sdk",
        request_timeout_ms: float = 30000,
        connect_timeout_ms: float = 10000,
        metadata_max_age_ms: float = 300000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        reconnect_backoff_ms: float = 50,
        reconnect_backoff_max_ms: float = 1000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str | SaslMechanism | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: Any = None,
        allow_auto_topic_creation: bool = True,
    ):
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        if security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "security_protocol", f"{security_protocol!r} is not one of {SECURITY_PROTOCOLS}"
            )
        self._sasl: SaslMechanism | None = None
        if security_protocol.startswith("SASL"):
            self._sasl = create_mechanism(
                "PLAIN" if sasl_mechanism is None else sasl_mechanism,  # aiokafka's default
                username=sasl_plain_username,
                password=sasl_plain_password,
                token_provider=sasl_oauth_token_provider,
            )
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self.reconnect_backoff = ExponentialBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self.security_protocol = security_protocol
        self.ssl_context = ssl_context
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.cluster = ClusterMetadata()
        self._coordinator_addresses: dict[int, BrokerMetadata] = {}
        self._conns: dict[int, Connection] = {}
        self._connecting: dict[int, asyncio.Task[Connection]] = {}
        self._backoff: dict[int, _NodeBackoff] = {}
        self._topics: set[str] = set()
        self._listeners: list[Callable[[], None]] = []
        self._schedule = RefreshSchedule(self.retry_backoff, metadata_max_age_ms)
        self._update_waiters: list[asyncio.Future[None]] = []
        self._wake: asyncio.Event | None = None
        self._metadata_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: ClientConfig, *, allow_auto_topic_creation: bool = True) -> KafkaClient:
        """The client a producer, consumer or admin client needs, from its (validated) settings."""
        return cls(
            config.bootstrap_servers,
            client_id=config.effective_client_id,
            request_timeout_ms=config.request_timeout_ms,
            connect_timeout_ms=config.connect_timeout_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            security_protocol=config.security_protocol,
            ssl_context=config.ssl_context,
            sasl_mechanism=config.sasl_mechanism,
            sasl_plain_username=config.sasl_plain_username,
            sasl_plain_password=config.sasl_plain_password,
            sasl_oauth_token_provider=config.sasl_oauth_token_provider,
            allow_auto_topic_creation=allow_auto_topic_creation,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the first metadata from a bootstrap server; ``NoBrokersAvailableError`` if none answer."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        errors = []
        for index in range(len(self._bootstrap)):
            node_id = -(index + 1)
            try:
                await self._refresh_from(node_id)
                break
            except AuthenticationError:
                # Fatal (Java's AuthenticationException): every broker refuses the same identity.
                raise
            except (KafkaError, OSError) as exc:
                errors.append(f"{self._address(node_id)}: {exc}")
                self._schedule.failed(_now_ms())
        else:
            raise NoBrokersAvailableError(
                "could not bootstrap from any of "
                + ", ".join(f"{h}:{p}" for h, p in self._bootstrap)
                + ": "
                + "; ".join(errors)
            )
        self._metadata_task = self._loop.create_task(self._metadata_loop(), name="kafka-metadata")

    async def close(self) -> None:
        """Stop refreshing and close every connection."""
        if self._closed:
            return
        self._closed = True
        if self._metadata_task is not None:
            self._metadata_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metadata_task
        for task in list(self._connecting.values()):
            task.cancel()
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        for waiter in self._update_waiters:
            if not waiter.done():
                waiter.set_exception(KafkaConnectionError("client closed"))
                waiter.exception()
        self._update_waiters.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever a connection or the metadata changes (to wake a sender)."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("client listener %r failed", callback)

    # -- connections ----------------------------------------------------------------------------

    def _address(self, node_id: int) -> BrokerMetadata | None:
        if node_id < 0:
            index = -node_id - 1
            if index < len(self._bootstrap):
                host, port = self._bootstrap[index]
                return BrokerMetadata(node_id, host, port)
            return None
        if node_id >= _COORDINATOR_NODE_MIN:
            broker = self.cluster.brokers.get(broker_node_id(node_id))
            if broker is None:
                return self._coordinator_addresses.get(node_id)
            return broker._replace(node_id=node_id)
        return self.cluster.brokers.get(node_id)

    def remember_coordinator_address(self, node_id: int, host: str, port: int) -> None:
        """The address FindCoordinator gave for broker ``node_id``, used for its coordinator
        connection while the cluster metadata does not list that broker (as the Java client
        connects to the node of the FindCoordinator answer itself: a metadata answer taken while the
        broker was restarting leaves it out)."""
        coordinator = coordinator_node_id(node_id)
        self._coordinator_addresses[coordinator] = BrokerMetadata(coordinator, host, port)

    def connection(self, node_id: int) -> Connection | None:
        """The ready connection to ``node_id``, if there is one."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.connected else None

    def ready(self, node_id: int) -> bool:
        """True if a request can be sent to ``node_id`` now; otherwise start connecting to it.

        Never blocks. Listeners are notified when the connection is made, fails, or its backoff
        ends, so a caller that got False knows when to ask again.
        """
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return True
        if node_id in self._connecting or self._closed:
            return False
        remaining = self._backoff_remaining_ms(node_id)
        if remaining > 0:
            state = self._backoff[node_id]
            if not state.wake_scheduled and self._loop is not None:
                state.wake_scheduled = True
                self._loop.call_later(remaining / 1000, self._backoff_expired, node_id)
            return False
        if self._address(node_id) is None:
            self.request_metadata_update()
            return False
        self._start_connect(node_id)
        return False

    def _backoff_expired(self, node_id: int) -> None:
        state = self._backoff.get(node_id)
        if state is not None:
            state.wake_scheduled = False
        self._notify()

    def _backoff_remaining_ms(self, node_id: int) -> float:
        state = self._backoff.get(node_id)
        if state is None:
            return 0.0
        return max(0.0, state.next_attempt_ms - _now_ms())

    def is_backing_off(self, node_id: int) -> bool:
        return self._backoff_remaining_ms(node_id) > 0

    def authentication_error(self, node_id: int) -> AuthenticationError | None:
        """The error of the last connection to ``node_id`` if the broker refused its login (None
        once a connection is made): Java's ``authenticationException(node)``, fatal to a caller
        that cannot go on without that broker."""
        state = self._backoff.get(node_id)
        return state.authentication_error if state is not None else None

    async def get_connection(self, node_id: int) -> Connection:
        """A ready connection to ``node_id``: waits out its reconnect backoff, then tries once."""
        while True:
            if self._closed:
                raise KafkaConnectionError("client closed")
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected:
                return conn
            task = self._connecting.get(node_id)
            if task is None:
                remaining = self._backoff_remaining_ms(node_id)
                if remaining > 0:
                    await asyncio.sleep(remaining / 1000)
                    continue
                if self._address(node_id) is None:
                    raise KafkaConnectionError(f"no address known for broker {node_id}")
                task = self._start_connect(node_id)
            return await asyncio.shield(task)

    def _start_connect(self, node_id: int) -> asyncio.Task[Connection]:
        assert self._loop is not None, "client not started"
        task = self._loop.create_task(self._connect(node_id), name=f"kafka-connect-{node_id}")
        task.add_done_callback(_retrieve_exception)
        self._connecting[node_id] = task
        return task

    async def _connect(self, node_id: int) -> Connection:
        address = self._address(node_id)
        if address is None:
            self._connecting.pop(node_id, None)
            raise KafkaConnectionError(f"no address known for broker {node_id}")
        conn = Connection(
            address.host,
            address.port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=self.connect_timeout_ms,
            security_protocol=self.security_protocol,
            ssl_context=self.ssl_context,
            # One mechanism instance per connection: an exchange has state of its own.
            sasl_mechanism=self._sasl.copy() if self._sasl is not None else None,
            on_close=self._on_connection_closed,
        )
        try:
            await conn.connect()
        except BaseException as exc:
            self._connecting.pop(node_id, None)
            self._record_failure(node_id)
            refused = exc if isinstance(exc, AuthenticationError) else None
            self._backoff[node_id].authentication_error = refused
            if not self._closed:
                self.request_metadata_update()
                self._notify()
            raise
        self._connecting.pop(node_id, None)
        if self._closed:
            conn.close()
            raise KafkaConnectionError("client closed")
        self._conns[node_id] = conn
        self._backoff.pop(node_id, None)
        log.debug("connected to %s", conn.describe())
        self._notify()
        return conn

    def _record_failure(self, node_id: int) -> None:
        state = self._backoff.setdefault(node_id, _NodeBackoff())
        state.next_attempt_ms = _now_ms() + self.reconnect_backoff.backoff_ms(state.failures)
        state.failures += 1

    def _on_connection_closed(self, conn: Connection, error: BaseException | None) -> None:
        node_id = conn.node_id
        if node_id is None or self._conns.get(node_id) is not conn:
            return
        del self._conns[node_id]
        if self._closed:
            return
        log.info("connection to %s closed: %s", conn.describe(), error)
        self._record_failure(node_id)
        self.request_metadata_update()
        self._notify()

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return conn.in_flight if conn is not None else 0

    def least_loaded_node(self) -> int | None:
        """A broker to send a cluster-wide request to: a connected one with the fewest requests in
        flight, else one that is not backing off, else a bootstrap address."""
        best: int | None = None
        best_load = 1 << 30
        for node_id, conn in self._conns.items():
            if conn.connected and conn.in_flight < best_load and node_id in self.cluster.brokers:
                best, best_load = node_id, conn.in_flight
        if best is not None:
            return best
        for node_id, conn in self._conns.items():
            if conn.connected:
                return node_id
        candidates = [n for n in self.cluster.brokers if not self.is_backing_off(n)]
        if candidates:
            connecting = [n for n in candidates if n in self._connecting]
            return connecting[0] if connecting else random.choice(candidates)
        bootstrap = [-(i + 1) for i in range(len(self._bootstrap))]
        candidates = [n for n in bootstrap if not self.is_backing_off(n)]
        if candidates:
            return candidates[0]
        return None

    async def send(self, node_id: int, request: Message, version: int | None = None) -> Any:
        """Send ``request`` to ``node_id`` (connecting if needed) and return the response."""
        conn = await self.get_connection(node_id)
        return await conn.request(request, version)

    async def send_to_any(self, request: Message, version: int | None = None) -> Any:
        """Send to the least loaded broker."""
        node_id = await self.wait_for_node()
        return await self.send(node_id, request, version)

    async def wait_for_node(self) -> int:
        """The least loaded broker, waiting out reconnect backoffs when every broker is in one."""
        while True:
            node_id = self.least_loaded_node()
            if node_id is not None:
                return node_id
            waits = [self._backoff_remaining_ms(n) for n in self._backoff] or [
                self.reconnect_backoff.initial_ms
            ]
            await asyncio.sleep(max(min(waits), 1) / 1000)

    # -- metadata -------------------------------------------------------------------------------

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._topics)

    def add_topic(self, topic: str) -> asyncio.Future[None] | None:
        """Track ``topic`` in metadata refreshes; returns the update future if it is new (a
        refresh for it is then due at once)."""
        if topic in self._topics:
            return None
        self._topics.add(topic)
        return self._request_update(new_topics=True)

    def set_topics(self, topics: Iterable[str]) -> asyncio.Future[None]:
        """Track exactly ``topics``; a refresh is due at once if any of them is new."""
        wanted = set(topics)
        new = not wanted <= self._topics
        self._topics = wanted
        return self._request_update(new_topics=new)

    def request_metadata_update(self) -> asyncio.Future[None]:
        """Ask for a refresh soon (after the current backoff); the future completes after the
        next successful one."""
        return self._request_update(new_topics=False)

    def _request_update(self, *, new_topics: bool) -> asyncio.Future[None]:
        assert self._loop is not None, "client not started"
        future: asyncio.Future[None] = self._loop.create_future()
        self._update_waiters.append(future)
        if new_topics:
            self._schedule.request_for_new_topics()
        else:
            self._schedule.request()
        if self._wake is not None:
            self._wake.set()
        return future

    async def refresh_metadata(self) -> None:
        """Request a refresh and wait for it."""
        await self.request_metadata_update()

    async def _metadata_loop(self) -> None:
        assert self._wake is not None
        schedule = self._schedule
        while not self._closed:
            wait = schedule.time_to_next_ms(_now_ms())
            if wait > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait / 1000):
                        await self._wake.wait()
                continue
            schedule.started()
            node_id = self.least_loaded_node()
            if node_id is None:
                schedule.failed(_now_ms())
                continue
            waiters, self._update_waiters = self._update_waiters, []
            try:
                await self._refresh_from(node_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                schedule.failed(_now_ms())
                log.debug("metadata refresh from node %s failed: %r", node_id, exc)
                if isinstance(exc, AuthenticationError):
                    # Fatal: whoever waits for metadata learns it now instead of waiting forever.
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(exc)
                            waiter.exception()
                    continue
                self._update_waiters[:0] = waiters
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._notify()

    async def _refresh_from(self, node_id: int) -> None:
        conn = await self.get_connection(node_id)
        version = conn.version_for(messages.MetadataRequest.API_KEY)
        topics = sorted(self._topics)
        request = messages.MetadataRequest(
            topics=[messages.MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=self.allow_auto_topic_creation,
        )
        response = await conn.request(request, version)
        if getattr(response, "error_code", 0):
            raise make_error(response.error_code, "Metadata")
        cluster = self.cluster
        cluster.update(response, set(topics))
        incomplete = cluster.incomplete_topics & self._topics
        if incomplete:
            log.debug(
                "metadata of %s not ready yet (%s); asking again",
                sorted(incomplete),
                ", ".join(f"{t}: {cluster.topic_error(t) or 'no leader'}" for t in sorted(incomplete)),
            )
        self._schedule.succeeded(_now_ms(), incomplete=bool(incomplete))
        if node_id < 0:
            # Bootstrap addresses are only for finding the cluster; data goes to real node ids.
            self._conns.pop(node_id, None)
            conn.close()


def _retrieve_exception(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
