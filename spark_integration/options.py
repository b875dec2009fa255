"""The options of Spark's Kafka source and sink, parsed into the SDK's settings.

Spark lower-cases option names (``CaseInsensitiveDict``), so every lookup here uses lower-case
keys. ``kafka.``-prefixed options are Kafka client properties: ``kafka.fetch.max.bytes`` becomes
the SDK's ``fetch_max_bytes``; a property the SDK client does not know is refused up front, on
the driver, rather than failing later in every task.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sdk.client.cluster import TopicPartition

#: startingOffsets/endingOffsets JSON's special offsets, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

#: Settings the integration itself decides: a user must not override them.
_RESERVED = {"group_id", "enable_auto_commit", "auto_offset_reset", "key_deserializer", "value_deserializer",
             "transactional_id", "isolation_level", "bootstrap_servers"}


class OptionError(ValueError):
    """A missing, unknown or malformed data source option."""


def client_settings(options: Mapping[str, str], client: Any) -> dict[str, Any]:
    """``kafka.*`` options as keyword arguments of ``client`` (``sdk.Consumer`` or ``sdk.Producer``)."""
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    accepted = inspect.signature(client.__init__).parameters
    settings: dict[str, Any] = {"bootstrap_servers": servers}
    for name, raw in options.items():
        if not name.startswith("kafka.") or name == "kafka.bootstrap.servers":
            continue
        setting = name[len("kafka."):].replace(".", "_")
        if setting in _RESERVED:
            raise OptionError(f"option {name!r} is set by the Spark integration and cannot be given")
        if setting not in accepted:
            raise OptionError(f"option {name!r}: {client.__name__} has no setting {setting!r}")
        settings[setting] = _typed(raw, accepted[setting].default)
    return settings


def _typed(raw: str, default: Any) -> Any:
    """An option string converted to the type of the setting's default."""
    if isinstance(default, bool):
        return raw.strip().lower() == "true"
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, not {raw!r}")
    return value


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or explicit offsets per partition (EARLIEST/LATEST allowed)."""

    default: int
    explicit: dict[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None, name: str, default: int, allow_earliest: bool = True) -> OffsetSpec:
        if raw is None:
            return cls(default)
        text = raw.strip()
        if text.lower() == "earliest":
            if not allow_earliest:
                raise OptionError(f"option {name!r} cannot be 'earliest'")
            return cls(EARLIEST)
        if text.lower() == "latest":
            return cls(LATEST)
        try:
            parsed = json.loads(text)
            explicit = {
                TopicPartition(topic, int(partition)): int(offset)
                for topic, partitions in parsed.items()
                for partition, offset in partitions.items()
            }
        except (ValueError, AttributeError, TypeError):
            raise OptionError(
                f"option {name!r} must be earliest, latest or JSON like "
                f"{{\"topic\":{{\"0\":5}}}}, not {raw!r}"
            ) from None
        for tp, offset in explicit.items():
            if offset < EARLIEST or (offset == EARLIEST and not allow_earliest):
                raise OptionError(f"option {name!r}: bad offset {offset} for {tp.topic}-{tp.partition}")
        return cls(default, explicit)


@dataclass(frozen=True)
class ReadOptions:
    """What a read needs: client settings, which partitions, and where to start and stop."""

    consumer_settings: dict[str, Any]
    isolation_level: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_s: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        from sdk.consumer.consumer import Consumer

        chosen = [name for name in ("subscribe", "subscribepattern", "assign") if options.get(name)]
        if len(chosen) != 1:
            raise OptionError(
                "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is needed")
        topics: tuple[str, ...] = ()
        pattern = None
        assigned: tuple[TopicPartition, ...] = ()
        if chosen[0] == "subscribe":
            topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
            if not topics:
                raise OptionError("option 'subscribe' names no topic")
        elif chosen[0] == "subscribepattern":
            pattern = options["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option 'subscribePattern' is not a regular expression: {exc}") from None
        else:
            try:
                parsed = json.loads(options["assign"])
                assigned = tuple(
                    TopicPartition(topic, int(p)) for topic, partitions in parsed.items() for p in partitions
                )
            except (ValueError, AttributeError, TypeError):
                raise OptionError(
                    f"option 'assign' must be JSON like {{\"topic\":[0,1]}}, not {options['assign']!r}"
                ) from None
        isolation = options.get("isolation.level") or options.get("kafka.isolation.level") or "read_committed"
        if isolation not in ("read_committed", "read_uncommitted"):
            raise OptionError(
                f"option 'isolation.level' must be read_committed or read_uncommitted, not {isolation!r}")
        client_options = {k: v for k, v in options.items() if k != "kafka.isolation.level"}
        settings = client_settings(client_options, Consumer)
        if streaming and options.get("endingoffsets"):
            raise OptionError("option 'endingOffsets' is for batch queries only")
        poll_timeout = options.get("kafkaconsumer.polltimeoutms")
        return cls(
            consumer_settings=settings,
            isolation_level=isolation,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=OffsetSpec.parse(options.get("startingoffsets"), "startingOffsets",
                                      LATEST if streaming else EARLIEST),
            ending=OffsetSpec.parse(options.get("endingoffsets"), "endingOffsets", LATEST,
                                    allow_earliest=False),
            fail_on_data_loss=_flag(options, "failondataloss", True),
            max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
            max_records_per_partition=_positive_int(options, "maxrecordsperpartition"),
            poll_timeout_s=float(poll_timeout) / 1000 if poll_timeout else 60.0,
        )
