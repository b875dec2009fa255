"""Per-log configuration with Kafka's names, defaults and validation rules.

``LogConfig`` holds the settings that govern one partition log. Field defaults are Kafka's broker
defaults; :meth:`LogConfig.from_properties` reads the topic-level names a client sends in
CreateTopics / AlterConfigs (``segment.bytes``, ``retention.ms``...) and
:meth:`LogConfig.from_broker_properties` the broker-level ``log.*`` names of ``server.properties``.
Invalid values raise ``ValueError("Invalid value X for configuration K: ...")`` naming the key, as
Kafka's ``ConfigException`` does, so a handler can map it to INVALID_CONFIG with a useful message.

``cleanup.policy`` ``delete`` is applied by retention (``PartitionLog.apply_retention``) and
``compact`` by the log cleaner (``reference_broker.log.cleaner``: Kafka's LogCleaner semantics,
driven by ``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms`` and
``delete.retention.ms``); ``compact,delete`` gets both, and a compacted log requires keys. The
files of segments removed from a log are deleted after ``file.delete.delay.ms`` (``_deletion``). Other
valid Kafka topic configs (``compression.type``, ``min.insync.replicas``...) are accepted and kept
in :attr:`LogConfig.extra` so DescribeConfigs can echo them, but the log does not act on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reference_broker.log.offset_map import ENTRY_BYTES

__all__ = [
    "CLEANER_DEDUPE_BUFFER_SIZE",
    "INTERNAL_SEGMENT_BYTES",
    "LONG_MAX",
    "SEGMENT_BYTES_MIN",
    "LogConfig",
    "segment_size_configs",
]

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
_LONG_MIN = -(1 << 63)
_INT_MIN = -(1 << 31)
_DAY_MS = 24 * 60 * 60 * 1000
#: Kafka's default ``log.cleaner.dedupe.buffer.size``: the key maps of all cleaner threads.
CLEANER_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
#: Kafka 4's floor for ``segment.bytes`` / ``log.segment.bytes`` (KIP-1030).
SEGMENT_BYTES_MIN = 1024 * 1024
#: Kafka's internal topic config (``LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG``): a segment size for
#: tests, below ``SEGMENT_BYTES_MIN``, that wins over ``segment.bytes``. DescribeConfigs never shows
#: it (Kafka lists only non-internal names).
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
#: The smallest segment the log can hold: one record batch of a legacy v0 record's overhead, the
#: floor ``segment.bytes`` had before Kafka 4.
_SEGMENT_BYTES_FLOOR = 14

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")

def _parse_int(key: str, raw: Any, lo: int, hi: int) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: expected an integer")
    if isinstance(raw, int):
        value = raw
    else:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ValueError(
                f"Invalid value {raw!r} for configuration {key}: expected an integer"
            ) from None
    if value < lo or value > hi:
        bound = f"at least {lo}" if hi in (INT_MAX, LONG_MAX) else f"in [{lo}, {hi}]"
        raise ValueError(f"Invalid value {value} for configuration {key}: Value must be {bound}")
    return value


def _int(lo: int) -> Callable[[str, Any], int]:
    return lambda key, raw: _parse_int(key, raw, lo, INT_MAX)


def _long(lo: int) -> Callable[[str, Any], int]:
    return lambda key, raw: _parse_int(key, raw, lo, LONG_MAX)


def _ratio(key: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: expected a double")
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"Invalid value {raw!r} for configuration {key}: expected a double") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"Invalid value {value} for configuration {key}: Value must be in [0, 1]")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        value = str(raw).strip()
        for option in options:
            if value.lower() == option.lower():
                return option
        raise ValueError(
            f"Invalid value {raw!r} for configuration {key}: String must be one of: "
            + ", ".join(options)
        )

    return parse


def _policy(key: str, raw: Any) -> tuple[str, ...]:
    items = [part.strip().lower() for part in str(raw).split(",") if part.strip()]
    if not items or any(item not in CLEANUP_POLICIES for item in items):
        raise ValueError(
            f"Invalid value {raw!r} for configuration {key}: each entry must be one of"
            " delete, compact"
        )
    return tuple(dict.fromkeys(items))


def _boolean(key: str, raw: Any) -> str:
    value = str(raw).strip().lower()
    if isinstance(raw, bool) or value in ("true", "false"):
        return value
    raise ValueError(
        f"Invalid value {raw!r} for configuration {key}: Expected value to be either true or false"
    )


def _gzip_level(key: str, raw: Any) -> int:
    value = _parse_int(key, raw, _INT_MIN, INT_MAX)
    if value != -1 and not 1 <= value <= 9:
        raise ValueError(f"Invalid value {value} for configuration {key}: Value must be -1 or in [1, 9]")
    return value


def _no_tiered_storage(key: str, value: str) -> str:
    """``remote.storage.enable=true`` is refused, with Kafka's message for a broker whose
    ``remote.log.storage.system.enable`` is false (this broker has no tiered storage)."""
    if value == "true":
        raise ValueError("Tiered Storage functionality is disabled in the broker. Topic cannot be"
                         " configured with remote log storage.")
    return value


def _text(key: str, raw: Any) -> str:
    return str(raw)


#: Kafka 4.1 topic configs that are valid but not acted on by this log (kept in ``extra``), with
#: Kafka's validators (``message.format.version`` and ``message.downconversion.enable`` are gone
#: from Kafka 4: unknown names now).
_PASSTHROUGH_TOPIC_KEYS: dict[str, Callable[[str, Any], Any]] = {
    "compression.type": lambda k, v: _choice(COMPRESSION_TYPES)(k, v),
    "compression.gzip.level": _gzip_level,
    "compression.lz4.level": lambda k, v: _parse_int(k, v, 1, 17),
    "compression.zstd.level": lambda k, v: _parse_int(k, v, -131072, 22),
    "follower.replication.throttled.replicas": _text,
    "leader.replication.throttled.replicas": _text,
    "local.retention.bytes": lambda k, v: _long(-2)(k, v),
    "local.retention.ms": lambda k, v: _long(-2)(k, v),
    "min.insync.replicas": lambda k, v: _int(1)(k, v),
    "preallocate": _boolean,
    "remote.storage.enable": lambda k, v: _no_tiered_storage(k, _boolean(k, v)),
    "remote.log.copy.disable": _boolean,
    "remote.log.delete.on.disable": _boolean,
    "unclean.leader.election.enable": _boolean,
}


#: topic-level name -> (field, parser)
_TOPIC_KEYS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "segment.bytes": ("segment_bytes", _int(SEGMENT_BYTES_MIN)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _long(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(4)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", lambda k, v: _parse_int(k, v, _LONG_MIN, LONG_MAX)),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "flush.messages": ("flush_interval_messages", _long(1)),
    "flush.ms": ("flush_interval_ms", _long(0)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _long(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _long(0)),
    "cleanup.policy": ("cleanup_policy", _policy),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
}

#: broker-level (server.properties) name -> topic-level name
_BROKER_KEYS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
}
#: broker-level names given in coarser units: name -> (topic name, multiplier); the finer wins.
_BROKER_UNIT_KEYS = {
    "log.roll.hours": ("segment.ms", 3_600_000),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.retention.hours": ("retention.ms", 3_600_000),
}


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (Kafka semantics; defaults are Kafka's).

    Times are milliseconds, sizes bytes. ``-1`` for ``retention_ms``/``retention_bytes`` (any
    negative value for bytes) means unlimited. ``flush_interval_*`` default to "never": the log
    relies on the OS page cache, exactly like Kafka (see ``partition_log`` on durability).
    ``producer_id_expiration_ms`` is Kafka's broker-level ``producer.id.expiration.ms``.
    ``cleaner_dedupe_buffer_bytes_per_thread`` and ``cleaner_dedupe_buffer_load_factor`` size the
    cleaner's key map: Kafka's broker-level ``log.cleaner.dedupe.buffer.size`` divided between the
    ``log.cleaner.threads`` (at most 2 GiB - 1 a thread, as Kafka's) and
    ``log.cleaner.io.buffer.load.factor``.
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * _DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    index_interval_bytes: int = 4096
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    #: how long a segment removed from the log keeps its files, renamed ``.deleted`` (``_deletion``)
    file_delete_delay_ms: int = 60_000
    producer_id_expiration_ms: int = _DAY_MS
    cleaner_dedupe_buffer_bytes_per_thread: int = CLEANER_DEDUPE_BUFFER_SIZE
    cleaner_dedupe_buffer_load_factor: float = 0.9
    internal_segment_bytes: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    # -- derived -------------------------------------------------------------------------------

    @property
    def segment_size(self) -> int:
        """The size at which a segment rolls: ``internal.segment.bytes`` when set (tests), else
        ``segment.bytes`` (Kafka's ``LogConfig.segmentSize``)."""
        return self.internal_segment_bytes if self.internal_segment_bytes is not None else self.segment_bytes

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (``LogAppendTime``)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        """Whether retention may delete segments (``cleanup.policy`` contains ``delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def compacted(self) -> bool:
        """``cleanup.policy`` contains ``compact``: appends need keys and the cleaner compacts the
        log (so batches may be followed by offset gaps)."""
        return "compact" in self.cleanup_policy

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_properties(
        cls, props: Mapping[str, Any], base: LogConfig | None = None
    ) -> LogConfig:
        """Build a config from Kafka topic-level names, on top of ``base`` (default: Kafka's).

        Unknown names raise ``ValueError("Unknown topic config name: ...")`` as Kafka does;
        ``None`` values mean "remove the override" (the value from ``base`` is kept).
        """
        base = base or cls()
        changes: dict[str, Any] = {}
        extra = dict(base.extra)
        for key, raw in props.items():
            if raw is None:
                continue
            if key == "message.timestamp.difference.max.ms":  # deprecated alias of both
                value = _long(0)(key, raw)
                changes["message_timestamp_before_max_ms"] = value
                changes["message_timestamp_after_max_ms"] = value
            elif key in _TOPIC_KEYS:
                name, parse = _TOPIC_KEYS[key]
                changes[name] = parse(key, raw)
            elif key == INTERNAL_SEGMENT_BYTES:
                changes["internal_segment_bytes"] = _int(_SEGMENT_BYTES_FLOOR)(key, raw)
            elif key in _PASSTHROUGH_TOPIC_KEYS:
                _PASSTHROUGH_TOPIC_KEYS[key](key, raw)
                extra[key] = str(raw)
            else:
                raise ValueError(f"Unknown topic config name: {key}")
        changes["extra"] = extra
        return dataclasses.replace(base, **changes)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, Any]) -> LogConfig:
        """Defaults for every log from broker ``server.properties`` names (``log.segment.bytes``...).

        Names that are not log settings are ignored (the broker config holds many others).
        ``log.retention.ms`` wins over ``.minutes`` which wins over ``.hours``, as in Kafka.
        """
        topic_props: dict[str, Any] = {}
        for key in ("log.retention.hours", "log.retention.minutes", "log.roll.hours",
                    "log.roll.jitter.hours"):
            if props.get(key) is not None:
                topic_key, unit = _BROKER_UNIT_KEYS[key]
                topic_props[topic_key] = _long(0)(key, props[key]) * unit
        for key, topic_key in _BROKER_KEYS.items():
            if props.get(key) is not None:
                _, parse = _TOPIC_KEYS[topic_key]
                parse(key, props[key])  # report errors under the broker-level name
                topic_props[topic_key] = props[key]
        for key in _BROKER_PASSTHROUGH_KEYS:  # topic defaults the log keeps in ``extra``
            if props.get(key) is not None:
                topic_props[key] = props[key]
        config = cls.from_properties(topic_props)
        if props.get("producer.id.expiration.ms") is not None:
            value = _int(1)("producer.id.expiration.ms", props["producer.id.expiration.ms"])
            config = dataclasses.replace(config, producer_id_expiration_ms=value)
        return _with_cleaner_settings(config, props)

    def to_properties(self) -> dict[str, str]:
        """Topic-level names and values, as DescribeConfigs reports them."""
        out = {key: _render(getattr(self, name)) for key, (name, _) in _TOPIC_KEYS.items()}
        if self.internal_segment_bytes is not None:
            out[INTERNAL_SEGMENT_BYTES] = str(self.internal_segment_bytes)
        out.update(self.extra)
        return out


#: Broker settings that are the default of a topic setting of the same name kept in ``extra``
#: (``compression.type``: the codec batches are rewritten to, see ``_recompression``).
_BROKER_PASSTHROUGH_KEYS = ("compression.type",)


def _with_cleaner_settings(config: LogConfig, props: Mapping[str, Any]) -> LogConfig:
    """``config`` with the key map's size from the broker's cleaner keys (see :class:`LogConfig`)."""
    changes: dict[str, Any] = {}
    size_key, threads_key = "log.cleaner.dedupe.buffer.size", "log.cleaner.threads"
    if props.get(size_key) is not None or props.get(threads_key) is not None:
        size = CLEANER_DEDUPE_BUFFER_SIZE
        if props.get(size_key) is not None:
            size = _long(2 * ENTRY_BYTES)(size_key, props[size_key])
        threads = _int(0)(threads_key, props[threads_key]) if props.get(threads_key) is not None else 1
        changes["cleaner_dedupe_buffer_bytes_per_thread"] = min(size // max(threads, 1), INT_MAX)
    factor_key = "log.cleaner.io.buffer.load.factor"
    if props.get(factor_key) is not None:
        factor = _ratio(factor_key, props[factor_key])
        if factor <= 0:
            raise ValueError(f"Invalid value {factor} for configuration {factor_key}: Value must be"
                             " above 0")
        changes["cleaner_dedupe_buffer_load_factor"] = factor
    return dataclasses.replace(config, **changes) if changes else config


def segment_size_configs(size: int) -> dict[str, str]:
    """Topic configs for segments of ``size`` bytes: ``segment.bytes``, or the internal override
    below Kafka 4's floor (``offsets.topic.segment.bytes`` and its transaction twin only ask for at
    least 1 byte, and the coordinators' topics must exist whatever they were given)."""
    if size >= SEGMENT_BYTES_MIN:
        return {"segment.bytes": str(size)}
    return {INTERNAL_SEGMENT_BYTES: str(max(size, _SEGMENT_BYTES_FLOOR))}


def _render(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
