"""A controller's own registration with the active controller (KIP-919): Kafka's
``ControllerRegistrationManager``.

Every node with the controller role sends ControllerRegistration (API 70) with its incarnation id
(new at each start), its controller listeners as advertised, and ``SUPPORTED_FEATURES``; the
active controller writes it as a RegisterControllerRecord, and the metadata image's
``controllers`` then describe the node: DescribeCluster on a controller listener lists them, and
UpdateFeatures checks new levels against what each registered controller supports.

When it sends, as Kafka's manager:

- only once the node's metadata has caught up with the log (Kafka installs the manager on the
  controller's MetadataLoader, which publishes only after it reached the high watermark): before
  that the image may hold an older registration of this node, or a metadata.version it will
  not keep;
- only once metadata.version is 3.7-IV0 (level 15) or later; older levels cannot hold the record;
- only while the image's registration of this node is not this process's: missing, or of
  another incarnation (Kafka 4.1 compares the incarnation id only; listeners and features
  cannot change without a restart, which makes a new incarnation). A later image showing
  another incarnation, or none, makes it send again (Kafka's ``registeredInLog`` is cleared);
- one request at a time. A refusal, or no active controller answering within the request's
  timeout, is retried after an exponential backoff (100 ms doubling to 120 s, 2% jitter); after
  a success nothing is sent until an image changes this node's registration or the finalized
  features (the record is committed when the answer comes, the image shows it soon after).

Invariant: once the node has caught up, ``registered`` is set exactly while the latest image
holds this process's incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reference_broker.cluster.broker_lifecycle import (
    SECURITY_PROTOCOL_IDS,
    ControllerChannel,
    ControllerUnavailableError,
)
from reference_broker.controller.supported_features import (
    CONTROLLER_REGISTRATION_LEVEL,
    METADATA_VERSION,
    SUPPORTED_FEATURES,
)
from reference_broker.metadata.delta import MetadataDelta
from reference_broker.metadata.image import ControllerRegistration, Endpoint, MetadataImage
from sdk.protocol.errors import ErrorCode, make_error
from sdk.protocol.messages import ControllerRegistrationRequest

log = logging.getLogger("reference_broker.cluster")

#: How often a node not yet caught up with the metadata looks again (catching up publishes no
#: image of its own when the last committed batch was already replayed).
CATCH_UP_POLL_S = 0.1
#: How long one ControllerRegistration may look for the active controller.
REQUEST_TIMEOUT_S = 5.0


#: Kafka's ControllerRegistrationManager backoff: 100 ms doubling to 120 s, 2% jitter
_BACKOFF_INITIAL_MS, _BACKOFF_MAX_MS, _BACKOFF_JITTER = 100, 120_000, 0.02


def retry_backoff_ms(failures: int) -> float:
    """The wait after ``failures`` failed requests in a row (the broker does not import the
    client's backoff: it depends only on the sans-IO core)."""
    base = min(_BACKOFF_INITIAL_MS * 2 ** min(failures, 32), _BACKOFF_MAX_MS)
    return min(base * random.uniform(1 - _BACKOFF_JITTER, 1 + _BACKOFF_JITTER), _BACKOFF_MAX_MS)


class ControllerRegistrationManager:
    """Registers controller ``node_id`` through ``channel``; a ``MetadataLoader`` publisher."""

    def __init__(
        self,
        node_id: int,
        channel: ControllerChannel,
        *,
        listeners: Callable[[], Sequence[Any]],
        caught_up: Callable[[], bool],
        features: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES,
        incarnation_id: uuid.UUID | None = None,
    ):
        self.node_id = node_id
        self.channel = channel
        #: the node's controller listeners (read at each send: ports are known once bound)
        self.listeners = listeners
        self.caught_up = caught_up
        self.features = dict(features)
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.image = MetadataImage()
        #: Set while the latest image holds this process's registration.
        self.registered = asyncio.Event()
        self.successful_rpcs = 0
        self.failed_rpcs = 0
        self._wake = asyncio.Event()
        #: After a successful answer: no new request until the image shows this node's
        #: registration or features change (Kafka sends again only on such an update).
        self._awaiting_record = False
        self._task: asyncio.Task[None] | None = None

    # -- what it would send -----------------------------------------------------------------------
    def _endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(
            Endpoint(lst.name, lst.advertised()[0], lst.advertised()[1],
                     SECURITY_PROTOCOL_IDS[lst.security_protocol])
            for lst in self.listeners()
        )

    def wanted(self) -> ControllerRegistration:
        """The registration this process sends."""
        return ControllerRegistration(
            id=self.node_id, incarnation_id=self.incarnation_id, zk_migration_ready=False,
            endpoints=self._endpoints(), features=self.features,
        )

    def request(self) -> ControllerRegistrationRequest:
        wanted = self.wanted()
        return ControllerRegistrationRequest(
            controller_id=self.node_id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=False,
            listeners=[
                ControllerRegistrationRequest.Listener(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in wanted.endpoints
            ],
            features=[
                ControllerRegistrationRequest.Feature(
                    name=name, min_supported_version=low, max_supported_version=high)
                for name, (low, high) in sorted(wanted.features.items())
            ],
        )

    def _matches(self, current: ControllerRegistration | None) -> bool:
        return current is not None and current.incarnation_id == self.incarnation_id

    # -- MetadataPublisher -------------------------------------------------------------------------
    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image
        if self.node_id in delta.changed_controllers or delta.features_changed:
            self._awaiting_record = False
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------------------
    def _due(self) -> bool:
        """Whether a ControllerRegistration should go out now (updates ``registered``)."""
        if not self.caught_up():
            return False
        image = self.image
        level = image.features.get(METADATA_VERSION)
        if level is None or level < CONTROLLER_REGISTRATION_LEVEL:
            return False
        current = image.controllers.get(self.node_id)
        if self._matches(current):
            if not self.registered.is_set():
                log.info("controller %d: our registration (incarnation %s) is in the metadata log",
                         self.node_id, self.incarnation_id)
                self.registered.set()
            return False
        if self.registered.is_set():
            log.warning("controller %d: %s, registering again", self.node_id,
                        "our registration was removed" if current is None
                        else f"found the registration of incarnation {current.incarnation_id}")
            self.registered.clear()
        return not self._awaiting_record

    async def _send_once(self) -> bool:
        """One ControllerRegistration; whether the active controller accepted it."""
        try:
            response: Any = await self.channel.send(self.request(), timeout_s=REQUEST_TIMEOUT_S)
        except ControllerUnavailableError as exc:
            log.info("controller %d: registration not answered: %s", self.node_id, exc)
            return False
        if response.error_code != ErrorCode.NONE:
            log.info("controller %d: registration refused: %s", self.node_id,
                     make_error(response.error_code, response.error_message))
            return False
        return True

    async def _run(self) -> None:
        while True:
            if not self._due():
                self._wake.clear()
                # Registered (or waiting for its record): only a new image can change that;
                # otherwise catching up may end without one.
                settled = self.registered.is_set() or self._awaiting_record
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), None if settled else CATCH_UP_POLL_S)
                continue
            if await self._send_once():
                self.successful_rpcs += 1
                self.failed_rpcs = 0  # the next failure backs off from the start again
                self._awaiting_record = not self._matches(self.image.controllers.get(self.node_id))
                continue
            delay_ms = retry_backoff_ms(self.failed_rpcs)
            self.failed_rpcs += 1
            await asyncio.sleep(delay_ms / 1000)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.channel.channels.close()
