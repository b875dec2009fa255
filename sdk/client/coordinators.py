"""Coordinator lookup: which broker coordinates a consumer group or a transactional id.

The group coordinator (consumer) and the transaction coordinator (transactional producer) are
found the same way, with FindCoordinator, so one ``CoordinatorLookup`` serves both. Answers are
cached per ``(key_type, key)`` until a caller reports NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
or a lost connection with ``invalidate``. Lookups asked for in the same event-loop turn are sent
together in one request where the broker has the batched form (FindCoordinator v4+, KIP-699);
older brokers get one request per key. Retriable errors are retried with exponential backoff
until ``timeout_ms`` has passed.

``CoordinatorPort`` is the one way a coordinator's client (the consumer's group membership) reaches
the network: find the coordinator, send it a request, forget it when it moved. Code written
against the port runs unchanged on a scripted fake (``sdk.testing.mock_coordinator``), so its
state machine is tested without a broker; ``ClientCoordinatorPort`` is the port over a
``KafkaClient``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from sdk.client.client import KafkaClient, coordinator_node_id
from sdk.client.connection import pick_version
from sdk.errors import (
    DecodeError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    make_error,
)
from sdk.protocol.messages import FindCoordinatorRequest

__all__ = [
    "COORDINATOR_ERRORS",
    "ClientCoordinatorPort",
    "CoordinatorLookup",
    "CoordinatorPort",
    "CoordinatorType",
    "Sent",
]

log = logging.getLogger(__name__)

#: First FindCoordinator version with ``coordinator_keys`` (several keys in one request).
BATCHED_VERSION = 4

#: Answers that mean "ask FindCoordinator again" when a coordinator request gets them.
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's ``key_type``."""

    GROUP = 0
    TRANSACTION = 1


def _now() -> float:
    return time.monotonic()


class CoordinatorLookup:
    """Cached FindCoordinator answers for one ``KafkaClient``.

    ``timeout_ms`` bounds one ``coordinator()`` call including its retries (default: the client's
    ``request_timeout_ms``).
    """

    def __init__(self, client: KafkaClient, *, timeout_ms: float | None = None) -> None:
        self._client = client
        self._timeout_s = (timeout_ms if timeout_ms is not None else client.request_timeout_ms) / 1000
        self._cache: dict[tuple[int, str], int] = {}
        self._in_flight: dict[tuple[int, str], asyncio.Future[int]] = {}
        #: Keys waiting for the next batch, per key type.
        self._queued: dict[int, list[str]] = {}

    def cached(self, key_type: int, key: str) -> int | None:
        """The known coordinator, without asking a broker."""
        return self._cache.get((int(key_type), key))

    def invalidate(self, key_type: int, key: str, node_id: int | None = None) -> None:
        """Forget the coordinator of ``key`` (only if it is still ``node_id``, when given)."""
        entry = (int(key_type), key)
        matches = node_id is None or self._cache.get(entry) == node_id
        if matches and self._cache.pop(entry, None) is not None:
            log.debug("coordinator of %s %r forgotten", CoordinatorType(key_type).name, key)

    async def coordinator(self, key_type: int, key: str) -> int:
        """The node id of ``key``'s coordinator, looking it up (with retries) if not cached."""
        entry = (int(key_type), key)
        deadline = _now() + self._timeout_s
        attempt = 0
        last_error: BaseException | None = None
        while True:
            node_id = self._cache.get(entry)
            if node_id is not None:
                return node_id
            try:
                return await asyncio.shield(self._lookup(entry))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
            remaining = deadline - _now()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"no coordinator found for {CoordinatorType(key_type).name.lower()} {key!r} "
                    f"within {self._timeout_s * 1000:.0f} ms: {last_error}"
                ) from last_error
            await asyncio.sleep(min(remaining, self._client.retry_backoff.backoff_ms(attempt) / 1000))
            attempt += 1

    def _lookup(self, entry: tuple[int, str]) -> asyncio.Future[int]:
        """The future of ``entry``'s lookup, joining one in flight or queueing a new one."""
        future = self._in_flight.get(entry)
        if future is not None:
            return future
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._in_flight[entry] = future
        key_type, key = entry
        queued = self._queued.get(key_type)
        if queued is None:
            self._queued[key_type] = [key]
            # Lookups asked for in this loop turn go out together.
            loop.call_soon(self._flush, key_type)
        else:
            queued.append(key)
        return future

    def _flush(self, key_type: int) -> None:
        keys = self._queued.pop(key_type, [])
        if keys:
            task = asyncio.get_running_loop().create_task(
                self._find(key_type, keys), name=f"find-coordinator-{key_type}"
            )
            task.add_done_callback(_retrieve)

    async def _find(self, key_type: int, keys: list[str]) -> None:
        try:
            answers = await self._send(key_type, keys)
        except BaseException as exc:
            for key in keys:
                self._settle((key_type, key), exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        client = self._client
        if any(
            isinstance(answer, int) and client.cluster.broker(answer) is None for answer in answers.values()
        ):
            # A coordinator we have no address for yet: the next metadata names it.
            try:
                await client.refresh_metadata()
            except KafkaError as exc:
                log.debug("metadata refresh after FindCoordinator failed: %r", exc)
        for key in keys:
            self._settle((key_type, key), answers.get(key, KafkaError(f"no answer for {key!r}")))

    def _settle(self, entry: tuple[int, str], answer: int | BaseException) -> None:
        future = self._in_flight.pop(entry, None)
        if isinstance(answer, int):
            self._cache[entry] = answer
            log.debug("coordinator of %s %r is node %d", CoordinatorType(entry[0]).name, entry[1], answer)
        if future is None or future.done():
            return
        if isinstance(answer, BaseException):
            future.set_exception(answer)
            future.exception()  # nobody may be waiting any more
        else:
            future.set_result(answer)

    async def _send(self, key_type: int, keys: list[str]) -> dict[str, int | BaseException]:
        """One FindCoordinator (batched) or one per key: key -> node id or the error for it."""
        client = self._client
        node = await client.wait_for_node()
        conn = await client.get_connection(node)
        version = conn.version_for(FindCoordinatorRequest.API_KEY)
        if key_type != CoordinatorType.GROUP and version < 1:
            raise make_error(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot find transaction coordinators")
        answers: dict[str, int | BaseException] = {}
        if version >= BATCHED_VERSION:
            request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys))
            response = await conn.request(request, version)
            for item in response.coordinators:
                answers[item.key] = _answer(item.error_code, item.node_id, item.error_message, item.key)
                if not item.error_code:
                    client.remember_coordinator_address(item.node_id, item.host, item.port)
            return answers
        for key in keys:
            response = await conn.request(FindCoordinatorRequest(key=key, key_type=key_type), version)
            message = getattr(response, "error_message", None)
            answers[key] = _answer(response.error_code, response.node_id, message, key)
            if not response.error_code:
                client.remember_coordinator_address(response.node_id, response.host, response.port)
        return answers


