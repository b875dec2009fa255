"""Dynamic broker configs: Kafka's broker settings changed at run time by the admin APIs.

Kafka (DynamicBrokerConfig) lets IncrementalAlterConfigs and AlterConfigs change a fixed set of
broker settings without a restart, at two levels: one broker (resource name = its id) and the
cluster-wide default (resource name ""). The broker's own value wins over the cluster default,
which wins over the static config; DescribeConfigs reports them as DYNAMIC_BROKER_CONFIG and
DYNAMIC_DEFAULT_BROKER_CONFIG. Kafka keeps them in its metadata log; here they are kept in
:data:`DYNAMIC_CONFIG_FILE` in the data dir (replaced atomically) and loaded when the config is
built, so a restart keeps them.

Invariants:

* only :data:`DYNAMIC_KEYS` are accepted: the keys of Kafka's reconfigurable sets this broker has
  and applies live. Log defaults (``log.retention.ms``, ``message.max.bytes``, ...) are pushed to
  every partition log at once (topic overrides still win); the others are read from the config
  where they are used. Any other key is refused with Kafka's INVALID_REQUEST "Cannot update these
  configs dynamically";
* the stored values are the strings the client sent, checked with the key's own parser; a stored
  entry that is no longer accepted is logged and left out at load, as Kafka does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reference_broker.config import (
    BROKER_KEYS,
    TOPIC_TO_BROKER_KEY,
    BrokerConfig,
    ConfigError,
    render,
)
from reference_broker.log._files import atomic_write

if TYPE_CHECKING:
    from reference_broker.broker import Broker

log = logging.getLogger("reference_broker.dynamic_config")

DYNAMIC_CONFIG_FILE = "dynamic-broker-configs.json"

#: Broker-level defaults of topic configs (Kafka's DynamicLogConfig), applied to every log.
LOG_DEFAULT_KEYS = frozenset(TOPIC_TO_BROKER_KEY.values()) | {"producer.id.expiration.ms"}
#: Kafka's reconfigurable keys that change nothing here beyond what is described: thread pools
#: (one event loop serves everything) and the cleaner's thread count (one cleaner task).
ACCEPTED_KEYS = frozenset({"log.cleaner.threads", "num.io.threads", "num.network.threads"})
DYNAMIC_KEYS = LOG_DEFAULT_KEYS | ACCEPTED_KEYS


class DynamicConfigError(ValueError):
    """An update Kafka refuses with INVALID_REQUEST; the message is Kafka's."""


def _kafka_set(names: list[str]) -> str:
    return f"Set({', '.join(names)})"


def parse_dynamic(values: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of one level's configs; DynamicConfigError names what Kafka would refuse."""
    refused = [name for name in values if name not in DYNAMIC_KEYS]
    if refused:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {_kafka_set(refused)}")
    try:
        return {name: BROKER_KEYS[name].parse(value) for name, value in values.items()}
    except ConfigError as exc:
        raise DynamicConfigError(f"Invalid dynamic configuration: {exc}") from None


def level_values(config: BrokerConfig, per_broker: bool) -> dict[str, str]:
    """One level's dynamic configs as strings (what IncrementalAlterConfigs edits)."""
    layer = config.dynamic_broker if per_broker else config.dynamic_default
    return {name: render(value) or "" for name, value in layer.items()}


def check_dynamic(config: BrokerConfig, per_broker: bool, values: Mapping[str, str]) -> dict[str, Any]:
    """The typed values of one level's new configs, checked as Kafka checks a dynamic update:
    DynamicConfigError names a key that cannot change dynamically or a value that does not parse
    or gives the logs an invalid config."""
    typed = parse_dynamic(values)
    trial = BrokerConfig(
        data_dir=config.data_dir,
        settings=config.settings,
        dynamic_broker=typed if per_broker else config.dynamic_broker,
        dynamic_default=config.dynamic_default if per_broker else typed,
    )
    try:
        trial.log_config()
    except ValueError as exc:
        raise DynamicConfigError(f"Invalid dynamic configuration: {exc}") from None
    return typed


def update_dynamic(broker: Broker, per_broker: bool, values: Mapping[str, str], validate_only: bool) -> None:
    """Replace one level's dynamic configs with ``values``: checked, then (unless
    ``validate_only``) persisted, put in the broker's config and applied to every log."""
    typed = check_dynamic(broker.config, per_broker, values)
    if validate_only:
        return
    _save(broker.config, per_broker, values)
    install_dynamic(broker.config, broker.logs.manager, per_broker, typed)
    log.info("dynamic %s configs are now %s", "broker" if per_broker else "default", dict(values))


def install_dynamic(
    config: BrokerConfig, log_manager: Any, per_broker: bool, typed: Mapping[str, Any]
) -> None:
    """Make ``typed`` one level's dynamic configs of ``config``; the logs get the new log
    defaults when a log key changed (topic overrides still win)."""
    old_layer = config.dynamic_broker if per_broker else config.dynamic_default
    log_changed = any(
        old_layer.get(key) != typed.get(key) for key in (set(old_layer) | set(typed)) & LOG_DEFAULT_KEYS
    )
    if per_broker:
        config.dynamic_broker = dict(typed)
    else:
        config.dynamic_default = dict(typed)
    if log_changed:
        log_manager.reconfigure_defaults(config.log_config())


def install_from_metadata(
    config: BrokerConfig, log_manager: Any, per_broker: bool, values: Mapping[str, str]
) -> None:
    """A cluster's broker takes one level's dynamic configs from its metadata image (the
    controller checked them; an entry this broker does not accept is logged and left out)."""
    level = "broker" if per_broker else "default"
    install_dynamic(config, log_manager, per_broker, _accepted(dict(values), level))
    log.info("dynamic %s configs from the metadata log: %s", level, dict(values))


def _read_file(config: BrokerConfig) -> dict[str, Any]:
    path = config.data_dir / DYNAMIC_CONFIG_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"cluster_default": {}, "brokers": {}}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read dynamic broker configs from {path}: {exc}") from None
    if not isinstance(stored, dict):
        raise ConfigError(f"cannot read dynamic broker configs from {path}: not a JSON object")
    return stored


def _save(config: BrokerConfig, per_broker: bool, values: Mapping[str, str]) -> None:
    stored = _read_file(config)
    if per_broker:
        stored.setdefault("brokers", {})[str(config.node_id)] = dict(values)
    else:
        stored["cluster_default"] = dict(values)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    data = json.dumps(stored, indent=2, sort_keys=True).encode()
    atomic_write(config.data_dir / DYNAMIC_CONFIG_FILE, data)


def _accepted(values: Any, level: str) -> dict[str, Any]:
    """The stored entries that still parse; the others are logged and left out (Kafka's rule)."""
    typed: dict[str, Any] = {}
    if not isinstance(values, dict):
        log.error("dynamic %s configs are not a JSON object; ignored", level)
        return typed
    for name, value in values.items():
        try:
            typed.update(parse_dynamic({name: str(value)}))
        except DynamicConfigError as exc:
            log.error("dynamic %s config %s ignored: %s", level, name, exc)
    return typed


def load_dynamic_configs(config: BrokerConfig) -> None:
    """Put the persisted dynamic configs (this node's and the cluster default) into ``config``."""
    stored = _read_file(config)
    config.dynamic_default = _accepted(stored.get("cluster_default", {}), "default")
    brokers = stored.get("brokers", {})
    own = brokers.get(str(config.node_id), {}) if isinstance(brokers, dict) else {}
    config.dynamic_broker = _accepted(own, f"broker {config.node_id}")
