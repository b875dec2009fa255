"""MockProducerBroker: a scripted cluster behind a ``ProducerPort`` (Java's ``MockClient``).

The producer's ``Sender`` and transactional operations (``Transactions``) run on it without a
broker or a socket. The test says what the cluster looks like (brokers, topics and their leaders,
which broker coordinates what, the finalized features) and prepares the answers, in order per API,
with what each request must carry::

    broker = MockProducerBroker(topics={"t": 1})
    broker.prepare_response(InitProducerIdResponse(producer_id=7, producer_epoch=0))
    broker.prepare_response(produce_response("t", 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    broker.prepare_disconnect(ProduceRequest)          # the connection is lost under the next one

Each request goes through the real codec at the version negotiated against ``broker_versions``
(by default every version this SDK speaks), and each answer is read back at that version, as the
broker's would be. A request without a prepared answer stays in flight (``in_flight``) until one
is prepared. A request that does not match its prepared answer fails in the code under test (often
a background task that swallows errors), so the failure is also kept: ``verify()`` raises it.

FindCoordinator is state, not script: ``coordinators[key_type]`` is the broker coordinating every
key of that type (None: not available, lookups fail with COORDINATOR_NOT_AVAILABLE and are retried
by the caller); ``lookups`` counts the lookups made, ``forgotten`` the coordinators the code under
test dropped (after NOT_COORDINATOR or a lost connection). A broker in ``down`` is not ready, so
nothing is sent to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata
from sdk.client.connection import pick_version
from sdk.errors import AuthenticationError, CoordinatorNotAvailableError, KafkaConnectionError
from sdk.protocol.codec import decode, encode, supported_versions
from sdk.protocol.messages import Message, MetadataResponse, ProduceResponse
from sdk.testing.scripted_answers import ScriptedAnswers, SentRequest

__all__ = ["MockProducerBroker", "SentRequest", "produce_response"]

GROUP, TRANSACTION = 0, 1


def produce_response(
    topic: str,
    partition: int,
    *,
    error: int = 0,
    base_offset: int = 0,
    log_start_offset: int = 0,
    more: Iterable[tuple[str, int, int, int]] = (),
) -> ProduceResponse:
    """A ProduceResponse for ``topic``-``partition`` (and ``more``: ``(topic, partition, error,
    base_offset)``); ``base_offset`` is -1 when ``error`` is set."""
    entries = [(topic, partition, error, base_offset), *more]
    by_topic: dict[str, list[Any]] = {}
    for name, index, code, offset in entries:
        by_topic.setdefault(name, []).append(
            ProduceResponse.PartitionProduceResponse(
                index=index,
                error_code=code,
                base_offset=-1 if code else offset,
                log_append_time_ms=-1,
                log_start_offset=log_start_offset,
            )
        )
    return ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts)
            for name, parts in by_topic.items()
        ]
    )


class MockProducerBroker(ScriptedAnswers):
    """A ``ProducerPort`` answering from a script (see the module docstring)."""

    def __init__(
        self,
        *,
        nodes: Iterable[int] = (0,),
        topics: Mapping[str, int] | None = None,
        broker_versions: Mapping[int, tuple[int, int]] | None = None,
        features: Mapping[str, int] | None = None,
        request_timeout_ms: float = 30000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        backoff_jitter: float = 0.0,
    ) -> None:
        super().__init__()
        self.nodes = list(nodes)
        self.broker_versions = dict(broker_versions or {})
        #: The finalized features (KIP-584) every broker reports, e.g. ``transaction.version``.
        self.features: dict[str, int] = dict(features or {})
        self._request_timeout_ms = request_timeout_ms
        #: Without jitter by default, so a test knows to the millisecond when a retry is due.
        self._retry_backoff = ExponentialBackoff(
            retry_backoff_ms, retry_backoff_max_ms, jitter=backoff_jitter
        )
        self._cluster = ClusterMetadata()
        #: The broker coordinating every key of a type (GROUP 0, TRANSACTION 1); None: not available.
        self.coordinators: dict[int, int | None] = {GROUP: self.nodes[0], TRANSACTION: self.nodes[0]}
        self._known: dict[tuple[int, str], int] = {}
        #: Brokers that cannot be reached (not ready).
        self.down: set[int] = set()
        self.lookups = 0
        self.forgotten = 0
        self.metadata_requests = 0
        self._listeners: list[Callable[[], None]] = []
        self._topics: dict[str, tuple[int, int]] = {}
        for name, count in (topics or {}).items():
            self.set_topic(name, count)

    # -- the cluster ----------------------------------------------------------------------------

    def set_topic(self, name: str, partitions: int, leader: int | None = None) -> None:
        """``name`` has ``partitions`` partitions, all led by ``leader`` (the first node by
        default); -1 leaves them leaderless."""
        self._topics[name] = (partitions, self.nodes[0] if leader is None else leader)
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=n, host="mock", port=9092 + n) for n in self.nodes
        ]
        topics = [
            MetadataResponse.MetadataResponseTopic(
                name=topic,
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=index, leader_id=lead, replica_nodes=[lead], isr_nodes=[lead]
                    )
                    for index in range(count)
                ],
            )
            for topic, (count, lead) in self._topics.items()
        ]
        self._cluster.update(MetadataResponse(brokers=brokers, topics=topics))
        self._notify()

    def set_down(self, node: int, down: bool = True) -> None:
        """``node`` becomes unreachable (or reachable again)."""
        if down:
            self.down.add(node)
        else:
            self.down.discard(node)
        self._notify()

    def move_coordinator(self, key_type: int, node: int | None) -> None:
        """Every key of ``key_type`` is now coordinated by ``node`` (None: not available); the
        code under test sees it at its next lookup, after it forgot the old one."""
        self.coordinators[key_type] = node

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- scripting (and ScriptedAnswers.prepare_response / prepare_disconnect) ------------------

    def disconnect_all(self) -> None:
        """Every connection is lost: the requests in flight fail with ``KafkaConnectionError``
        (as the connections' requests do when the producer closes them)."""
        self._fail_in_flight(KafkaConnectionError("connection closed (scripted)"))

    # -- ProducerPort ---------------------------------------------------------------------------

    @property
    def cluster(self) -> ClusterMetadata:
        return self._cluster

    @property
    def retry_backoff(self) -> ExponentialBackoff:
        return self._retry_backoff

    @property
    def request_timeout_ms(self) -> float:
        return self._request_timeout_ms

    def add_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def request_metadata_update(self) -> None:
        self.metadata_requests += 1

    async def wait_for_node(self) -> int:
        return self.nodes[0]

    def least_loaded_node(self) -> int | None:
        return next((n for n in self.nodes if n not in self.down), None)

    def ready(self, node_id: int) -> bool:
        return node_id in self.nodes and node_id not in self.down

    def authentication_error(self, node_id: int) -> AuthenticationError | None:
        return None  # a scripted broker never refuses a login

    def write_buffer_size(self, node_id: int) -> int:
        return 0

    def version_for(self, node_id: int, api_key: int) -> int:
        return pick_version(api_key, self.broker_versions.get(api_key, supported_versions(api_key)))

    def finalized_features(self, node_id: int) -> Mapping[str, int] | None:
        return self.features if self.ready(node_id) else None

    async def coordinator(self, key_type: int, key: str) -> int:
        entry = (int(key_type), key)
        node = self._known.get(entry)
        if node is not None:
            return node
        self.lookups += 1
        node = self.coordinators.get(int(key_type))
        if node is None:
            raise CoordinatorNotAvailableError(f"no coordinator for {key!r} (scripted)")
        self._known[entry] = node
        return node

    def cached_coordinator(self, key_type: int, key: str) -> int | None:
        return self._known.get((int(key_type), key))

    def invalidate_coordinator(self, key_type: int, key: str, node_id: int | None = None) -> None:
        entry = (int(key_type), key)
        if entry in self._known and (node_id is None or self._known[entry] == node_id):
            del self._known[entry]
            self.forgotten += 1

    def send(
        self, node_id: int, request: Message, version: int | None = None, *, expect_response: bool = True
    ) -> asyncio.Future[Any] | None:
        if not self.ready(node_id):
            raise KafkaConnectionError(f"no connection to broker {node_id} (scripted)")
        api_key = int(request.API_KEY)  # type: ignore[arg-type]
        if version is None:
            version = self.version_for(node_id, api_key)
        sent = SentRequest(
            api_key, version, decode(type(request), encode(request, version), version), node_id
        )
        if not expect_response:
            self.requests.append(sent)
            return None
        return self._receive(sent)

    def _result(self, sent: SentRequest, answer: Any) -> Any:
        """A response is read back at the request's version, as the broker's would be."""
        return decode(type(answer), encode(answer, sent.version), sent.version)
