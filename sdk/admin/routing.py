"""Where each admin request goes, and the retry loop that gets every item an answer in time.

Kafka's admin requests each have a node they must reach (Java's ``KafkaAdminClient`` picks the
same ones):

- the controller (the Metadata answer's ``controller_id``; a KRaft broker forwards to the active
  controller): CreateTopics, DeleteTopics, CreatePartitions;
- any broker (the least loaded one): Metadata, DescribeCluster, DescribeConfigs/IncrementalAlter
  Configs of topics;
- a named broker itself: configs of a BROKER or BROKER_LOGGER resource, ListGroups and
  ListTransactions (asked of every broker);
- a coordinator found with FindCoordinator: the group APIs (group coordinator) and
  DescribeTransactions (transaction coordinator);
- each partition's leader: ListOffsets, DeleteRecords, DescribeProducers, WriteTxnMarkers.

``run_per_item`` sends the items grouped by node, keeps each item's own answer, and sends again
the items whose answer was retriable (after finding their node anew when the answer said it
moved: NOT_CONTROLLER, NOT_COORDINATOR, NOT_LEADER_OR_FOLLOWER, ...) with exponential backoff,
until the call's deadline; an item still failing then gets ``KafkaTimeoutError`` with its last
error as ``__cause__``. A non-retriable answer is final at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable
from typing import Any, TypeVar

from sdk.client.client import KafkaClient, coordinator_node_id
from sdk.client.connection import pick_version
from sdk.client.coordinators import CoordinatorLookup, CoordinatorType
from sdk.errors import (
    DecodeError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    make_error,
)
from sdk.metrics.admin import AdminMetrics
from sdk.metrics.core import monotonic_ms
from sdk.protocol.messages import Message, MetadataRequest

__all__ = ["REROUTE_CODES", "AdminRouter", "Deadline", "PartitionNotFoundError", "call_once", "run_per_item"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Answers meaning "this node is not (or no longer) the right one": find the node again.
REROUTE_CODES = frozenset(
    {
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
)


class PartitionNotFoundError(UnknownTopicOrPartitionError):
    """A partition beyond an existing topic's last one: final, unlike a topic not known yet
    (which a cluster still creating it answers for a while)."""

    retriable = False


class Deadline:
    """The end of one admin call: ``timeout_ms`` from its start."""

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        self._end = time.monotonic() + timeout_ms / 1000

    def remaining_ms(self) -> float:
        return max(0.0, (self._end - time.monotonic()) * 1000)

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self._end


class AdminRouter:
    """Sends one request to one node, and finds the controller, a coordinator or a leader."""

    def __init__(self, client: KafkaClient, metrics: AdminMetrics | None = None) -> None:
        self.client = client
        #: Every request's latency, or its failure, is recorded here.
        self.metrics = metrics
        self.coordinators = CoordinatorLookup(client)
        self._controller: int | None = None
        #: Topics whose cached leaders an answer said were wrong: asked for again before use.
        self._stale_topics: set[str] = set()

    async def send(
        self,
        node: int,
        api_key: int,
        build: Callable[[int], Message],
        deadline: Deadline,
        *,
        min_version: int | None = None,
        max_version: int | None = None,
    ) -> tuple[Any, int]:
        """``build(version)`` sent to ``node``; returns (response, version). Raises
        ``UnsupportedVersionError`` when no version in range is common to both sides,
        ``KafkaConnectionError``/``KafkaTimeoutError`` when no answer came."""
        remaining = deadline.remaining_ms()
        if remaining <= 0:
            raise KafkaTimeoutError(f"deadline of {deadline.timeout_ms:.0f} ms passed before sending")
        try:
            conn = await asyncio.wait_for(self.client.get_connection(node), remaining / 1000)
        except TimeoutError:
            raise KafkaTimeoutError(f"no connection to node {node} within the deadline") from None
        version = pick_version(
            api_key,
            conn.broker_versions.get(api_key),
            min_version=min_version,
            max_version=max_version,
            broker=conn.describe(),
        )
        request = build(version)
        timeout_ms = min(self.client.request_timeout_ms, max(deadline.remaining_ms(), 1.0))
        metrics = self.metrics
        sent_ms = monotonic_ms()
        try:
            response = await conn.request(request, version, timeout_ms=timeout_ms)
        except DecodeError as exc:
            if metrics is not None:
                metrics.errors.record()
            raise KafkaConnectionError(
                f"malformed answer to {type(request).__name__} v{version}: {exc}"
            ) from exc
        except Exception:
            if metrics is not None:
                metrics.errors.record()
            raise
        if metrics is not None:
            now = monotonic_ms()
            metrics.requests.record(now - sent_ms, now)
        return response, version

    # -- finding nodes ---------------------------------------------------------------------------

    async def any_node(self) -> int:
        """The least loaded broker."""
        return await self.client.wait_for_node()

    async def metadata(self, topics: Iterable[str] | None, deadline: Deadline) -> Any:
        """A Metadata answer for ``topics`` (every topic when None) from the least loaded broker;
        it also refreshes the client's cluster view (broker addresses, leaders)."""
        wanted = None if topics is None else sorted(set(topics))
        request = MetadataRequest(
            topics=None
            if wanted is None
            else [MetadataRequest.MetadataRequestTopic(name=name) for name in wanted],
            allow_auto_topic_creation=False,
        )
        min_version = 1 if wanted is not None else None  # v0 reads [] as "every topic"
        node = await self.any_node()
        response, _ = await self.send(
            node, MetadataRequest.API_KEY, lambda _version: request, deadline, min_version=min_version
        )
        if getattr(response, "error_code", 0):
            raise make_error(response.error_code, "Metadata")
        self.client.cluster.update(response, None if wanted is None else set(wanted))
        return response

    async def controller(self, deadline: Deadline) -> int:
        """The controller as the cluster metadata names it (a broker forwards to the active
        KRaft controller), remembered until ``forget_controller``; the least loaded broker when
        none is named."""
        if self._controller is not None and self._controller in self.client.cluster.brokers:
            return self._controller
        response = await self.metadata([], deadline)
        controller = response.controller_id
        if controller >= 0 and controller in self.client.cluster.brokers:
            self._controller = int(controller)
            return self._controller
        return await self.any_node()

    def forget_controller(self) -> None:
        self._controller = None

    async def leader(self, topic: str, partition: int, deadline: Deadline) -> int:
        """The partition's leader from the cached metadata, asking for it when unknown.
        Raises the topic's or partition's error (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE)."""
        cluster = self.client.cluster
        leader = cluster.leader_for(topic, partition)
        if leader >= 0 and topic not in self._stale_topics:
            return leader
        self._stale_topics.discard(topic)
        await self.metadata([topic], deadline)
        error = cluster.topic_error(topic)
        if error is not None:
            raise error
        meta = cluster.topic(topic)
        if meta is None:
            raise make_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} is not known yet")
        if partition not in meta.partitions:
            raise PartitionNotFoundError(
                f"{topic}-{partition} does not exist: the topic has {len(meta.partitions)}"
            )
        leader = cluster.leader_for(topic, partition)
        if leader < 0:
            raise make_error(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return leader

    def forget_leaders(self, topics: Iterable[str]) -> None:
        """Ask the cluster for these topics' leaders again before the next ``leader``."""
        self._stale_topics.update(topics)

    async def coordinator(self, key_type: CoordinatorType, key: str) -> int:
        """The connection id of ``key``'s coordinator (its own connection, as the consumer's)."""
        node = await self.coordinators.coordinator(key_type, key)
        return coordinator_node_id(node)

    def forget_coordinator(self, key_type: CoordinatorType, key: str) -> None:
        self.coordinators.invalidate(key_type, key)


def is_retriable(error: BaseException, final_codes: Collection[int] = ()) -> bool:
    """Whether an item that got ``error`` should be sent again (within the deadline)."""
    if not isinstance(error, KafkaError):
        return False
    code = error.code
    if code is not None and code in final_codes:
        return False
    return bool(error.retriable) or (code is not None and code in REROUTE_CODES)


async def run_per_item(
    router: AdminRouter,
    keys: Iterable[K],
    deadline: Deadline,
    *,
    route: Callable[[K], Awaitable[int]],
    send: Callable[[int, list[K]], Awaitable[dict[K, V | KafkaError]]],
    reroute: Callable[[K], None] | None = None,
    final_codes: Collection[int] = (),
) -> dict[K, V | KafkaError]:
    """Every key's answer: ``route(key)`` names its node, ``send(node, keys)`` asks that node for
    a batch of keys and returns each key's value or error (raising for the whole batch when the
    request got no answer). Retriable errors are retried until ``deadline`` (see the module
    docstring); ``reroute(key)`` forgets a key's node before it is routed again."""
    pending: list[K] = list(dict.fromkeys(keys))
    results: dict[K, V | KafkaError] = {}
    last_error: dict[K, KafkaError] = {}
    attempt = 0
    retry: list[K] = []

    def failed(key: K, error: BaseException) -> None:
        if not isinstance(error, KafkaError):
            raise error
        if is_retriable(error, final_codes):
            last_error[key] = error
            retry.append(key)
            moved = error.code in REROUTE_CODES or isinstance(error, KafkaConnectionError | KafkaTimeoutError)
            if reroute is not None and moved:
                reroute(key)
        else:
            results[key] = error

    while pending:
        by_node: dict[int, list[K]] = {}
        retry.clear()
        for key in pending:
            try:
                node = await route(key)
            except KafkaError as exc:
                failed(key, exc)
                continue
            by_node.setdefault(node, []).append(key)
        nodes = list(by_node)
        answers = await asyncio.gather(*(send(node, by_node[node]) for node in nodes), return_exceptions=True)
        for node, answer in zip(nodes, answers, strict=True):
            batch = by_node[node]
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                for key in batch:
                    failed(key, answer)
                continue
            for key in batch:
                outcome = answer.get(key)
                if outcome is None and key not in answer:
                    failed(key, make_error(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {key!r}"))
                elif isinstance(outcome, KafkaError):
                    failed(key, outcome)
                else:
                    results[key] = outcome  # type: ignore[assignment]  # V, not an error
        pending = list(retry)
        if not pending:
            break
        backoff_ms = router.client.retry_backoff.backoff_ms(attempt)
        attempt += 1
        if deadline.remaining_ms() <= backoff_ms:
            for key in pending:
                cause = last_error.get(key)
                timeout = KafkaTimeoutError(
                    f"{key!r}: no final answer within {deadline.timeout_ms:.0f} ms (last: {cause})"
                )
                timeout.__cause__ = cause
                results[key] = timeout
            break
        await asyncio.sleep(backoff_ms / 1000)
    return results


async def call_once(
    router: AdminRouter,
    deadline: Deadline,
    *,
    route: Callable[[], Awaitable[int]],
    send: Callable[[int], Awaitable[V]],
    reroute: Callable[[], None] | None = None,
) -> V:
    """One request with the same retries as ``run_per_item``; raises its final error."""

    async def route_key(_key: int) -> int:
        return await route()

    async def send_key(node: int, _keys: list[int]) -> dict[int, V | KafkaError]:
        try:
            return {0: await send(node)}
        except KafkaError as exc:
            if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
                raise
            return {0: exc}

    outcome = (
        await run_per_item(
            router,
            [0],
            deadline,
            route=route_key,
            send=send_key,
            reroute=None if reroute is None else (lambda _key: reroute()),
        )
    )[0]
    if isinstance(outcome, KafkaError):
        raise outcome
    return outcome
