"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs. A broker's own configs (BROKER and
BROKER_LOGGER resources named by a broker id) are asked of that broker, since only it knows them;
every other resource (topics, the cluster-wide broker default named "") of any broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from sdk.admin.results import ConfigEntry, ResourceConfigs
from sdk.admin.routing import AdminRouter, Deadline, run_per_item
from sdk.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from sdk.errors import ErrorCode, KafkaError, make_error
from sdk.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

__all__ = ["alter_configs", "describe_configs", "incremental_alter_configs"]

_NODE_RESOURCES = (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)


def check_resource(resource: ConfigResource) -> None:
    """A broker resource's name must be a broker id (or "" for the cluster-wide default)."""
    if resource.resource_type in _NODE_RESOURCES and resource.name and not resource.name.isdigit():
        raise ValueError(f"config_resources: {resource!r}: a broker resource is named by its broker id")


def _router_for(router: AdminRouter) -> Callable[[ConfigResource], Awaitable[int]]:
    async def route(resource: ConfigResource) -> int:
        if resource.resource_type in _NODE_RESOURCES and resource.name:
            return int(resource.name)
        return await router.any_node()

    return route


def _key(resource_type: int, name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType(resource_type), name)


def _error(code: int, message: str | None, resource: ConfigResource) -> KafkaError | None:
    if not code:
        return None
    return make_error(code, f"{resource!r}: {message}" if message else repr(resource))


async def describe_configs(
    router: AdminRouter,
    resources: Sequence[ConfigResource],
    deadline: Deadline,
    include_synonyms: bool,
    include_documentation: bool,
) -> dict[ConfigResource, ResourceConfigs]:
    R = DescribeConfigsRequest.DescribeConfigsResource

    async def send(
        node: int, batch: list[ConfigResource]
    ) -> dict[ConfigResource, ResourceConfigs | KafkaError]:
        request = DescribeConfigsRequest(
            resources=[
                R(
                    resource_type=int(r.resource_type),
                    resource_name=r.name,
                    configuration_keys=None if r.configs is None else list(r.configs),
                )
                for r in batch
            ],
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        response, _ = await router.send(node, DescribeConfigsRequest.API_KEY, lambda _v: request, deadline)
        answers: dict[ConfigResource, ResourceConfigs | KafkaError] = {}
        for result in response.results:
            key = _key(result.resource_type, result.resource_name)
            error = _error(result.error_code, result.error_message, key)
            if error is not None:
                answers[key] = error
                continue
            entries = {
                c.name: ConfigEntry(
                    c.name,
                    c.value,
                    c.config_source,
                    c.read_only,
                    c.config_source == 5,  # DEFAULT_CONFIG
                    c.is_sensitive,
                    tuple((s.name, s.value, s.source) for s in c.synonyms or ()),
                    c.config_type,
                    c.documentation,
                )
                for c in result.configs
            }
            answers[key] = ResourceConfigs(entries)
        return answers

    answers = await run_per_item(
        router,
        resources,
        deadline,
        route=_router_for(router),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
    return {
        resource: answer if isinstance(answer, ResourceConfigs) else ResourceConfigs(error=answer)
        for resource, answer in answers.items()
    }


async def incremental_alter_configs(
    router: AdminRouter,
    changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
    deadline: Deadline,
    validate_only: bool,
) -> dict[ConfigResource, KafkaError | None]:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    ops = {resource: list(resource_ops) for resource, resource_ops in changes.items()}

    async def send(node: int, batch: list[ConfigResource]) -> dict[ConfigResource, KafkaError | None]:
        request = IncrementalAlterConfigsRequest(
            resources=[
                R(
                    resource_type=int(r.resource_type),
                    resource_name=r.name,
                    configs=[
                        R.AlterableConfig(name=op.name, config_operation=int(op.op_type), value=op.value)
                        for op in ops[r]
                    ],
                )
                for r in batch
            ],
            validate_only=validate_only,
        )
        response, _ = await router.send(
            node, IncrementalAlterConfigsRequest.API_KEY, lambda _v: request, deadline
        )
        return {
            (key := _key(r.resource_type, r.resource_name)): _error(r.error_code, r.error_message, key)
            for r in response.responses
        }

    return await run_per_item(
        router,
        ops,
        deadline,
        route=_router_for(router),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )


async def alter_configs(
    router: AdminRouter, resources: Sequence[ConfigResource], deadline: Deadline, validate_only: bool
) -> dict[ConfigResource, KafkaError | None]:
    R = AlterConfigsRequest.AlterConfigsResource

    async def send(node: int, batch: list[ConfigResource]) -> dict[ConfigResource, KafkaError | None]:
        request = AlterConfigsRequest(
            resources=[
                R(
                    resource_type=int(r.resource_type),
                    resource_name=r.name,
                    configs=[
                        R.AlterableConfig(name=k, value=None if v is None else str(v))
                        for k, v in (r.configs or {}).items()
                    ],
                )
                for r in batch
            ],
            validate_only=validate_only,
        )
        response, _ = await router.send(node, AlterConfigsRequest.API_KEY, lambda _v: request, deadline)
        return {
            (key := _key(r.resource_type, r.resource_name)): _error(r.error_code, r.error_message, key)
            for r in response.responses
        }

    return await run_per_item(
        router,
        resources,
        deadline,
        route=_router_for(router),
        send=send,
        final_codes={ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
    )
