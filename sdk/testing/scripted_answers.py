"""The script behind the fake brokers of ``sdk.testing`` (Java's ``MockClient`` queue).

A test prepares answers, in order per API, each with what its request must carry; a request takes
the oldest prepared answer of its API, or waits in flight until one is prepared. A request that
does not match fails in the code under test (often a background task that swallows errors), so
the failure is also kept: ``verify()`` raises the first one. ``MockCoordinator`` and
``MockProducerBroker`` put this script behind the port each client talks through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sdk.errors import KafkaConnectionError

__all__ = ["Answer", "Matcher", "ScriptedAnswers", "SentRequest", "api_key_of"]

#: What a prepared answer may be: a response, an error to raise, or a function of the request.
Answer = Any
#: What a request must carry: field values (a value may be a predicate), or a predicate of it.
Matcher = Mapping[str, Any] | Callable[[Any], bool]


@dataclass
class SentRequest:
    """One request as the fake broker received it."""

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


def api_key_of(api: int | type[Any]) -> int:
    return api if isinstance(api, int) else int(api.API_KEY)


class ScriptedAnswers:
    """Prepared answers matched to requests; ``requests`` is every request received, in order."""

    def __init__(self) -> None:
        self.requests: list[SentRequest] = []
        self._prepared: list[_Prepared] = []
        self._parked: list[_Parked] = []
        self._failures: list[AssertionError] = []

    # -- scripting ------------------------------------------------------------------------------

    def prepare_response(
        self, answer: Answer, *, api: int | type[Any] | None = None, match: Matcher | None = None
    ) -> None:
        """Answer the next request of ``api`` (by default the API of ``answer``, a response) with
        ``answer`` (a response, an error to raise, or a function of the ``SentRequest`` giving
        either); ``match`` is what the request must carry."""
        if api is None:
            if isinstance(answer, BaseException) or callable(answer):
                raise ValueError("say which API an error or a function answers with api=")
            api = type(answer)
        self._prepared.append(_Prepared(api_key_of(api), answer, match))
        self._deliver()

    def prepare_disconnect(self, api: int | type[Any], *, match: Matcher | None = None) -> None:
        """The connection is lost under the next request of ``api``."""
        self.prepare_response(KafkaConnectionError("connection lost (scripted)"), api=api, match=match)

    # -- inspection -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> list[SentRequest]:
        """Requests waiting for an answer to be prepared."""
        return [p.sent for p in self._parked if not p.future.done()]

    def sent(self, api: int | type[Any]) -> list[SentRequest]:
        """The requests of ``api`` received so far."""
        key = api_key_of(api)
        return [s for s in self.requests if s.api_key == key]

    def pending(self) -> int:
        """Prepared answers no request has taken yet."""
        return len(self._prepared)

    def verify(self) -> None:
        """Raise the first mismatch seen (background tasks may have swallowed it)."""
        if self._failures:
            raise AssertionError(f"{len(self._failures)} request(s) did not match: {self._failures[0]}")

    # -- for the fake brokers -------------------------------------------------------------------

    def _receive(self, sent: SentRequest) -> asyncio.Future[Any]:
        """Record ``sent`` and return the future its answer (or error) will settle."""
        self.requests.append(sent)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._parked.append(_Parked(sent, future))
        self._deliver()
        return future

    def _forget_parked(self, future: asyncio.Future[Any]) -> None:
        self._parked = [p for p in self._parked if p.future is not future]

    def _fail_in_flight(self, error: BaseException) -> None:
        """Every request in flight fails with ``error`` (a lost connection)."""
        parked, self._parked = self._parked, []
        for entry in parked:
            if not entry.future.done():
                entry.future.set_exception(error)

    def _result(self, sent: SentRequest, answer: Any) -> Any:
        """What the request's future is given for a prepared response (the fake's own form)."""
        return answer

    def _deliver(self) -> None:
        """Hand prepared answers to the waiting requests, oldest first, per API."""
        for parked in list(self._parked):
            if parked.future.done():  # given up by its caller
                self._parked.remove(parked)
                continue
            prepared = next((p for p in self._prepared if p.api_key == parked.sent.api_key), None)
            if prepared is None:
                continue
            self._prepared.remove(prepared)
            self._parked.remove(parked)
            failure = _mismatch(parked.sent, prepared.match)
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
                parked.future.set_result(self._result(parked.sent, answer))


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
