"""``ProducerPort``: the one way the producer's sender and transactional operations reach the
network (Java's ``KafkaClient`` interface, which its ``Sender`` and ``TransactionManager`` share).

Everything the producer asks of the cluster is here: the metadata the accumulator routes by,
which brokers are ready, sending a request to one of them (Produce, or a transactional request
from the sender's queue), the versions and features a broker offers, and where a coordinator is.
Code written against the port runs unchanged on a scripted fake
(``sdk.testing.mock_producer_broker.MockProducerBroker``, Java's ``MockClient``), so the sender's
retries and the transaction state machine are tested without a broker or a socket.
``ClientProducerPort`` is the port over a ``KafkaClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sdk.client.backoff import ExponentialBackoff
from sdk.client.client import KafkaClient
from sdk.client.cluster import ClusterMetadata
from sdk.client.coordinators import CoordinatorLookup
from sdk.errors import AuthenticationError, KafkaConnectionError
from sdk.protocol.messages import Message

__all__ = ["ClientProducerPort", "ProducerPort"]


class ProducerPort(Protocol):
    """What the producer needs from the cluster (see the module docstring)."""

    @property
    def cluster(self) -> ClusterMetadata:
        """The metadata batches are routed and drained by (updated in place)."""
        ...

    @property
    def retry_backoff(self) -> ExponentialBackoff:
        """The backoff between retries of a failed request."""
        ...

    @property
    def request_timeout_ms(self) -> float:
        """How long a request may stay unanswered."""
        ...

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever something the sender waits for changed (a connection made or
        lost, metadata refreshed)."""
        ...

    def remove_listener(self, callback: Callable[[], None]) -> None: ...

    def request_metadata_update(self) -> object:
        """Ask for fresh metadata soon (a leader moved, a topic is unknown)."""
        ...

    async def wait_for_node(self) -> int:
        """Some broker's id, once one is known."""
        ...

    def least_loaded_node(self) -> int | None:
        """The ready broker with the fewest requests in flight, if any."""
        ...

    def ready(self, node_id: int) -> bool:
        """Whether a request can be sent to ``node_id`` now (starts connecting if not)."""
        ...

    def authentication_error(self, node_id: int) -> AuthenticationError | None:
        """Why ``node_id`` refused the last login, if it did (None once a connection is made)."""
        ...

    def write_buffer_size(self, node_id: int) -> int:
        """Bytes written to ``node_id`` and not yet taken by the socket."""
        ...

    def version_for(self, node_id: int, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and ``node_id`` speak."""
        ...

    def send(
        self, node_id: int, request: Message, version: int | None = None, *, expect_response: bool = True
    ) -> asyncio.Future[Any] | None:
        """Put ``request`` on the wire to the ready ``node_id``; the future gets the response, or
        the connection's error (``KafkaConnectionError`` when it was lost). Raises
        ``KafkaConnectionError`` when there is no connection. None without ``expect_response``."""
        ...

    def finalized_features(self, node_id: int) -> Mapping[str, int] | None:
        """The features (KIP-584) ``node_id`` finalized, or None when not connected to it."""
        ...

    async def coordinator(self, key_type: int, key: str) -> int:
        """The node id of ``key``'s coordinator (FindCoordinator, cached)."""
        ...

    def cached_coordinator(self, key_type: int, key: str) -> int | None:
        """The known coordinator of ``key``, without asking."""
        ...

    def invalidate_coordinator(self, key_type: int, key: str, node_id: int | None = None) -> None:
        """Forget ``key``'s coordinator (if it is still ``node_id``): it moved or is unreachable."""
        ...


class ClientProducerPort:
    """The port over a ``KafkaClient`` and its connections."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self._lookup = CoordinatorLookup(client)
        self.add_listener = client.add_listener
        self.remove_listener = client.remove_listener
        self.request_metadata_update = client.request_metadata_update
        self.wait_for_node = client.wait_for_node
        self.least_loaded_node = client.least_loaded_node
        self.ready = client.ready
        self.authentication_error = client.authentication_error

    @property
    def cluster(self) -> ClusterMetadata:
        return self.client.cluster

    @property
    def retry_backoff(self) -> ExponentialBackoff:
        return self.client.retry_backoff

    @property
    def request_timeout_ms(self) -> float:
        return self.client.request_timeout_ms

    def write_buffer_size(self, node_id: int) -> int:
        conn = self.client.connection(node_id)
        return conn.write_buffer_size if conn is not None else 0

    def version_for(self, node_id: int, api_key: int) -> int:
        conn = self.client.connection(node_id)
        if conn is None:
            raise KafkaConnectionError(f"no connection to broker {node_id}")
        return conn.version_for(api_key)

    def send(
        self, node_id: int, request: Message, version: int | None = None, *, expect_response: bool = True
    ) -> asyncio.Future[Any] | None:
        conn = self.client.connection(node_id)
        if conn is None:
            raise KafkaConnectionError(f"connection to broker {node_id} went away")
        if not expect_response:
            return conn.send(request, version, expect_response=False)
        return conn.send(request, version)

    def finalized_features(self, node_id: int) -> Mapping[str, int] | None:
        conn = self.client.connection(node_id)
        if conn is None or not conn.broker_versions:
            return None
        return conn.finalized_features

    async def coordinator(self, key_type: int, key: str) -> int:
        return await self._lookup.coordinator(key_type, key)

    def cached_coordinator(self, key_type: int, key: str) -> int | None:
        return self._lookup.cached(key_type, key)

    def invalidate_coordinator(self, key_type: int, key: str, node_id: int | None = None) -> None:
        self._lookup.invalidate(key_type, key, node_id)
