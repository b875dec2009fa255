"""MockCoordinator: a scripted coordinator behind a ``CoordinatorPort`` (Java's ``MockClient``).

Code written against ``sdk.client.coordinators.CoordinatorPort`` (the consumer's
``ConsumerCoordinator``) runs on it without a broker or a socket. The test prepares the answers,
in order per API, with what each request must carry::

    port = MockCoordinator()
    port.prepare_response(JoinGroupResponse(...), match={"member_id": ""})
    port.prepare_disconnect(HeartbeatRequest)          # the connection is lost under it

Each request goes through the real codec at the version negotiated against ``broker_versions``
(by default every version this SDK speaks), so a field a version cannot carry is dropped, and an
answer is read back as the broker's would be. A request without a prepared answer stays in flight
(``in_flight``) until one is prepared, as a coordinator holding a JoinGroup does; with ``time``
given, it then fails with ``KafkaTimeoutError`` when its timeout passes on that clock.

A request that does not match its prepared answer raises ``AssertionError`` in the code under test
(often a background task that swallows errors), so the failure is also kept: ``verify()`` raises
the first one. FindCoordinator is scripted as state: ``coordinator_node`` is the broker the
coordinator is on (None: not available, lookups wait), ``known`` the one the client has found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from sdk.client.connection import pick_version
from sdk.client.coordinators import Sent
from sdk.errors import KafkaConnectionError, KafkaTimeoutError
from sdk.protocol.codec import decode, encode, supported_versions
from sdk.testing.mock_time import MockTime
from sdk.testing.scripted_answers import ScriptedAnswers, SentRequest

__all__ = ["MockCoordinator", "MockTopics", "SentRequest"]


class MockCoordinator(ScriptedAnswers):
    """A ``CoordinatorPort`` answering from a script (see the module docstring)."""

    def __init__(
        self,
        *,
        node: int | None = 0,
        broker_versions: Mapping[int, tuple[int, int]] | None = None,
        time: MockTime | None = None,
        request_timeout_ms: float = 30000,
    ) -> None:
        super().__init__()
        self.coordinator_node = node
        self.known: int | None = None
        self.broker_versions = dict(broker_versions or {})
        self.time = time
        self.request_timeout_ms = request_timeout_ms
        #: FindCoordinator lookups made and coordinators forgotten, in order.
        self.lookups = 0
        self.forgotten = 0
        self._coordinator_found = asyncio.Event()
        if node is not None:
            self._coordinator_found.set()

    # -- scripting ------------------------------------------------------------------------------

    def move_coordinator(self, node: int | None) -> None:
        """The coordinator is now on ``node`` (None: not available); the client sees it at its
        next lookup, after it forgot the old one."""
        self.coordinator_node = node
        if node is None:
            self._coordinator_found.clear()
        else:
            self._coordinator_found.set()

    # -- CoordinatorPort ------------------------------------------------------------------------

    async def coordinator(self) -> int:
        while self.known is None:
            self.lookups += 1
            await self._coordinator_found.wait()
            self.known = self.coordinator_node
        return self.known

    def forget(self, node: int | None = None) -> None:
        if self.known is not None and (node is None or node == self.known):
            self.known = None
            self.forgotten += 1

    async def send(
        self,
        api_key: int,
        build: Callable[[int], Any],
        *,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> Sent:
        node = await self.coordinator()
        version = pick_version(
            api_key, self.broker_versions.get(api_key, supported_versions(api_key)), max_version=max_version
        )
        built = build(version)
        request = decode(type(built), encode(built, version), version)
        sent = SentRequest(api_key, version, request, node)
        future = self._receive(sent)
        try:
            if self.time is None or future.done():
                answer = await future
            else:
                timeout_s = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
                try:
                    answer = await self.time.wait_for(asyncio.shield(future), timeout_s)
                except TimeoutError:
                    raise KafkaTimeoutError(f"{sent.name} v{version}: no answer in {timeout_s} s") from None
        except (KafkaConnectionError, KafkaTimeoutError):
            self.forget(node)
            raise
        finally:
            self._forget_parked(future)
        response = decode(type(answer), encode(answer, version), version)
        return Sent(response, version, node)


class MockTopics:
    """``TopicMetadata`` from a dict: ``counts[topic]`` partitions; ``tracked`` what the client
    was asked to keep in its metadata refreshes."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self.counts: dict[str, int] = dict(counts or {})
        self.tracked: set[str] = set()

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def track(self, topic: str) -> None:
        self.tracked.add(topic)
