"""The api-key -> handler table behind dispatch and ApiVersions.

A registry serves one listener kind. On ``"broker"`` listeners only APIs Kafka serves there may
be registered (its message definitions list ``"broker"`` among their ``"listeners"``); those it
serves only to controllers are refused. A ``"controller"`` registry (the listeners named in
``controller.listener.names``, Kafka's ControllerApis) takes those too.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sdk.protocol.codec import request_class
from sdk.protocol.messages import Message

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.network.server import RequestContext

#: ``def`` handlers answer in the callback that read the request; ``async def`` ones (Fetch's long
#: poll) run as tasks. See ``reference_broker.handlers``.
HandleFunc = Callable[["Broker", "RequestContext", Any], "Message | Awaitable[Message | None] | None"]
# (request, api_version, error_code) -> a response carrying that error everywhere it can, or None
# when the only way to report it is closing the connection.
ErrorFunc = Callable[[Any, int, int], Message | None]

log = logging.getLogger("reference_broker.handlers")

#: API keys whose request definitions name no "broker" listener (controller or ZooKeeper-era
#: broker only): LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, Vote,
#: BeginQuorumEpoch, EndQuorumEpoch, AlterPartition, Envelope, FetchSnapshot, BrokerRegistration,
#: BrokerHeartbeat, AllocateProducerIds, ControllerRegistration, AssignReplicasToDirs,
#: UpdateRaftVoter.
NOT_ON_BROKER_LISTENERS = frozenset({4, 5, 6, 7, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82})


@dataclasses.dataclass(frozen=True)
class ApiHandler:
    """One implemented API: the versions served and how to answer with an error."""

    api_key: int
    min_version: int
    max_version: int
    handle: HandleFunc
    error_response: ErrorFunc | None = None
    #: True for a plain ``def`` handler: the server calls it through ``handle_now``, without a task.
    synchronous: bool = False
    #: The highest version served given the broker's settings (a version that needs a feature the
    #: broker has switched off is neither advertised nor served); ``max_version`` when None.
    enabled_max: Callable[[Broker], int] | None = None


class HandlerRegistry:
    """Implements the network layer's ``Dispatcher`` for one broker."""

    def __init__(self, broker: Broker, listener_kind: str = "broker"):
        if listener_kind not in ("broker", "controller"):
            raise ValueError(f"listener kind {listener_kind!r} is not broker or controller")
        self.broker = broker
        self.listener_kind = listener_kind
        self._handlers: dict[int, ApiHandler] = {}

    def register(
        self,
        api_key: int,
        handle: HandleFunc,
        *,
        versions: tuple[int, int] | None = None,
        error_response: ErrorFunc | None = None,
        enabled_max: Callable[[Broker], int] | None = None,
    ) -> None:
        """Serve ``api_key``; ``versions`` defaults to everything the codec can decode;
        ``enabled_max(broker)`` lowers the top version by the broker's settings."""
        if api_key in NOT_ON_BROKER_LISTENERS and self.listener_kind == "broker":
            raise ValueError(f"api key {api_key} is served to controllers only, never on a broker listener")
        lo, hi = request_class(api_key).VALID_VERSIONS
        if versions is not None:
            if versions[0] < lo or versions[1] > hi:
                raise ValueError(f"api key {api_key}: versions {versions} exceed the codec's {lo}-{hi}")
            lo, hi = versions
        synchronous = not inspect.iscoroutinefunction(handle)
        self._handlers[api_key] = ApiHandler(
            api_key, lo, hi, handle, error_response, synchronous, enabled_max
        )

    def guard(self, api_key: int, wrap: Callable[[HandleFunc], HandleFunc]) -> None:
        """Replace a registered handler by ``wrap(handler)`` (the authorization checks); the
        versions and error builder stay. A key that is not registered is left alone."""
        handler = self._handlers.get(api_key)
        if handler is not None:
            self._handlers[api_key] = dataclasses.replace(handler, handle=wrap(handler.handle))

    def find(self, api_key: int, api_version: int) -> ApiHandler | None:
        handler = self._handlers.get(api_key)
        if handler is None or not handler.min_version <= api_version <= self.max_version(handler):
            return None
        return handler

    def max_version(self, handler: ApiHandler) -> int:
        """The highest version of ``handler`` this broker serves and advertises."""
        if handler.enabled_max is None or self.broker is None:
            return handler.max_version
        return min(handler.max_version, handler.enabled_max(self.broker))

    def advertised(self) -> list[ApiHandler]:
        """Every registered API, by key; what ApiVersions reports (with ``max_version``)."""
        return [self._handlers[k] for k in sorted(self._handlers)]

    async def handle(self, ctx: RequestContext, request: Message) -> Message | None:
        """Run any handler to its response (awaiting it when it is ``async def``)."""
        result = self._handlers[ctx.api_key].handle(self.broker, ctx, request)
        if inspect.isawaitable(result):
            return await result
        return result

    def handle_now(self, ctx: RequestContext, request: Message) -> Message | None:
        """Run a synchronous handler (``find(...).synchronous``) to its response."""
        return self._handlers[ctx.api_key].handle(self.broker, ctx, request)  # type: ignore[return-value]  # sync: no awaitable

    def error_response(self, ctx: RequestContext, request: Message, code: int) -> Message | None:
        handler = self._handlers.get(ctx.api_key)
        if handler is None or handler.error_response is None:
            return None
        return handler.error_response(request, ctx.api_version, code)

    def unsupported_api_versions(self) -> Message:
        from reference_broker.handlers.api_versions import unsupported_version_response

        return unsupported_version_response(self)
