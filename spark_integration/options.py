"""The options of Spark's Kafka source and sink, parsed into the SDK's settings.

Spark lower-cases option names (``CaseInsensitiveDict``), so every lookup here uses lower-case
keys. ``kafka.``-prefixed options are Kafka client properties: ``kafka.fetch.max.bytes`` becomes
the SDK's ``fetch_max_bytes``; a property the SDK client does not know is refused up front, on
the driver, rather than failing later in every task.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sdk.client.cluster import TopicPartition
from spark_integration.security import security_settings

#: startingOffsets/endingOffsets JSON's special offsets, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

#: Settings the integration itself decides: a user must not override them.
_RESERVED = {"group_id", "enable_auto_commit", "auto_offset_reset", "key_deserializer", "value_deserializer",
             "transactional_id", "isolation_level", "bootstrap_servers"}


class OptionError(ValueError):
    """A missing, unknown or malformed data source option."""


#: Options Spark itself passes to a source or sink beside the user's.
_SPARK_OPTIONS = ("path", "paths", "checkpointLocation")
#: The source's options (Spark's Kafka source's, and ``isolation.level``/``maxRecordsPerPartition``).
SOURCE_OPTIONS = (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition", "groupIdPrefix", "includeHeaders",
    "isolation.level", *_SPARK_OPTIONS,
)
#: The sink's options (``testing.*`` are the tests' failure hooks).
SINK_OPTIONS = (
    "topic", "transactional.id.prefix", "delivery.guarantee", "commit.mode", "marker.topic", "intent.topic",
    "two.phase.intent.wait.ms", "sink.topics.replication.factor", "sink.topics.min.insync.replicas",
    "expired.markers", "testing.failBeforeCommit", "testing.killDriverAtCommit", "testing.slowTask",
    "testing.killDriverAfterIntent", *_SPARK_OPTIONS,
)


def check_names(options: Iterable[str], known: Iterable[str], kind: str) -> None:
    """Refuse an option that is not in ``known`` (``kafka.*`` ones are checked by
    ``client_settings``), naming the nearest valid one: a misspelled option is never ignored."""
    spelled = {name.lower(): name for name in known}
    for name in options:
        if name.lower().startswith("kafka.") or name.lower() in spelled:
            continue
        _unknown(name, spelled, f"unknown {kind} option {name!r}")


def _unknown(name: str, spelled: Mapping[str, str], message: str) -> None:
    nearest = difflib.get_close_matches(name.lower(), list(spelled), n=1, cutoff=0.6)
    valid = ", ".join(sorted(spelled.values()))
    hint = f"; did you mean {spelled[nearest[0]]!r}?" if nearest else f"; valid options: {valid}"
    raise OptionError(message + hint)


def client_settings(options: Mapping[str, str], client: Any) -> dict[str, Any]:
    """``kafka.*`` options as keyword arguments of ``client`` (``sdk.Consumer`` or ``sdk.Producer``)."""
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    accepted = inspect.signature(client.__init__).parameters
    settings: dict[str, Any] = {"bootstrap_servers": servers, **security_settings(options)}
    known = {f"kafka.{name.replace('_', '.')}": f"kafka.{name.replace('_', '.')}" for name in accepted
             if name not in _RESERVED and name != "self"}
    for name, raw in options.items():
        if not name.startswith("kafka.") or name == "kafka.bootstrap.servers":
            continue
        if name.startswith(("kafka.ssl.", "kafka.sasl.jaas.")):
            continue  # read by security_settings
        setting = name[len("kafka."):].replace(".", "_")
        if setting in _RESERVED:
            raise OptionError(f"option {name!r} is set by the Spark integration and cannot be given")
        if setting not in accepted:
            _unknown(name, known, f"option {name!r}: {client.__name__} has no setting {setting!r}")
        settings[setting] = typed(name, raw, accepted[setting])
    return settings


def typed(name: str, raw: str, parameter: inspect.Parameter) -> Any:
    """An option string converted to the setting's type: the default's, or for a setting whose
    default is None (decided by the client) the type its annotation names."""
    default = parameter.default
    if default is not None and default is not inspect.Parameter.empty:
        kinds = {type(default).__name__}
        if isinstance(default, (int, str)) and not isinstance(default, bool):
            kinds |= set(re.findall(r"\b(int|str|float|bool)\b", str(parameter.annotation)))
    else:
        kinds = set(re.findall(r"\b(int|str|float|bool)\b", str(parameter.annotation)))
    text = raw.strip()
    if "bool" in kinds:
        if text.lower() not in ("true", "false"):
            raise OptionError(f"option {name!r} must be true or false, not {raw!r}")
        return text.lower() == "true"
    if "int" in kinds:
        try:
            return int(text)
        except ValueError:
            if "str" not in kinds:
                raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if "float" in kinds:
        try:
            return float(text)
        except ValueError:
            raise OptionError(f"option {name!r} must be a number, not {raw!r}") from None
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
class TimestampSpec:
    """Offsets found by timestamp (Spark's ``startingTimestamp``/``startingOffsetsByTimestamp``
    and their ending twins): the first offset whose timestamp is at least the one given;
    ``default`` for every partition, or ``explicit`` per partition (then every partition must be
    named). ``missing``: what a partition with no such record gets: "error", "latest"."""

    default: int | None
    explicit: dict[TopicPartition, int] = field(default_factory=dict)
    missing: str = "error"

    @classmethod
    def parse(cls, options: Mapping[str, str], which: str, missing: str) -> TimestampSpec | None:
        """``which``: "starting" or "ending"; the all-partitions timestamp wins, as in Spark."""
        every = options.get(f"{which}timestamp")
        if every is not None:
            return cls(_timestamp(every, f"{which}Timestamp"), missing=missing)
        by_partition = options.get(f"{which}offsetsbytimestamp")
        if by_partition is None:
            return None
        name = f"{which}OffsetsByTimestamp"
        try:
            parsed = json.loads(by_partition)
            explicit = {TopicPartition(topic, int(partition)): _timestamp(str(ts), name)
                        for topic, partitions in parsed.items() for partition, ts in partitions.items()}
        except (ValueError, AttributeError, TypeError):
            raise OptionError(f"option {name!r} must be JSON like {{\"topic\":{{\"0\":1700000000000}}}}, "
                              f"not {by_partition!r}") from None
        return cls(None, explicit, missing)


def _timestamp(raw: str, name: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a timestamp in milliseconds, not {raw!r}") from None
    if value < 0:
        raise OptionError(f"option {name!r} must be a timestamp in milliseconds >= 0, not {raw!r}")
    return value


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                      "d": 86_400_000}


def duration_ms(raw: str, name: str) -> int:
    """A Spark duration (``15m``, ``500ms``, ``30s``, ``1h``; a bare number is milliseconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match[2] not in ("", *_DURATION_UNITS_MS):
        raise OptionError(f"option {name!r} must be a duration like 15m, 30s or 500ms, not {raw!r}")
    return int(match[1]) * _DURATION_UNITS_MS.get(match[2], 1)


@dataclass(frozen=True)
class ReadOptions:
    """What a read needs: client settings, which partitions, and where to start and stop."""

    consumer_settings: dict[str, Any]
    isolation_level: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec | TimestampSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec | TimestampSpec = OffsetSpec(LATEST)
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_s: float = 60.0
    #: ``minOffsetsPerTrigger``/``maxTriggerDelay`` (ms, Spark's default 15 minutes).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    #: ``minPartitions``: at least this many Spark partitions (large ranges are cut).
    min_partitions: int | None = None
    #: ``includeHeaders``: the ``headers`` column (Spark's default: without it).
    include_headers: bool = False
    #: ``fetchOffset.numRetries``/``fetchOffset.retryIntervalMs``: offset look-ups retried.
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_s: float = 1.0

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        from sdk.consumer.consumer import Consumer

        options = {name.lower(): value for name, value in options.items()}
        check_names(options, SOURCE_OPTIONS, "source")
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
        group_id = options.get("kafka.group.id")
        client_options = {k: v for k, v in options.items()
                          if k not in ("kafka.isolation.level", "kafka.group.id")}
        settings = client_settings(client_options, Consumer)
        # Spark's consumers join no group either; the group id only names them (quotas, ACLs):
        # kafka.group.id as given, else groupIdPrefix and a unique suffix, as Spark does.
        if group_id is not None or options.get("groupidprefix"):
            settings["group_id"] = group_id or f"{options['groupidprefix']}-{uuid.uuid4()}"
        for ending in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if streaming and options.get(ending):
                raise OptionError(f"option {_spelling(ending)!r} is for batch queries only")
        strategy = (options.get("startingoffsetsbytimestampstrategy") or "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}")
        min_offsets = _positive_int(options, "minoffsetspertrigger")
        max_offsets = _positive_int(options, "maxoffsetspertrigger")
        if not streaming:
            for name in ("minoffsetspertrigger", "maxtriggerdelay", "maxoffsetspertrigger"):
                if options.get(name):
                    raise OptionError(f"option {_spelling(name)!r} is for streaming queries only")
        if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
            raise OptionError(f"option 'minOffsetsPerTrigger' ({min_offsets}) is more than "
                              f"'maxOffsetsPerTrigger' ({max_offsets})")
        retries = options.get("fetchoffset.numretries")
        if retries is not None and (not retries.strip().isdigit()):
            raise OptionError(f"option 'fetchOffset.numRetries' must be an integer >= 0, not {retries!r}")
        interval = options.get("fetchoffset.retryintervalms")
        if interval is not None and not interval.strip().isdigit():
            raise OptionError(
                f"option 'fetchOffset.retryIntervalMs' must be an integer >= 0, not {interval!r}")
        poll_timeout = options.get("kafkaconsumer.polltimeoutms")
        return cls(
            consumer_settings=settings,
            isolation_level=isolation,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=TimestampSpec.parse(options, "starting", strategy) or OffsetSpec.parse(
                options.get("startingoffsets"), "startingOffsets", LATEST if streaming else EARLIEST),
            ending=TimestampSpec.parse(options, "ending", "latest") or OffsetSpec.parse(
                options.get("endingoffsets"), "endingOffsets", LATEST, allow_earliest=False),
            fail_on_data_loss=_flag(options, "failondataloss", True),
            max_offsets_per_trigger=max_offsets,
            max_records_per_partition=_positive_int(options, "maxrecordsperpartition"),
            poll_timeout_s=float(poll_timeout) / 1000 if poll_timeout else 60.0,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=duration_ms(options["maxtriggerdelay"], "maxTriggerDelay")
            if options.get("maxtriggerdelay") else 15 * 60_000,
            min_partitions=_positive_int(options, "minpartitions"),
            include_headers=_flag(options, "includeheaders", False),
            fetch_offset_retries=int(retries) if retries is not None else 3,
            fetch_offset_retry_interval_s=int(interval) / 1000 if interval is not None else 1.0,
        )


def _spelling(name: str) -> str:
    """Spark's spelling of a lower-cased source option."""
    return next((known for known in SOURCE_OPTIONS if known.lower() == name), name)