def _answer(error_code: int, node_id: int, message: str | None, key: str) -> int | BaseException:
    if error_code:
        return make_error(error_code, f"FindCoordinator {key!r}: {message or ''}".rstrip(": "))
    return int(node_id)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class Sent(NamedTuple):
    """A coordinator's answer: the response, the version the request went out at, and the node
    (the coordinator's broker id) that answered."""

    response: Any
    version: int
    node: int


class CoordinatorPort(Protocol):
    """Requests to the coordinator of one key (a group id or a transactional id).

    ``send`` builds the request for the version chosen (the highest both sides support, at most
    ``max_version``) and returns the answer; it raises ``KafkaConnectionError`` when the connection
    was lost or the answer could not be read, ``KafkaTimeoutError`` when none came in
    ``timeout_ms`` (the client's request timeout when None); either forgets the coordinator, so
    the next request looks it up again. Error codes inside the answer are the caller's to read.
    """

    async def coordinator(self) -> int:
        """The coordinator's broker id, looked up (FindCoordinator, with retries) when not known,
        once it can be reached (``KafkaConnectionError`` when it cannot: a coordinator known down
        is not ready, as in Java's ``ensureCoordinatorReady``)."""
        ...

    def forget(self, node: int | None = None) -> None:
        """Forget the coordinator (only if it is still ``node``, when given)."""
        ...

    async def send(
        self,
        api_key: int,
        build: Callable[[int], Any],
        *,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> Sent:
        """``build(version)`` sent to the coordinator; see the class docstring."""
        ...


class ClientCoordinatorPort:
    """``CoordinatorPort`` over a ``KafkaClient``: the coordinator gets a connection of its own
    (``coordinator_node_id``), so no Fetch long poll on the broker's connection delays it."""

    def __init__(
        self,
        client: KafkaClient,
        key_type: CoordinatorType,
        key: str,
        *,
        lookup: CoordinatorLookup | None = None,
    ) -> None:
        self._client = client
        self._key_type = key_type
        self._key = key
        self._lookup = lookup if lookup is not None else CoordinatorLookup(client)

    async def coordinator(self) -> int:
        node = await self._lookup.coordinator(self._key_type, self._key)
        await self._client.get_connection(coordinator_node_id(node))
        return node

    def forget(self, node: int | None = None) -> None:
        self._lookup.invalidate(self._key_type, self._key, node)

    async def send(
        self,
        api_key: int,
        build: Callable[[int], Any],
        *,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> Sent:
        node = await self.coordinator()
        conn = await self._client.get_connection(coordinator_node_id(node))
        version = pick_version(
            api_key, conn.broker_versions.get(api_key), max_version=max_version, broker=conn.describe()
        )
        request = build(version)
        try:
            response = await conn.request(request, version, timeout_ms=timeout_ms)
        except DecodeError as exc:
            self.forget(node)
            name = type(request).__name__
            raise KafkaConnectionError(f"malformed answer to {name} v{version}: {exc}") from exc
        except (KafkaConnectionError, KafkaTimeoutError):
            self.forget(node)
            raise
        return Sent(response, version, node)
