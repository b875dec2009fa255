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
from dataclasses import dataclass, field
from typing import Any

from sdk.client.connection import pick_version
from sdk.client.coordinators import Sent
from sdk.errors import KafkaConnectionError, KafkaTimeoutError
from sdk.protocol.codec import decode, encode, supported_versions
from sdk.testing.mock_time import MockTime

__all__ = ["MockCoordinator", "MockTopics", "SentRequest"]

#: What a prepared answer may be: a response, an error to raise, or a function of the request.
Answer = Any
Matcher = Mapping[str, Any] | Callable[[Any], bool]


@dataclass
class SentRequest:
    """One request as the coordinator received it."""

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


class MockCoordinator:
    """A ``CoordinatorPort`` answering from a script (see the module docstring)."""

    def __init__(
        self,
        *,
        node: int | None = 0,
        broker_versions: Mapping[int, tuple[int, int]] | None = None,
        time: MockTime | None = None,
        request_timeout_ms: float = 30000,
    ) -> None:
        self.coordinator_node = node
        self.known: int | None = None
        self.broker_versions = dict(broker_versions or {})
        self.time = time
        self.request_timeout_ms = request_timeout_ms
        #: FindCoordinator lookups made and coordinators forgotten, in order.
        self.lookups = 0
        self.forgotten = 0
        #: Every request received (answered or not), in order.
        self.requests: list[SentRequest] = []
        self._prepared: list[_Prepared] = []
        self._parked: list[_Parked] = []
        self._failures: list[AssertionError] = []
        self._coordinator_found = asyncio.Event()
        if node is not None:
            self._coordinator_found.set()

    # -- scripting ------------------------------------------------------------------------------

    def prepare_response(
        self, answer: Answer, *, api: int | type[Any] | None = None, match: Matcher | None = None
    ) -> None:
        """Answer the next request of ``api`` (by default the API of ``answer``, a response) with
        ``answer`` (a response, an error to raise, or a function of the ``SentRequest`` giving
        either);
        ``match`` is what the request must carry: field values (a value may be a predicate) or a
        predicate of the whole request."""
        if api is None:
            if isinstance(answer, BaseException) or callable(answer):
                raise ValueError("say which API an error or a function answers with api=")
            api = type(answer)
        self._prepared.append(_Prepared(_api_key(api), answer, match))
        self._deliver()

    def prepare_disconnect(self, api: int | type[Any], *, match: Matcher | None = None) -> None:
        """The connection to the coordinator is lost under the next request of ``api``."""
        self.prepare_response(KafkaConnectionError("connection lost (scripted)"), api=api, match=match)

    def move_coordinator(self, node: int | None) -> None:
        """The coordinator is now on ``node`` (None: not available); the client sees it at its
        next lookup, after it forgot the old one."""
        self.coordinator_node = node
        if node is None:
            self._coordinator_found.clear()
        else:
            self._coordinator_found.set()

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
        self.requests.append(sent)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._parked.append(_Parked(sent, future))
        self._deliver()
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
            self._parked = [p for p in self._parked if p.future is not future]
        response = decode(type(answer), encode(answer, version), version)
        return Sent(response, version, node)

    # -- matching -------------------------------------------------------------------------------

    def _deliver(self) -> None:
        """Hand prepared answers to the waiting requests, oldest first, per API."""
        for parked in list(self._parked):
            if parked.future.done():
                continue
            prepared = next((p for p in self._prepared if p.api_key == parked.sent.api_key), None)
            if prepared is None:
                continue
            self._prepared.remove(prepared)
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
                parked.future.set_result(answer)

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
