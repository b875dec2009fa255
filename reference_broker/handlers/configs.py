"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Versions served and per-version notes:

- DescribeConfigs v1-4 (v0 is gone since Kafka 4.0): v1+ include_synonyms; v3+
  include_documentation and each config's type; v4+ flexible. Resources: topics, this broker
  (name "" or its id) and its loggers (BROKER_LOGGER); any other type gets INVALID_REQUEST.
- AlterConfigs v0-2 (replaces a topic's whole set of overrides): v2+ flexible.
- IncrementalAlterConfigs v0-1 (SET, DELETE, APPEND, SUBTRACT on list-valued keys): v1+
  flexible. Both alter calls honour validate_only.

Topic configs are the log's overrides (persisted by the storage layer) on top of the broker's
``log.*`` settings, reported with Kafka's names, sources and synonyms (ConfigHelper): an override
is DYNAMIC_TOPIC_CONFIG, then the broker key's own synonym chain (dynamic per-broker, dynamic
cluster default, config file, default), so a key whose default only comes through a coarser
synonym (``retention.ms`` from ``log.retention.hours``) lists none.

Broker configs (resource name = this broker's id) describe what the broker uses: its node id as
``broker.id``, the listeners it bound and advertises, its data dir as ``log.dirs``. The resource
name "" describes the cluster-wide dynamic defaults only. Altering a broker resource changes its
dynamic configs (reference_broker.dynamic_config): the keys this broker can change live, refused
otherwise with Kafka's INVALID_REQUEST "Cannot update these configs dynamically".

In cluster mode (``controller.quorum.voters`` set) the alter calls' TOPIC and BROKER resources
are forwarded to the active controller (``controller/config_control.py``), which decides them
with the same code as here (``requested_topic_overrides``; ``edit_incrementally`` and
``dynamic_config.check_dynamic``) and writes ConfigRecords; every broker's metadata publisher puts
its image's topic overrides into its logs and the cluster default ("") and its own broker level
into its config, which DescribeConfigs reads. BROKER_LOGGER resources stay this node's own.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reference_broker.config import (
    BROKER_KEYS,
    TOPIC_TO_BROKER_KEY,
    ConfigSource,
    ConfigType,
    listener_setting,
    quorum_configured,
    render,
)
from reference_broker.dynamic_config import DYNAMIC_KEYS, DynamicConfigError, level_values, update_dynamic
from reference_broker.log.config import LogConfig
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
            value = current[name]
        elif name in effective:
            value = effective[name]
        else:
            value = render(config.get(broker_key)) if broker_key else None
        synonyms: list[tuple[str, str | None, int]] = []
        if name in current:
            synonyms.append((name, current[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_key:
            synonyms.extend(broker_synonyms(broker, broker_key))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
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


def broker_synonyms(
    broker: Broker, broker_key: str, *, per_broker: bool = True
) -> list[tuple[str, str | None, int]]:
    """Kafka's synonym list of a broker key (see ``BrokerConfig.synonyms``), values rendered."""
    return [
        (name, render(value), source)
        for name, value, source in broker.config.synonyms(broker_key, per_broker=per_broker)
    ]


def _values_in_use(broker: Broker) -> dict[str, str]:
    """Broker keys whose value the broker works out itself when they are not configured: the node
    id (``broker.id``), the listeners bound from --host/--port and what they advertise, the data
    dir (``log.dirs``). Kafka reports such values as configured (STATIC_BROKER_CONFIG)."""
    config = broker.config
    in_use = {"broker.id": str(config.node_id), "log.dirs": str(config.data_dir)}
    if broker.cluster_id:
        in_use["cluster.id"] = broker.cluster_id
    in_use["listeners"] = ",".join(f"{lst.name}://{lst.host}:{lst.port}" for lst in broker.listeners)
    in_use["advertised.listeners"] = ",".join(
        "{}://{}:{}".format(lst.name, *lst.advertised()) for lst in broker.listeners
    )
    return in_use


def _broker_entry(broker: Broker, name: str, per_broker: bool, in_use: Mapping[str, str]) -> ConfigEntry:
    config, spec = broker.config, BROKER_KEYS[name]
    synonyms = broker_synonyms(broker, name, per_broker=per_broker)
    value = render(config.own_value(name) if per_broker else config.dynamic_default[name])
    if per_broker and name in in_use and not any(s[2] != ConfigSource.DEFAULT_CONFIG for s in synonyms):
        value = in_use[name]
        synonyms.insert(0, (name, value, ConfigSource.STATIC_BROKER_CONFIG))
    return ConfigEntry(
        name=name,
        # Kafka never sends a sensitive value (passwords, private keys): null, flagged sensitive.
        value=None if spec.sensitive else value,
        config_source=synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG,
        read_only=name not in DYNAMIC_KEYS,
        is_sensitive=spec.sensitive,
        config_type=spec.type,
        documentation=spec.doc,
        synonyms=[(key, None if spec.sensitive else v, source) for key, v, source in synonyms],
    )


def _listener_entry(broker: Broker, name: str, value: Any) -> ConfigEntry:
    """A configured ``listener.name.<listener>.<key>`` setting as Kafka describes it: static and
    read-only, typed like its broker key, no documentation of its own (null), its
    synonyms itself and then the broker key it overrides on that listener, null when sensitive."""
    spec, base = listener_setting(name)
    synonyms = [(name, render(value), int(ConfigSource.STATIC_BROKER_CONFIG))]
    if base is not None:
        synonyms += broker_synonyms(broker, base)
    return ConfigEntry(
        name=name,
        value=None if spec.sensitive else render(value),
        config_source=ConfigSource.STATIC_BROKER_CONFIG,
        read_only=True,
        is_sensitive=spec.sensitive,
        config_type=spec.type,
        documentation=None,
        synonyms=[(key, None if spec.sensitive else v, source) for key, v, source in synonyms],
    )


def describe_broker_configs(broker: Broker, per_broker: bool = True) -> list[ConfigEntry]:
    """This broker's configs (``per_broker``: every broker key and every per-listener setting it
    was given), or the cluster-wide dynamic defaults only."""
    if not per_broker:
        return [_broker_entry(broker, name, False, {}) for name in sorted(broker.config.dynamic_default)]
    in_use = _values_in_use(broker)
    entries = [_broker_entry(broker, name, True, in_use) for name in BROKER_KEYS]
    settings = broker.config.settings
    entries += [_listener_entry(broker, name, settings[name]) for name in settings if name not in BROKER_KEYS]
    return sorted(entries, key=lambda entry: entry.name)


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
            if res.resource_type == BROKER:
                entries = describe_broker_configs(broker, per_broker=res.resource_name != "")
            else:
                entries = describe_loggers()
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


class ConfigChangeRefused(Exception):
    """A resource's change refused with ``code`` (Kafka's error for it) and ``message``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def duplicate_keys_problem(res: Any) -> str | None:
    """IncrementalAlterConfigs names each key of a resource once (Kafka: INVALID_REQUEST)."""
    duplicates = [k for k, n in Counter(c.name for c in res.configs).items() if n > 1]
    return f"Error due to duplicate config keys: {duplicates}" if duplicates else None


def requested_topic_overrides(
    res: Any, exists: bool, current: Mapping[str, str], defaults: LogConfig, *, incremental: bool
) -> dict[str, str]:
    """The whole set of overrides topic ``res.resource_name`` would have after ``res`` (a resource
    of AlterConfigs, which replaces the set, or of IncrementalAlterConfigs, which edits it),
    checked on top of the broker's log ``defaults``. ``ConfigChangeRefused`` gives Kafka's error:
    INVALID_REQUEST for a null value in AlterConfigs, UNKNOWN_TOPIC_OR_PARTITION when the topic
    does not exist, INVALID_CONFIG for a bad operation, unknown key or bad value.

    The single broker and the cluster's controller both decide a topic config change here."""
    name = res.resource_name
    if not incremental and any(c.value is None for c in res.configs):
        raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, "Null value not supported for topic configs")
    if not exists:
        raise ConfigChangeRefused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
    try:
        if incremental:
            effective = LogConfig.from_properties(current, defaults).to_properties()
            updated = edit_incrementally(dict(current), res.configs, effective)
        else:
            updated = {c.name: c.value for c in res.configs if c.value is not None}
        check_topic_overrides(updated, defaults)
    except ValueError as exc:
        raise ConfigChangeRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return updated


def check_topic_overrides(overrides: Mapping[str, str | None], defaults: LogConfig) -> LogConfig:
    """The config ``overrides`` give a topic on top of ``defaults``; ValueError (naming the key)
    when a key is unknown or a value invalid. CreateTopics and both alter calls check here."""
    return LogConfig.from_properties(overrides, defaults)


def _apply_topic(broker: Broker, res: Any, validate_only: bool, incremental: bool) -> tuple[int, str | None]:
    name = res.resource_name
    exists = broker.logs.topic(name) is not None
    try:
        updated = requested_topic_overrides(
            res,
            exists,
            broker.logs.topic_overrides(name) if exists else {},
            broker.logs.manager.default_config,
            incremental=incremental,
        )
    except ConfigChangeRefused as refused:
        return refused.code, refused.message
    if not validate_only:
        broker.logs.set_topic_overrides(name, updated)
        log.info("topic %s configs are now %s", name, updated)
    return ErrorCode.NONE, None


def _alter_broker(
    broker: Broker, res: Any, validate_only: bool, incremental: bool
) -> tuple[int, str | None]:
    """Dynamic broker configs: the resource name "" is the cluster-wide default level, this
    broker's id its own level; AlterConfigs replaces the level's set, IncrementalAlterConfigs
    edits it."""
    problem = _broker_name_error(broker, res.resource_name)
    if problem:
        return ErrorCode.INVALID_REQUEST, problem
    per_broker = res.resource_name != ""
    if res.resource_type == BROKER_LOGGER:
        names = ", ".join(c.name for c in res.configs)
        return ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({names})"
    try:
        if incremental:
            current = level_values(broker.config, per_broker)
            known = [c.name for c in res.configs if c.name in BROKER_KEYS]
            defaults = {name: render(broker.config.get(name)) or "" for name in known}
            values = edit_incrementally(current, res.configs, defaults, BROKER_KEYS.get)
        else:
            if any(c.value is None for c in res.configs):
                return ErrorCode.INVALID_REQUEST, "Null value not supported for broker configs"
            values = {c.name: c.value for c in res.configs if c.value is not None}
        update_dynamic(broker, per_broker, values, validate_only)
    except DynamicConfigError as exc:
        return ErrorCode.INVALID_REQUEST, str(exc)
    except ValueError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    return ErrorCode.NONE, None


def alter_configs(
    broker: Broker, ctx: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    responses = []
    code: int
    message: str | None
    for res in request.resources:
        if res.resource_type == TOPIC:
            code, message = _apply_topic(broker, res, request.validate_only, incremental=False)
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            code, message = _alter_broker(broker, res, request.validate_only, incremental=False)
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


def _topic_key_spec(name: str) -> Any:
    return BROKER_KEYS.get(TOPIC_TO_BROKER_KEY.get(name, ""))


def edit_incrementally(
    current: dict[str, str], configs: list[Any], defaults: dict[str, str], spec_of: Any = _topic_key_spec
) -> dict[str, str]:
    """Apply SET/DELETE/APPEND/SUBTRACT to a copy of ``current``; ValueError names a bad op.
    ``spec_of(name)`` is the key's ConfigKey (list-valued keys take APPEND/SUBTRACT)."""
    result = dict(current)
    for c in configs:
        if c.config_operation == SET:
            if c.value is None:
                raise ValueError(f"Null value not supported for SET of {c.name}")
            result[c.name] = c.value
        elif c.config_operation == DELETE:
            result.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            spec = spec_of(c.name)
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
        duplicates = duplicate_keys_problem(res)
        if duplicates:
            code, message = ErrorCode.INVALID_REQUEST, duplicates
        elif res.resource_type == TOPIC:
            code, message = _apply_topic(broker, res, request.validate_only, incremental=True)
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            code, message = _alter_broker(broker, res, request.validate_only, incremental=True)
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


#: Resource types whose changes a broker of a cluster forwards to the active controller.
FORWARDED_TYPES = frozenset({TOPIC, BROKER})


def _forwarding(local: Any, response_cls: Any) -> Any:
    """Serve an alter call on a broker of a cluster (Kafka's ForwardingManager and
    ConfigAdminManager): the resources of ``FORWARDED_TYPES`` go to the active controller, which
    writes their changes to the metadata log; the others (this broker's own dynamic configs and
    loggers) are handled here by ``local``. The answers keep the request's order."""

    async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
        from reference_broker.cluster.broker_lifecycle import forward_to_controller

        forwarded = [r for r in request.resources if r.resource_type in FORWARDED_TYPES]
        kept = [r for r in request.resources if r.resource_type not in FORWARDED_TYPES]
        local_answers = iter(
            local(broker, ctx, type(request)(resources=kept, validate_only=request.validate_only)).responses
            if kept
            else []
        )
        controller_answers: Any = iter([])
        if forwarded:
            sub = type(request)(resources=forwarded, validate_only=request.validate_only)
            answer = await forward_to_controller(
                broker, ctx, sub, lambda code: _alter_error(response_cls)(sub, ctx.api_version, code)
            )
            controller_answers = iter(answer.responses)
        return response_cls(
            responses=[
                next(controller_answers if r.resource_type in FORWARDED_TYPES else local_answers)
                for r in request.resources
            ]
        )

    return handle


def install(registry: HandlerRegistry) -> None:
    registry.register(DESCRIBE_CONFIGS, describe_configs, error_response=describe_configs_error)
    alter: Any = alter_configs
    incremental: Any = incremental_alter_configs
    if registry.broker is not None and quorum_configured(registry.broker.config.settings):
        alter = _forwarding(alter_configs, AlterConfigsResponse)
        incremental = _forwarding(incremental_alter_configs, IncrementalAlterConfigsResponse)
    registry.register(ALTER_CONFIGS, alter, error_response=_alter_error(AlterConfigsResponse))
    registry.register(
        INCREMENTAL_ALTER_CONFIGS,
        incremental,
        error_response=_alter_error(IncrementalAlterConfigsResponse),
    )
