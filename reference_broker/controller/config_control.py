"""Dynamic configs on the active controller: Kafka's ConfigurationControlManager.

AlterConfigs (33) and IncrementalAlterConfigs (44) of TOPIC and BROKER resources, which every
broker of a cluster forwards here, are decided against the controller's latest image by the same
code the single broker uses (``handlers.configs.requested_topic_overrides`` for topics,
``edit_incrementally`` and ``dynamic_config.check_dynamic`` for the cluster default "" and a
broker's own level), and become ``ConfigRecord``s, one per key whose value changes (a null value
deletes the key). Every broker applies them from the metadata log to its partition
logs, and a node that restarts gets them back from the log or a snapshot.

Invariants: a resource's change is all or nothing (one refused key refuses the resource);
``validate_only`` answers as the change would be answered and writes nothing; the resources of
one request are decided in order, each on the image the earlier ones left.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from reference_broker.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, MetadataImage
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import AlterConfigsResponse, IncrementalAlterConfigsResponse

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController


def config_records(
    resource_type: int, name: str, current: Mapping[str, str], updated: Mapping[str, str]
) -> list[Any]:
    """The ConfigRecords turning ``current`` into ``updated`` (value None: the key is deleted)."""
    return [
        rec.ConfigRecord(resource_type=resource_type, resource_name=name, name=key, value=updated.get(key))
        for key in sorted(set(current) | set(updated))
        if current.get(key) != updated.get(key)
    ]


class ConfigurationControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller

    def alter_configs(self, request: Any, *, incremental: bool) -> ControllerResult:
        """AlterConfigs (``incremental`` False: each resource's overrides replaced by those
        given) or IncrementalAlterConfigs (SET/DELETE/APPEND/SUBTRACT per key)."""
        from reference_broker.handlers.configs import ConfigChangeRefused

        response_cls: Any = IncrementalAlterConfigsResponse if incremental else AlterConfigsResponse
        image = self.controller.image
        records: list[Any] = []
        responses: list[Any] = []
        for res in request.resources:
            code: int = ErrorCode.NONE
            message: str | None = None
            try:
                changes = self._changes(image, res, incremental)
            except ConfigChangeRefused as refused:
                code, message = refused.code, refused.message
            else:
                if changes and not request.validate_only:
                    records += changes
                    image = self.controller.preview(records)
            responses.append(
                response_cls.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        return ControllerResult(records, response_cls(responses=responses))

    def _changes(self, image: MetadataImage, res: Any, incremental: bool) -> list[Any]:
        from reference_broker.handlers.configs import (
            ConfigChangeRefused,
            duplicate_keys_problem,
            requested_topic_overrides,
        )

        if incremental:
            problem = duplicate_keys_problem(res)
            if problem:
                raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, problem)
        if res.resource_type == CONFIG_BROKER:
            return self._broker_changes(image, res, incremental)
        if res.resource_type != CONFIG_TOPIC:
            raise ConfigChangeRefused(
                ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
            )
        name = res.resource_name
        current = dict(image.topic_config(name))
        updated = requested_topic_overrides(
            res,
            image.topic(name) is not None,
            current,
            self.controller.settings.log_defaults,
            incremental=incremental,
        )
        return config_records(CONFIG_TOPIC, name, current, updated)

    def _broker_changes(self, image: MetadataImage, res: Any, incremental: bool) -> list[Any]:
        """Dynamic broker configs: resource name "" is the cluster-wide default, a broker id that
        broker's own level; checked as the single broker checks its own (``dynamic_config``)."""
        from reference_broker.config import BROKER_KEYS, BrokerConfig, render
        from reference_broker.dynamic_config import DynamicConfigError, check_dynamic
        from reference_broker.handlers.configs import ConfigChangeRefused, edit_incrementally

        name = res.resource_name
        if name != "" and not (name.isascii() and name.isdigit()):
            raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, f"Invalid broker name {name}")
        current = dict(image.configs.get((CONFIG_BROKER, name), {}))
        static = self.controller.settings.static_config or BrokerConfig(data_dir=Path("."))
        try:
            if incremental:
                known = [c.name for c in res.configs if c.name in BROKER_KEYS]
                defaults = {key: render(static.get(key)) or "" for key in known}
                updated = edit_incrementally(current, res.configs, defaults, BROKER_KEYS.get)
            else:
                if any(c.value is None for c in res.configs):
                    raise ConfigChangeRefused(
                        ErrorCode.INVALID_REQUEST, "Null value not supported for broker configs"
                    )
                updated = {c.name: c.value for c in res.configs}
            check_dynamic(static, name != "", updated)
        except DynamicConfigError as exc:
            raise ConfigChangeRefused(ErrorCode.INVALID_REQUEST, str(exc)) from None
        except ValueError as exc:
            raise ConfigChangeRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return config_records(CONFIG_BROKER, name, current, updated)
