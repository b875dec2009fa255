"""Running a request through the active controller, or answering NOT_CONTROLLER."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference_broker.controller.quorum_controller import QuorumController
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.service import ControllerService, NotControllerError
from sdk.protocol.errors import ErrorCode


async def run(
    broker: Any,
    operation: Callable[[QuorumController, float], ControllerResult],
    not_controller: Callable[[int], Any],
) -> Any:
    """The committed answer of ``operation``, or ``not_controller(NOT_CONTROLLER)``."""
    service: ControllerService | None = getattr(broker, "controller", None)
    if service is None:
        return not_controller(ErrorCode.NOT_CONTROLLER)
    try:
        return await service.submit(lambda now: operation(service.core, now))
    except NotControllerError:
        return not_controller(ErrorCode.NOT_CONTROLLER)
