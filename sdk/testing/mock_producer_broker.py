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
from dataclasses import dataclass, field
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.cluster import ClusterMetadata
from sdk.client.connection import pick_version
from sdk.errors import CoordinatorNotAvailableError, KafkaConnectionError
from sdk.protocol.codec import decode, encode, supported_versions
from sdk.protocol.messages import Message, MetadataResponse, ProduceResponse

__all__ = ["MockProducerBroker", "SentRequest", "produce_response"]

#: What a prepared answer may be: a response, an error to raise, or a function of the request.
Answer = Any
Matcher = Mapping[str, Any] | Callable[[Any], bool]

GROUP, TRANSACTION = 0, 1


@dataclass
class SentRequest:
    """One request as the cluster received it."""

    api_key: int
    version: int
    request: Any
    node: int

    @property
    def name(self) -> str:
        return type(self.request).__name__


@dataclass
class _Prepared:
    api_key: int
    answer: Answer
    match: Matcher | None


@dataclass
class _Parked:
    sent: SentRequest
    future: asyncio.Future[Any] = field(repr=False)


def _api_key(api: int | type[Any]) -> int:
    return api if isinstance(api, int) else int(api.API_KEY)


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


class MockProducerBroker:
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
        #: Every request received (answered or not), in order.
        self.requests: list[SentRequest] = []
        self._prepared: list[_Prepared] = []
        self._parked: list[_Parked] = []
        self._failures: list[AssertionError] = []
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

    # -- scripting ------------------------------------------------------------------------------

    def prepare_response(
        self, answer: Answer, *, api: int | type[Any] | None = None, match: Matcher | None = None
    ) -> None:
        """Answer the next request of ``api`` (by default the API of ``answer``, a response) with
        ``answer`` (a response, an error to raise, or a function of the ``SentRequest`` giving
        either); ``match`` is what the request must carry: field values (a value may be a
        predicate) or a predicate of the whole request."""
        if api is None:
            if isinstance(answer, BaseException) or callable(answer):
                raise ValueError("say which API an error or a function answers with api=")
            api = type(answer)
        self._prepared.append(_Prepared(_api_key(api), answer, match))
        self._deliver()

    def prepare_disconnect(self, api: int | type[Any], *, match: Matcher | None = None) -> None:
        """The connection is lost under the next request of ``api``."""
        self.prepare_response(KafkaConnectionError("connection lost (scripted)"), api=api, match=match)

    def disconnect_all(self) -> None:
        """Every connection is lost: the requests in flight fail with ``KafkaConnectionError``
        (as the connections' requests do when the producer closes them)."""
        parked, self._parked = self._parked, []
        for entry in parked:
            if not entry.future.done():
                entry.future.set_exception(KafkaConnectionError("connection closed (scripted)"))

    # -- inspection -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> list[SentRequest]:
        """Requests waiting for an answer to be prepared."""
        return [p.sent for p in self._parked if not p.future.done()]

    def sent(self, api: int | type[Any]) -> list[SentRequest]:
        """The requests of ``api`` received so far."""
        key = _api_key(api)
        return [s for s in self.requests if s.api_key == key]

    def pending(self) -> int:
        """Prepared answers no request has taken yet."""
        return len(self._prepared)

    def verify(self) -> None:
        """Raise the first mismatch seen (background tasks may have swallowed it)."""
        if self._failures:
            raise AssertionError(f"{len(self._failures)} request(s) did not match: {self._failures[0]}")

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
        self.requests.append(sent)
        if not expect_response:
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._parked.append(_Parked(sent, future))
        self._deliver()
        return future

    # -- matching -------------------------------------------------------------------------------

    def _deliver(self) -> None:
        """Hand prepared answers to the waiting requests, oldest first, per API."""
        for parked in list(self._parked):
            if parked.future.done():
                self._parked.remove(parked)
                continue
            prepared = next((p for p in self._prepared if p.api_key == parked.sent.api_key), None)
            if prepared is None:
                continue
            self._prepared.remove(prepared)
            self._parked.remove(parked)
            failure = self._mismatch(parked.sent, prepared.match)
            if failure is not None:
                self._failures.append(failure)
                parked.future.set_exception(failure)
                continue
            answer = prepared.answer
            if callable(answer) and not isinstance(answer, BaseException):
                answer = answer(parked.sent)
            if isinstance(answer, BaseException):
                parked.future.set_exception(answer)
            else:
                version = parked.sent.version
                parked.future.set_result(decode(type(answer), encode(answer, version), version))

    @staticmethod
    def _mismatch(sent: SentRequest, match: Matcher | None) -> AssertionError | None:
        if match is None:
            return None
        if callable(match):
            if match(sent.request):
                return None
            return AssertionError(f"{sent.name} v{sent.version} did not match: {sent.request}")
        for name, expected in match.items():
            actual = getattr(sent.request, name)
            ok = expected(actual) if callable(expected) else actual == expected
            if not ok:
                return AssertionError(
                    f"{sent.name} v{sent.version}: {name} is {actual!r}, not {expected!r}: {sent.request}"
                )
        return None
