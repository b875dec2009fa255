"""Request handlers, one module per API family, and the registry the network layer dispatches to.

A handler is ``handle(broker, ctx, request) -> response | None`` (None: send nothing, as for acks=0
produce). Most are plain ``def``: the network layer calls them in the same callback that read the
request and, when nothing is queued before it, writes the answer straight away, without the task,
wake-ups and loop iterations an ``async def`` handler costs. Only handlers that wait are
``async def`` (Fetch's long poll, the group join and sync waits); they run as tasks. Each
module's ``install(registry)`` registers its APIs with the versions it implements; ApiVersions
advertises exactly the registry's contents, so an API is advertised if and only if its module is
in ``FAMILIES``.
"""

from reference_broker.handlers import (
    acls,
    api_versions,
    client_quotas,
    cluster,
    configs,
    consumer_group_heartbeat,
    describe_log_dirs,
    describe_topic_partitions,
    fetch,
    groups,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    producer_ids,
    records_admin,
    sasl,
    scram_credentials,
    topics,
    transactions,
)
from reference_broker.handlers.registry import ApiHandler, HandlerRegistry

FAMILIES = (
    api_versions,
    metadata,
    describe_topic_partitions,
    produce,
    fetch,
    list_offsets,
    offset_for_leader_epoch,
    topics,
    configs,
    describe_log_dirs,
    records_admin,
    cluster,
    producer_ids,
    groups,
    offsets,
    transactions,
    consumer_group_heartbeat,
    sasl,
    acls,
    scram_credentials,
    client_quotas,
)


def install_all(registry: HandlerRegistry) -> None:
    """Register every API family this broker implements."""
    for family in FAMILIES:
        family.install(registry)


__all__ = ["FAMILIES", "ApiHandler", "HandlerRegistry", "install_all"]
