"""GroupChannel: how a group member talks to its group's coordinator.

Over a ``CoordinatorPort`` (``sdk.client.coordinators``: find the coordinator, send it requests,
forget it when it moved or the connection to it failed), the channel picks each group request's
version cap (the consumer speaks up to ``MAX_VERSIONS``) and retries coordinator-routed requests
(OffsetCommit, OffsetFetch) until the request timeout. Membership decisions stay in
``ConsumerCoordinator``; this module knows nothing of generations or listeners.

Some brokers advertise the flexible versions of the group APIs but drop the connection on them or
answer them malformed (librdkafka's mock cluster 2.x does both). A broker that loses
``FLEXIBLE_FAILURES_TO_FALL_BACK`` flexible requests of one group API in a row, with no answer to
that API in between, is then spoken to in the newest non-flexible versions, which every Kafka
broker since 2.3 also accepts. One lost connection is not enough (a network blip says nothing
about versions). The fallback is withdrawn when a non-flexible request to that broker is lost too
(then the connection, not the versions, was at fault), and it lasts ``FALLBACK_TTL_S`` at most:
then the flexible versions are tried again, so no run of bad luck downgrades a broker for good.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sdk.client.backoff import ExponentialBackoff
from sdk.client.client import KafkaClient
from sdk.client.coordinators import (
    COORDINATOR_ERRORS,
    ClientCoordinatorPort,
    CoordinatorPort,
    CoordinatorType,
    Sent,
)
from sdk.consumer.group_clock import SYSTEM_CLOCK, Clock
from sdk.errors import ErrorCode, KafkaConnectionError, KafkaError, KafkaTimeoutError, make_error
from sdk.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

__all__ = [
    "FALLBACK_TTL_S",
    "FLEXIBLE_FAILURES_TO_FALL_BACK",
    "MAX_VERSIONS",
    "NON_FLEXIBLE_MAX",
    "FlexibleFallback",
    "GroupChannel",
]

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
#: Flexible requests of one API a broker must lose in a row before it gets non-flexible ones.
FLEXIBLE_FAILURES_TO_FALL_BACK = 2
#: How long a broker gets the non-flexible versions before the flexible ones are tried again.
FALLBACK_TTL_S = 600.0
LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def _flexible(api_key: int, version: int) -> bool:
    return api_key in NON_FLEXIBLE_MAX and version > NON_FLEXIBLE_MAX[api_key]


class FlexibleFallback:
    """Which brokers get the non-flexible group versions (see the module docstring)."""

    def __init__(self, group_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self._group_id = group_id
        self._clock = clock
        #: (broker, api key) -> flexible requests lost in a row.
        self._lost: dict[tuple[int, int], int] = {}
        #: broker -> until when (on the clock) it gets the non-flexible versions.
        self._non_flexible: dict[int, float] = {}

    def non_flexible(self, node: int) -> bool:
        """Whether broker ``node`` gets the non-flexible versions now."""
        until = self._non_flexible.get(node)
        if until is None:
            return False
        if self._clock.monotonic() >= until:
            log.info("group %s: flexible group versions with broker %s again", self._group_id, node)
            self._withdraw(node)
            return False
        return True

    def _withdraw(self, node: int) -> None:
        self._non_flexible.pop(node, None)
        self._lost = {k: v for k, v in self._lost.items() if k[0] != node}

    def cap(self, node: int, api_key: int) -> int | None:
        """The highest version of ``api_key`` to send to broker ``node`` (None: no cap)."""
        cap = MAX_VERSIONS.get(api_key)
        if cap is not None and self.non_flexible(node):
            cap = min(cap, NON_FLEXIBLE_MAX.get(api_key, cap))
        return cap

    def answered(self, node: int, api_key: int, version: int) -> None:
        if _flexible(api_key, version):
            self._lost.pop((node, api_key), None)

    def lost(self, node: int, api_key: int, version: int, error: BaseException) -> None:
        """A request of ``api_key`` at ``version`` to ``node`` got no readable answer."""
        if api_key not in NON_FLEXIBLE_MAX:
            return
        if not _flexible(api_key, version):
            if node in self._non_flexible:
                log.info(
                    "group %s: broker %s lost a non-flexible request too (%r): flexible group versions again",
                    self._group_id, node, error,
                )
                self._withdraw(node)
            return
        count = self._lost.get((node, api_key), 0) + 1
        self._lost[(node, api_key)] = count
        if count >= FLEXIBLE_FAILURES_TO_FALL_BACK and node not in self._non_flexible:
            log.warning(
                "group %s: broker %s failed %d flexible requests of api %d in a row (last v%d: %r): "
                "using non-flexible group versions with it",
                self._group_id, node, count, api_key, version, error,
            )
            self._non_flexible[node] = self._clock.monotonic() + FALLBACK_TTL_S


class GroupChannel:
    """Requests to ``group_id``'s coordinator through ``port`` (see the module docstring).
    ``clock``, ``retry_backoff`` and ``request_timeout_ms`` pace and bound ``send_retrying``."""

    def __init__(
        self,
        port: CoordinatorPort,
        group_id: str,
        *,
        retry_backoff: ExponentialBackoff,
        request_timeout_ms: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.port = port
        self.group_id = group_id
        self.retry_backoff = retry_backoff
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self.fallback = FlexibleFallback(group_id, clock)

    @classmethod
    def for_client(cls, client: KafkaClient, group_id: str) -> GroupChannel:
        """The channel over ``client``'s connections, with its retry settings."""
        return cls(
            ClientCoordinatorPort(client, CoordinatorType.GROUP, group_id),
            group_id,
            retry_backoff=client.retry_backoff,
            request_timeout_ms=client.request_timeout_ms,
        )

    async def coordinator(self) -> int:
        """The coordinator's node id (looked up, with retries, when not known)."""
        return await self.port.coordinator()

    def forget(self, node: int | None = None) -> None:
        """Forget the coordinator (only if it is still ``node``, when given)."""
        self.port.forget(node)

    async def send(self, api_key: int, build: Callable[[int], Any], timeout_ms: float | None = None) -> Sent:
        """``build(version)`` sent to the coordinator once; a lost connection or a timeout forgets
        the coordinator (``KafkaConnectionError``, ``KafkaTimeoutError``)."""
        node = await self.port.coordinator()
        versions: list[int] = []

        def build_at(version: int) -> Any:
            versions.append(version)
            return build(version)

        try:
            sent = await self.port.send(
                api_key, build_at, max_version=self.fallback.cap(node, api_key), timeout_ms=timeout_ms
            )
        except KafkaConnectionError as exc:
            if versions:
                self.fallback.lost(node, api_key, versions[-1], exc)
            raise
        self.fallback.answered(sent.node, api_key, sent.version)
        return sent

    async def send_retrying(
        self, api_key: int, build: Callable[[int], Any], coordinator_error: Callable[[Any], int]
    ) -> tuple[Any, int]:
        """``build(version)`` sent to the coordinator, re-finding it on coordinator errors and lost
        connections until the request timeout; returns the response and its version.
        ``coordinator_error(response)`` is the response's coordinator-level error code (or 0)."""
        clock = self.clock
        deadline = clock.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        last: BaseException | None = None
        while clock.monotonic() < deadline:
            try:
                sent = await self.send(api_key, build)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            else:
                code = coordinator_error(sent.response)
                if code in COORDINATOR_ERRORS:
                    self.forget(sent.node)
                    last = make_error(code)
                elif code == LOAD_IN_PROGRESS:
                    last = make_error(code)
                else:
                    return sent.response, sent.version
            await clock.sleep(self.retry_backoff.backoff_ms(attempt) / 1000)
            attempt += 1
        raise KafkaTimeoutError(f"no answer from the coordinator of group {self.group_id!r}: {last}")
