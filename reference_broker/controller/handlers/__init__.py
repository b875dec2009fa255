"""The controller's APIs, served on the controller listener (Kafka's ControllerApis).

Each handler hands its request to the node's ``ControllerService`` (``broker.controller``) and
answers once the records it produced are committed; a node that is not the active controller
answers NOT_CONTROLLER so the sender looks for the one that is.
"""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers import (
    brokers,
    client_quotas,
    configs,
    features,
    partitions,
    security,
    topics,
)


def install(registry: Any) -> None:
    """Register every controller API into the controller listener's registry."""
    for module in (brokers, client_quotas, configs, features, partitions, security, topics):
        module.install(registry)
