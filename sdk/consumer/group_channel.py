"""GroupChannel: how a group member talks to its group's coordinator.

Finds the coordinator (``sdk.client.coordinators``), picks each request's version (the highest
both sides support, capped at what the consumer speaks), forgets the coordinator when a request
says it moved or the connection to it failed, and retries coordinator-routed requests
(OffsetCommit, OffsetFetch) until the request timeout. Membership decisions stay in
``GroupCoordinator``; this module knows nothing of generations or listeners.

Some brokers advertise the flexible versions of the group APIs but drop the connection on them or
answer them malformed (librdkafka's mock cluster 2.x does both). After such a failure the channel
speaks the newest non-flexible versions to that broker, which every Kafka broker since 2.3 also
accepts, and the caller's retry succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from sdk.client.client import KafkaClient, broker_node_id, coordinator_node_id
from sdk.client.connection import Connection, pick_version
from sdk.client.coordinators import COORDINATOR_ERRORS, CoordinatorLookup, CoordinatorType
from sdk.errors import (
    DecodeError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    make_error,
)
from sdk.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

__all__ = ["MAX_VERSIONS", "NON_FLEXIBLE_MAX", "GroupChannel"]

log = logging.getLogger(__name__)

#: Highest versions sent: OffsetCommit/OffsetFetch v10 name topics by id, which we do not track.
MAX_VERSIONS = {
    JoinGroupRequest.API_KEY: 9,
    SyncGroupRequest.API_KEY: 5,
    HeartbeatRequest.API_KEY: 4,
    LeaveGroupRequest.API_KEY: 5,
    OffsetCommitRequest.API_KEY: 9,
    OffsetFetchRequest.API_KEY: 9,
}
#: The newest non-flexible versions, for brokers that mishandle the flexible ones.
NON_FLEXIBLE_MAX = {
    JoinGroupRequest.API_KEY: 5,
    SyncGroupRequest.API_KEY: 3,
    HeartbeatRequest.API_KEY: 3,
    LeaveGroupRequest.API_KEY: 2,
}
LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def _broker_of(conn: Connection) -> int | None:
    """The broker behind ``conn`` (coordinator connections have node ids of their own)."""
    return None if conn.node_id is None else broker_node_id(conn.node_id)


class GroupChannel:
    """Requests to ``group_id``'s coordinator (see the module docstring)."""

    def __init__(self, client: KafkaClient, group_id: str) -> None:
        self.client = client
        self.group_id = group_id
        self._lookup = CoordinatorLookup(client)
        self._no_flexible_nodes: set[int | None] = set()

    async def coordinator(self) -> int:
        """The coordinator's node id (looked up, with retries, when not known)."""
        return await self._lookup.coordinator(CoordinatorType.GROUP, self.group_id)

    def forget(self, node: int | None = None) -> None:
        """Forget the coordinator (only if it is still ``node``, when given)."""
        self._lookup.invalidate(CoordinatorType.GROUP, self.group_id, node)

    async def connection(self) -> tuple[Connection, int]:
        """A ready connection to the coordinator, and its node id."""
        node = await self.coordinator()
        return await self.client.get_connection(coordinator_node_id(node)), node

    def version(self, conn: Connection, api_key: int) -> int:
        cap = MAX_VERSIONS[api_key]
        if _broker_of(conn) in self._no_flexible_nodes:
            cap = min(cap, NON_FLEXIBLE_MAX.get(api_key, cap))
        return pick_version(api_key, conn.broker_versions.get(api_key), max_version=cap)

    async def send(
        self, conn: Connection, request: Any, version: int, timeout_ms: float | None = None
    ) -> Any:
        """One request on ``conn``; a lost connection or timeout forgets the coordinator."""
        try:
            return await conn.request(request, version, timeout_ms=timeout_ms)
        except (KafkaConnectionError, DecodeError) as exc:
            api_key = request.API_KEY
            if api_key in NON_FLEXIBLE_MAX and version > NON_FLEXIBLE_MAX[api_key]:
                log.warning(
                    "group %s: broker %s failed %s v%d (%r): using non-flexible group versions with it",
                    self.group_id, _broker_of(conn), type(request).__name__, version, exc,
                )
                self._no_flexible_nodes.add(_broker_of(conn))
            self.forget(_broker_of(conn))
            if isinstance(exc, DecodeError):
                raise KafkaConnectionError(f"malformed answer to {type(request).__name__}: {exc}") from exc
            raise
        except KafkaTimeoutError:
            self.forget(_broker_of(conn))
            raise

    async def send_retrying(
        self, api_key: int, build: Callable[[int], Any], coordinator_error: Callable[[Any], int]
    ) -> tuple[Any, int]:
        """``build(version)`` sent to the coordinator, re-finding it on coordinator errors and lost
        connections until the client's request timeout; returns the response and its version.
        ``coordinator_error(response)`` is the response's coordinator-level error code (or 0)."""
        client = self.client
        deadline = time.monotonic() + client.request_timeout_ms / 1000
        attempt = 0
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                conn, node = await self.connection()
                version = self.version(conn, api_key)
                response = await self.send(conn, build(version), version)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            else:
                code = coordinator_error(response)
                if code in COORDINATOR_ERRORS:
                    self.forget(node)
                    last = make_error(code)
                elif code == LOAD_IN_PROGRESS:
                    last = make_error(code)
                else:
                    return response, version
            await asyncio.sleep(client.retry_backoff.backoff_ms(attempt) / 1000)
            attempt += 1
        raise KafkaTimeoutError(f"no answer from the coordinator of group {self.group_id!r}: {last}")
