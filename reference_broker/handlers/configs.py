"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Versions served and per-version notes:

- DescribeConfigs v1-4 (v0 is gone since Kafka 4.0): v1+ include_synonyms; v3+
  include_documentation and each config's type; v4+ flexible. Resources: topics, this broker
  (name "" or its id) and its loggers (BROKER_LOGGER); any other type gets INVALID_REQUEST.
- AlterConfigs v0-2 (replaces a topic's whole set of overrides): v2+ flexible.
- IncrementalAlterConfigs v0-1 (SET, DELETE, APPEND, SUBTRACT on list-valued keys): v1+
  flexible. Both alter calls honour validate_only.

Topic configs are the log's overrides (persisted by the storage layer) on top of the broker's
``log.*`` settings, reported with Kafka's names, sources and synonyms: an override is
DYNAMIC_TOPIC_CONFIG, a value from the broker's config file STATIC_BROKER_CONFIG, anything else
DEFAULT_CONFIG. Broker configs are static here (set at start), so they are reported read-only and
altering them fails with INVALID_CONFIG, which is what Kafka answers for non-dynamic keys.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reference_broker.config import (
    BROKER_KEYS,
    SYNONYMS,
    TOPIC_TO_BROKER_KEY,
    ConfigSource,
    ConfigType,
    render,
)
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

log = logging.getLogger("reference_broker.configs")
DESCRIBE_CONFIGS = DescribeConfigsRequest.API_KEY
ALTER_CONFIGS = AlterConfigsRequest.API_KEY
INCREMENTAL_ALTER_CONFIGS = IncrementalAlterConfigsRequest.API_KEY
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


@dataclasses.dataclass
class ConfigEntry:
    """One described config, independent of the response version that carries it."""

    name: str
    value: str | None
    config_source: int
    read_only: bool = False
    is_sensitive: bool = False
    config_type: int = ConfigType.STRING
    documentation: str | None = None
    synonyms: list[tuple[str, str | None, int]] = dataclasses.field(default_factory=list)


def describe_topic_configs(
    broker: Broker, topic: str | None, overrides: dict[str, str | None] | None = None
) -> list[ConfigEntry]:
    """Every topic config with its effective value; ``topic=None`` describes would-be overrides."""
    current: Mapping[str, str | None]
    if topic is not None:
        current = broker.logs.topic_overrides(topic)
        effective = broker.logs.topic_config(topic).to_properties()
    else:
        current = {k: v for k, v in (overrides or {}).items() if v is not None}
        effective = broker.logs.check_topic_config(current).to_properties()
    config = broker.config
    names = sorted(set(effective) | set(TOPIC_TO_BROKER_KEY))
    entries = []
    for name in names:
        broker_key = TOPIC_TO_BROKER_KEY.get(name)
        spec = BROKER_KEYS.get(broker_key) if broker_key else None
        if name in current:
            value, source = current[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif name in effective:
            value = effective[name]
            source = config.topic_default_source(name) if broker_key else ConfigSource.DEFAULT_CONFIG
        else:
            value = render(config.get(broker_key)) if broker_key else None
            source = config.topic_default_source(name) if broker_key else ConfigSource.DEFAULT_CONFIG
        synonyms: list[tuple[str, str | None, int]] = []
        if name in current:
            synonyms.append((name, current[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_key:
            synonyms.extend(broker_synonyms(broker, broker_key))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                config_source=source,
                config_type=spec.type if spec else ConfigType.STRING,
                documentation=spec.doc if spec else None,
                synonyms=synonyms,
            )
        )
    return entries


def broker_synonyms(broker: Broker, broker_key: str) -> list[tuple[str, str | None, int]]:
    """Kafka's synonym chain for a broker key: every explicitly set spelling (``log.retention.ms``,
    ``.minutes``, ``.hours``) in precedence order, then the one whose default applies."""
    chain = SYNONYMS.get(broker_key, (broker_key,))
    settings = broker.config.settings
    found: list[tuple[str, str | None, int]] = [
        (k, render(settings[k]), ConfigSource.STATIC_BROKER_CONFIG) for k in chain if k in settings
    ]
    default_key = next((k for k in chain if BROKER_KEYS[k].default is not None), chain[0])
    found.append((default_key, render(BROKER_KEYS[default_key].default), ConfigSource.DEFAULT_CONFIG))
    return found


def describe_broker_configs(broker: Broker) -> list[ConfigEntry]:
    config = broker.config
    return [
        ConfigEntry(
            name=name,
            # Kafka never sends a sensitive value (passwords, private keys): null, flagged sensitive.
            value=None if spec.sensitive else render(config.get(name)),
            config_source=config.source(name),
            read_only=True,
            is_sensitive=spec.sensitive,
            config_type=spec.type,
            documentation=spec.doc,
            synonyms=[
                (key, None if spec.sensitive else value, source)
                for key, value, source in broker_synonyms(broker, name)
            ],
        )
        for name, spec in sorted(BROKER_KEYS.items())
    ]


def describe_loggers() -> list[ConfigEntry]:
    """The broker's loggers and their effective levels (resource type BROKER_LOGGER)."""
    names = sorted(n for n in logging.root.manager.loggerDict if n.startswith("reference_broker."))
    return [
        ConfigEntry(
            name=n,
            value=logging.getLevelName(logging.getLogger(n).getEffectiveLevel()),
            config_source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
        )
        for n in ["reference_broker", *names]
    ]


def _broker_name_error(broker: Broker, name: str) -> str | None:
    if name in ("", str(broker.node_id)):
        return None
    return f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}"


def _to_entry(e: ConfigEntry, version: int, synonyms: bool, docs: bool) -> Any:
    return Entry(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=e.config_source,
        is_default=e.config_source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=e.is_sensitive,
        synonyms=[Synonym(name=n, value=v, source=s) for n, v, s in e.synonyms] if synonyms else [],
        config_type=e.config_type,
        documentation=e.documentation if docs else None,
    )


def describe_configs(
    broker: Broker, ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results = []
    for res in request.resources:
        result = Result(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=[],
        )
        results.append(result)
        if res.resource_type == TOPIC:
            if broker.logs.topic(res.resource_name) is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"Topic {res.resource_name} does not exist."
                continue
            entries = describe_topic_configs(broker, res.resource_name)
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            problem = _broker_name_error(broker, res.resource_name)
            if problem:
                result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, problem
                continue
            entries = describe_broker_configs(broker) if res.resource_type == BROKER else describe_loggers()
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unsupported resource type {res.resource_type}"
            continue
        if res.configuration_keys is not None:
            wanted = set(res.configuration_keys)
            entries = [e for e in entries if e.name in wanted]
        result.configs = [
            _to_entry(e, ctx.api_version, request.include_synonyms, request.include_documentation)
            for e in entries
        ]
    return DescribeConfigsResponse(results=results)


def describe_configs_error(
    request: DescribeConfigsRequest, version: int, code: int
) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        results=[
            Result(error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in request.resources
        ]
    )


def _apply_topic(
    broker: Broker, name: str, new_overrides: dict[str, str], validate_only: bool
) -> tuple[int, str | None]:
    if broker.logs.topic(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."
    try:
        broker.logs.check_topic_config(new_overrides)
    except ValueError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    if not validate_only:
        broker.logs.set_topic_overrides(name, new_overrides)
        log.info("topic %s configs are now %s", name, new_overrides)
    return ErrorCode.NONE, None


def _broker_alter_error(broker: Broker, res: Any) -> tuple[int, str]:
    problem = _broker_name_error(broker, res.resource_name)
    if problem:
        return ErrorCode.INVALID_REQUEST, problem
    keys = ", ".join(c.name for c in res.configs)
    return ErrorCode.INVALID_CONFIG, f"Cannot update these configs dynamically: {keys}"


def alter_configs(
    broker: Broker, ctx: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    responses = []
    code: int
    message: str | None
    for res in request.resources:
        if res.resource_type == TOPIC:
            if any(c.value is None for c in res.configs):
                code, message = ErrorCode.INVALID_REQUEST, "Null value not supported for topic configs"
            else:
                values = {c.name: c.value for c in res.configs if c.value is not None}  # none is, see above
                code, message = _apply_topic(broker, res.resource_name, values, request.validate_only)
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            code, message = _broker_alter_error(broker, res)
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
        responses.append(
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return AlterConfigsResponse(responses=responses)


def _incremental(current: dict[str, str], configs: list[Any], defaults: dict[str, str]) -> dict[str, str]:
    """Apply SET/DELETE/APPEND/SUBTRACT to a copy of ``current``; ValueError names a bad op."""
    result = dict(current)
    for c in configs:
        if c.config_operation == SET:
            if c.value is None:
                raise ValueError(f"Null value not supported for SET of {c.name}")
            result[c.name] = c.value
        elif c.config_operation == DELETE:
            result.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            spec = BROKER_KEYS.get(TOPIC_TO_BROKER_KEY.get(c.name, ""))
            if spec is None or spec.type != ConfigType.LIST:
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise ValueError(f"Config value {verb} is not allowed for config key: {c.name}")
            base = result.get(c.name, defaults.get(c.name, ""))
            items = [v for v in base.split(",") if v]
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            result[c.name] = ",".join(items)
        else:
            raise ValueError(f"Unknown config operation {c.config_operation} for {c.name}")
    return result


def incremental_alter_configs(
    broker: Broker, ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = []
    code: int
    message: str | None
    for res in request.resources:
        duplicates = [k for k, n in Counter(c.name for c in res.configs).items() if n > 1]
        if duplicates:
            code, message = ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {duplicates}"
        elif res.resource_type == TOPIC:
            if broker.logs.topic(res.resource_name) is None:
                code, message = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"Topic {res.resource_name} does not exist.",
                )
            else:
                current = broker.logs.topic_overrides(res.resource_name)
                defaults = broker.logs.topic_config(res.resource_name).to_properties()
                try:
                    updated = _incremental(current, res.configs, defaults)
                except ValueError as exc:
                    code, message = ErrorCode.INVALID_CONFIG, str(exc)
                else:
                    code, message = _apply_topic(broker, res.resource_name, updated, request.validate_only)
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            code, message = _broker_alter_error(broker, res)
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
        responses.append(
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return IncrementalAlterConfigsResponse(responses=responses)


def _alter_error(response_cls: Any) -> Any:
    def build(request: Any, version: int, code: int) -> Any:
        return response_cls(
            responses=[
                response_cls.AlterConfigsResourceResponse(
                    error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
                )
                for r in request.resources
            ]
        )

    return build


def install(registry: HandlerRegistry) -> None:
    registry.register(DESCRIBE_CONFIGS, describe_configs, error_response=describe_configs_error)
    registry.register(ALTER_CONFIGS, alter_configs, error_response=_alter_error(AlterConfigsResponse))
    registry.register(
        INCREMENTAL_ALTER_CONFIGS,
        incremental_alter_configs,
        error_response=_alter_error(IncrementalAlterConfigsResponse),
    )
