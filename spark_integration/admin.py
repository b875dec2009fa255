"""The few admin requests the sink makes itself, through ``sdk.client.KafkaClient``: creating its
own topics (CreateTopics) and reading a group's committed offset with its metadata (OffsetFetch;
the consumer's ``committed`` returns the offset only, and the marker's owner is in the metadata).

The sink's topics are created explicitly, with the configs their use needs, rather than left to
the broker's ``auto.create.topics.enable`` (off on many clusters, and its topics get the broker's
defaults: a retention that would drop the sink's records). An existing topic is used as it is:
its configs are not checked or altered. Each process remembers the topics it found or created,
so only a task's first use of a topic costs a Metadata request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from sdk.client.client import KafkaClient
from sdk.client.cluster import TopicPartition
from sdk.client.config import ClientConfig
from sdk.consumer.group_channel import GroupChannel
from sdk.consumer.group_offsets import fetch_request, offset_fetch_coordinator_error, read_fetch_response
from sdk.consumer.records import OffsetAndMetadata
from sdk.errors import ErrorCode, NoBrokersAvailableError, make_error
from sdk.protocol.messages import CreateTopicsRequest, OffsetFetchRequest
from sdk.sync import shared_loop
from spark_integration.client_pool import ClientPool, new_pool, settings_key

__all__ = ["SinkTopicError", "TopicSpec", "ensure_topic", "fetch_committed"]

T = TypeVar("T")

#: How long a topic may take to show up with leaders in metadata once created.
TOPIC_READY_S = 30.0

_CLIENT_SETTINGS = frozenset(f.name for f in fields(ClientConfig))
_known_topics: set[tuple[str, str]] = set()
_known_lock = threading.Lock()


class SinkTopicError(RuntimeError):
    """One of the sink's own topics is missing and could not be created."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic the sink needs: its name, partitions (-1: the broker's ``num.partitions``),
    replication factor (-1: the broker's ``default.replication.factor``) and topic configs."""

    name: str
    partitions: int
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


def _client_config(settings: Mapping[str, Any]) -> ClientConfig:
    """The connection settings among a client's keyword arguments (``SinkOptions`` has the
    consumer's), as the ``ClientConfig`` a ``KafkaClient`` is built from."""
    config = ClientConfig(**{k: v for k, v in settings.items() if k in _CLIENT_SETTINGS})
    config.validate()
    return config


def _close_client(client: KafkaClient) -> None:
    shared_loop().run(client.close(), timeout=30)


#: This worker's idle admin clients, by connection settings (``client_pool``'s rules).
_clients: ClientPool[KafkaClient] = new_pool("admin clients", _close_client)


def _with_client(settings: Mapping[str, Any], work: Callable[[KafkaClient], Awaitable[T]]) -> T:
    """``work(client)`` on the SDK's shared event loop, with a client that never auto-creates,
    taken from this worker's pool (a new one if none is idle; closed if the work failed).
    No broker answering (one restarting) is waited out for the request timeout, as the
    producer and consumer wait, rather than failing the task at once."""
    config = _client_config(settings)
    key = settings_key(settings)
    pooled = _clients.borrow(key)

    async def started() -> KafkaClient:
        deadline = time.monotonic() + config.request_timeout_ms / 1000
        attempt = 0
        while True:
            client = KafkaClient.from_config(config, allow_auto_topic_creation=False)
            try:
                await client.start()
                return client
            except NoBrokersAvailableError:
                await client.close()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(client.reconnect_backoff.backoff_ms(attempt) / 1000)
                attempt += 1

    async def run() -> tuple[KafkaClient, T]:
        client = pooled or await started()
        try:
            return client, await work(client)
        except BaseException:
            await client.close()
            raise

    timeout = 2 * config.request_timeout_ms / 1000 + TOPIC_READY_S + 10
    client, result = shared_loop().run(run(), timeout=timeout)
    _clients.give_back(key, client)
    return result


def ensure_topic(settings: Mapping[str, Any], spec: TopicSpec) -> None:
    """Make sure ``spec.name`` exists (created with ``spec`` if not) and has leaders."""
    key = (str(settings.get("bootstrap_servers")), spec.name)
    with _known_lock:
        if key in _known_topics:
            return
    _with_client(settings, lambda client: _ensure(client, spec))
    with _known_lock:
        _known_topics.add(key)


async def _ensure(client: KafkaClient, spec: TopicSpec) -> None:
    client.add_topic(spec.name)
    await client.refresh_metadata()
    if client.cluster.partitions_for(spec.name) is None:
        await _create(client, spec)
    deadline = time.monotonic() + TOPIC_READY_S
    while True:
        topic = client.cluster.topic(spec.name)
        if topic is not None and topic.partition_ids and topic.available == topic.partition_ids:
            return
        if time.monotonic() > deadline:
            raise SinkTopicError(f"topic {spec.name!r} was created but has no leader after {TOPIC_READY_S} s")
        await asyncio.sleep(client.retry_backoff.initial_ms / 1000)
        await client.refresh_metadata()


async def _create(client: KafkaClient, spec: TopicSpec) -> None:
    creatable = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[creatable(
            name=spec.name, num_partitions=spec.partitions, replication_factor=spec.replication_factor,
            configs=[creatable.CreatableTopicConfig(name=k, value=v) for k, v in spec.configs.items()],
        )],
        timeout_ms=int(client.request_timeout_ms),
    )
    # Any broker accepts CreateTopics (KRaft brokers forward it to the controller); the
    # controller itself where the metadata names one.
    controller = client.cluster.controller_id
    node = controller if client.cluster.broker(controller) is not None else await client.wait_for_node()
    response = await client.send(node, request)
    result = response.topics[0]
    if result.error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
        return
    error = make_error(result.error_code, result.error_message)
    configs = ", ".join(f"{k}={v}" for k, v in spec.configs.items())
    partitions = spec.partitions if spec.partitions > 0 else "any number of"
    raise SinkTopicError(
        f"the sink's topic {spec.name!r} does not exist and creating it failed ({type(error).__name__}: "
        f"{result.error_message or error}); create it with {partitions} partition(s) and {configs}, "
        "or name another with the sink's options") from error


def fetch_committed(
    settings: Mapping[str, Any], group_id: str, tp: TopicPartition
) -> OffsetAndMetadata | None:
    """The offset (with its metadata) ``group_id`` committed for ``tp``, or None. Stable: while a
    transaction with an offset commit for the group is open, the broker is asked again until the
    request timeout (OffsetFetch with ``require_stable``)."""

    async def fetch(client: KafkaClient) -> OffsetAndMetadata | None:
        channel = GroupChannel.for_client(client, group_id)
        deadline = time.monotonic() + client.request_timeout_ms / 1000
        attempt = 0
        while True:
            response, version = await channel.send_retrying(
                OffsetFetchRequest.API_KEY, lambda version: fetch_request(group_id, [tp], version),
                offset_fetch_coordinator_error)
            found, unstable = read_fetch_response(response, version, [tp], group_id)
            if not unstable:
                return found.get(tp)
            if time.monotonic() > deadline:
                raise make_error(ErrorCode.UNSTABLE_OFFSET_COMMIT, f"OffsetFetch for group {group_id!r}")
            await asyncio.sleep(client.retry_backoff.backoff_ms(attempt) / 1000)
            attempt += 1

    return _with_client(settings, fetch)

