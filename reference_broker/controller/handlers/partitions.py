"""AlterPartition (56), ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46)."""

from __future__ import annotations

from typing import Any

from reference_broker.controller.handlers._common import run
from sdk.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)


def _alter_partition_error(code: int) -> AlterPartitionResponse:
    return AlterPartitionResponse(error_code=code)


def _elect_error(code: int) -> ElectLeadersResponse:
    return ElectLeadersResponse(error_code=code)


def _reassign_error(code: int) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(error_code=code, error_message=None)


def _list_error(code: int) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(error_code=code, error_message=None)


async def alter_partition(broker: Any, ctx: Any, request: AlterPartitionRequest) -> Any:
    version = ctx.api_version
    return await run(
        broker, lambda core, _now: core.replication.alter_partition(request, version), _alter_partition_error
    )


async def elect_leaders(broker: Any, ctx: Any, request: ElectLeadersRequest) -> Any:
    return await run(broker, lambda core, _now: core.replication.elect_leaders(request), _elect_error)


async def alter_reassignments(broker: Any, ctx: Any, request: AlterPartitionReassignmentsRequest) -> Any:
    return await run(
        broker, lambda core, _now: core.replication.alter_reassignments(request), _reassign_error
    )


async def list_reassignments(broker: Any, ctx: Any, request: ListPartitionReassignmentsRequest) -> Any:
    return await run(broker, lambda core, _now: core.replication.list_reassignments(request), _list_error)


def install(registry: Any) -> None:
    for message, handle, error in (
        (AlterPartitionRequest, alter_partition, _alter_partition_error),
        (ElectLeadersRequest, elect_leaders, _elect_error),
        (AlterPartitionReassignmentsRequest, alter_reassignments, _reassign_error),
        (ListPartitionReassignmentsRequest, list_reassignments, _list_error),
    ):
        registry.register(
            message.API_KEY, handle, error_response=lambda _req, _version, code, error=error: error(code)
        )
