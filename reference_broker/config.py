"""Broker settings under Kafka's own key names, read from a ``.properties`` file and the CLI.

Kafka's names are kept so that a config file written for a real broker mostly works here, and so
that DescribeConfigs can answer with the names, defaults and sources clients expect. Keys a
single-node broker has no use for but Kafka users commonly set (``default.replication.factor``,
``min.insync.replicas``, ...) are accepted and reported; unknown keys are an error, because a
typo silently ignored is the worse failure for a test broker.

Topic-level settings (``retention.ms``, ``segment.bytes``, ...) are parsed by the storage layer's
``LogConfig``; their defaults come from the broker keys in :data:`TOPIC_TO_BROKER_KEY`, which is
also what DescribeConfigs reports as each topic key's synonym.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from reference_broker._event_loop import EVENT_LOOPS
from reference_broker.log.config import CLEANER_DEDUPE_BUFFER_SIZE, LogConfig

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
HOUR_MS = 3_600_000
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """A setting that is unknown, unparsable or out of range; the message names the key."""


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs ``config_type`` codes (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs ``config_source`` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One setting: its Kafka name, type, default and the check applied to values."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] | None = None
    sensitive: bool = False

    @property
    def valid_values(self) -> str:
        """The accepted values as the settings listing shows them ("" when any value of the type)."""
        if self.choices is not None:
            return ", ".join(self.choices)
        return self.check.valid_values if isinstance(self.check, Check) else ""

    def parse(self, raw: Any) -> Any:
        """Typed value of ``raw`` (a string from a file, or an already typed value)."""
        try:
            value = _PARSERS[self.type](raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.name}: {raw!r} is not a valid {self.type.name.lower()}") from None
        if self.type in (ConfigType.INT, ConfigType.SHORT) and not -(2**31) <= value <= INT_MAX:
            raise ConfigError(f"{self.name}: {value} does not fit in a 32-bit int")
        if self.type == ConfigType.LONG and not -(2**63) <= value <= LONG_MAX:
            raise ConfigError(f"{self.name}: {value} does not fit in a 64-bit long")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            if bad or not items:
                raise ConfigError(f"{self.name}: {raw!r} is not one of {', '.join(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"{self.name}: {value!r} {problem}")
        return value


def render(value: Any) -> str | None:
    """A typed value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(raw)


def _parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(raw)
    if isinstance(raw, int):
        return raw
    return int(str(raw).strip())


def _parse_list(raw: Any) -> list[str]:
    if isinstance(raw, list | tuple):
        return [str(v).strip() for v in raw]
    return [part.strip() for part in str(raw).split(",") if part.strip()]


_PARSERS: dict[ConfigType, Callable[[Any], Any]] = {
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.STRING: lambda raw: None if raw is None else str(raw).strip(),
    ConfigType.INT: _parse_int,
    ConfigType.SHORT: _parse_int,
    ConfigType.LONG: _parse_int,
    ConfigType.DOUBLE: lambda raw: float(str(raw).strip()),
    ConfigType.LIST: _parse_list,
    ConfigType.CLASS: lambda raw: str(raw).strip(),
    ConfigType.PASSWORD: lambda raw: str(raw),
}


@dataclasses.dataclass(frozen=True)
class Check:
    """A value check that also says, for the settings listing, which values pass (written as
    Kafka's ConfigDef validators print themselves: ``[1,...]``, ``[0,...,1]``)."""

    accepts: Callable[[Any], bool]
    problem: str
    valid_values: str

    def __call__(self, value: Any) -> str | None:
        return None if self.accepts(value) else self.problem


def at_least(low: int | float) -> Check:
    return Check(lambda v: v >= low, f"must be at least {low}", f"[{low},...]")


def between(low: int | float, high: int | float) -> Check:
    return Check(lambda v: low <= v <= high, f"must be between {low} and {high}", f"[{low},...,{high}]")


_retention = Check(lambda v: v >= -1, "must be -1 (unlimited) or at least 0", "[-1,...]")
_replication_factor = Check(lambda v: v == -1 or v >= 1, "must be -1 or at least 1", "-1 or [1,...]")
def quorum_configured(config: Any) -> bool:
    """Cluster mode: a KRaft quorum is configured, static (``controller.quorum.voters``) or dynamic
    (``controller.quorum.bootstrap.servers``). ``config`` is a BrokerConfig or its settings."""
    return bool(config.get("controller.quorum.voters")
                or config.get("controller.quorum.bootstrap.servers"))


#: Replication factors a single node can only take as 1 (or -1); a cluster (controller.quorum.voters)
#: takes any factor up to its broker count, which its controller checks per topic.
SINGLE_NODE_REPLICATION_KEYS = (
    "default.replication.factor",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
)


def _ip_overrides(v: str) -> str | None:
    from reference_broker.network.limits import check_ip_overrides  # the network imports this module

    return check_ip_overrides(v)


_B = ConfigType

SECURITY_KEYS = [
    ConfigKey(
        "ssl.keystore.type",
        _B.STRING,
        "JKS",
        "Format of the keystore. Only PEM is supported (Kafka's default JKS is refused at start when "
        "a keystore is used).",
    ),
    ConfigKey(
        "ssl.keystore.location",
        _B.STRING,
        None,
        "PEM file with the broker's private key and certificate chain.",
    ),
    ConfigKey(
        "ssl.keystore.password",
        _B.PASSWORD,
        None,
        "Password of the keystore file. Sensitive: never described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.key.password",
        _B.PASSWORD,
        None,
        "Password of the private key in the keystore (for an encrypted PEM key). Sensitive: never "
        "described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        _B.PASSWORD,
        None,
        "The broker's certificate chain as PEM text, instead of ssl.keystore.location. Sensitive: "
        "never described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.key",
        _B.PASSWORD,
        None,
        "The broker's private key as PEM text, instead of ssl.keystore.location. Sensitive: never "
        "described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.type",
        _B.STRING,
        "JKS",
        "Format of the truststore. Only PEM is supported.",
    ),
    ConfigKey(
        "ssl.truststore.location",
        _B.STRING,
        None,
        "PEM file with the CA certificates client certificates are verified against.",
    ),
    ConfigKey(
        "ssl.truststore.password",
        _B.PASSWORD,
        None,
        "Password of the truststore file. Sensitive: never described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.certificates",
        _B.PASSWORD,
        None,
        "Trusted CA certificates as PEM text, instead of ssl.truststore.location. Sensitive: never "
        "described.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.client.auth",
        _B.STRING,
        "none",
        "Whether TLS clients must (required), may (requested) or do not (none) present a certificate;"
        " a verified certificate's subject DN is the principal.",
        choices=("required", "requested", "none"),
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        _B.LIST,
        ["TLSv1.2", "TLSv1.3"],
        "TLS versions accepted on SSL and SASL_SSL listeners.",
    ),
    ConfigKey(
        "ssl.protocol",
        _B.STRING,
        "TLSv1.3",
        "The TLS protocol the SSL context is created for. Accepted; ssl.enabled.protocols decides the"
        " versions.",
    ),
    ConfigKey(
        "ssl.cipher.suites",
        _B.LIST,
        [],
        "TLS cipher suites offered. Only the default (empty: the TLS library's) is supported.",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        _B.STRING,
        "https",
        "Host name verification of the peer's certificate when this node connects to other nodes "
        "(https, or empty for none); the broker does not verify its clients' host names.",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        _B.STRING,
        "DEFAULT",
        "Rules turning a certificate's subject DN into a principal name. Only DEFAULT (the whole DN) "
        "is supported.",
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        _B.LIST,
        ["GSSAPI"],
        "SASL mechanisms served on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
        "(GSSAPI is not supported). Per listener as listener.name.<listener>.sasl.enabled.mechanisms.",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        _B.STRING,
        "GSSAPI",
        "SASL mechanism brokers use among themselves on a SASL inter-broker listener; must be one of "
        "that listener's sasl.enabled.mechanisms (reference_broker.cluster.inter_broker).",
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        _B.LONG,
        0,
        "Longest a SASL session lasts before the client must authenticate again (KIP-368), in ms; 0: "
        "for the connection's life. Per listener and mechanism as "
        "listener.name.<listener>.<mechanism>.connections.max.reauth.ms.",
        at_least(0),
    ),
    ConfigKey(
        "principal.builder.class",
        _B.CLASS,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        "The class that turns an authenticated connection into a principal. Only Kafka's default "
        "builder: User:<SASL name> or User:<certificate subject DN>.",
    ),
    ConfigKey(
        "authorizer.class.name",
        _B.STRING,
        "",
        "The authorizer every request is checked with. Empty: no authorizer, everything is allowed. "
        "Kafka's StandardAuthorizer (or the older AclAuthorizer) name: ACLs from CreateAcls are "
        "enforced, kept in the data dir.",
    ),
    ConfigKey(
        "super.users",
        _B.STRING,
        None,
        "Principals allowed everything whatever the ACLs say, separated by ';' (User:admin;User:ops).",
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        _B.BOOLEAN,
        False,
        "With an authorizer: whether a resource that no ACL matches is open to every principal (true)"
        " or to super users only (false, Kafka's default).",
    ),
]
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

#: The one ``replica.selector.class`` served: the rack-aware selector of KIP-392.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "node.id",
            _B.INT,
            1,
            "Id of this broker, reported in Metadata, DescribeCluster and FindCoordinator.",
            at_least(0),
        ),
        ConfigKey(
            "broker.id",
            _B.INT,
            -1,
            "Kafka's older name of node.id; used as the node id when node.id is not set (-1: not set).",
            at_least(-1),
        ),
        ConfigKey(
            "listeners",
            _B.LIST,
            [],
            "NAME://host:port listeners (port 0 picks one); when empty, one PLAINTEXT listener on"
            " --host/--port.",
        ),
        ConfigKey(
            "listener.security.protocol.map",
            _B.LIST,
            ["SASL_SSL:SASL_SSL", "PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT"],
            "Listener name -> security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
        ),
        ConfigKey(
            "inter.broker.listener.name",
            _B.STRING,
            None,
            "The listener brokers use among themselves (its security protocol, ssl.* and JAAS "
            "credentials secure the connections between nodes); exclusive with "
            "security.inter.broker.protocol.",
        ),
        ConfigKey(
            "security.inter.broker.protocol",
            _B.STRING,
            "PLAINTEXT",
            "Security protocol brokers use among themselves, when inter.broker.listener.name is not "
            "set: the listener named after it is the inter-broker listener.",
        ),
        ConfigKey(
            "advertised.host",
            _B.STRING,
            None,
            "Host name clients are told to connect to (Metadata), when it is not the bound one. Kafka's "
            "old single-listener form; advertised.listeners replaces it.",
        ),
        ConfigKey(
            "advertised.port",
            _B.INT,
            None,
            "Port clients are told to connect to (Metadata), when it is not the bound one. Kafka's old "
            "single-listener form; advertised.listeners replaces it.",
            between(0, 65535),
        ),
        ConfigKey(
            "advertised.listeners",
            _B.LIST,
            [],
            "NAME://host:port per listener, what Metadata answers on it; without listeners the"
            " first entry applies to the one listener.",
        ),
        ConfigKey(
            "cluster.id",
            _B.STRING,
            None,
            "The cluster's id, reported in Metadata and DescribeCluster. Generated at the first start and"
            " kept in the data dir; a value given here must match the kept one.",
        ),
        ConfigKey(
            "broker.rack",
            _B.STRING,
            None,
            "Rack of this broker, reported in Metadata (rack-aware clients and assignors read it).",
        ),
        ConfigKey(
            "log.dirs",
            _B.STRING,
            None,
            "Kafka's data directories. The data directory is --data-dir (DescribeConfigs reports it"
            " here); a value naming another directory, or several, is refused at start.",
        ),
        ConfigKey(
            "log.dir",
            _B.STRING,
            None,
            "Kafka's data directory. The data directory is --data-dir (reported as log.dirs); a value"
            " naming another directory is refused at start.",
        ),
        ConfigKey(
            "num.partitions",
            _B.INT,
            1,
            "Number of partitions of a topic created without a count (auto-created, or CreateTopics with "
            "-1).",
            at_least(1),
        ),
        ConfigKey(
            "max.request.partition.size.limit",
            _B.INT,
            2000,
            "Most partitions one DescribeTopicPartitions response carries.",
            at_least(1),
        ),
        ConfigKey(
            "auto.create.topics.enable",
            _B.BOOLEAN,
            True,
            "Whether a Metadata request for a topic that does not exist creates it (with num.partitions "
            "partitions) when the client allows auto-creation.",
        ),
        ConfigKey(
            "default.replication.factor",
            _B.INT,
            1,
            "Replication factor of auto-created topics and of CreateTopics with -1. A single node takes "
            "only 1 (or -1, the broker default); a cluster up to its broker count.",
            _replication_factor,
        ),
        ConfigKey(
            "offsets.topic.replication.factor",
            _B.SHORT,
            1,
            "Replication factor of __consumer_offsets. A single node takes only 1 (or -1).",
            _replication_factor,
        ),
        ConfigKey(
            "transaction.state.log.replication.factor",
            _B.SHORT,
            1,
            "Replication factor of __transaction_state. A single node takes only 1 (or -1).",
            _replication_factor,
        ),
        ConfigKey(
            "broker.heartbeat.interval.ms",
            _B.INT,
            2000,
            "Cluster mode: how often a broker heartbeats to the active controller (with the metadata "
            "offset it has applied).",
            at_least(1),
        ),
        ConfigKey(
            "broker.session.timeout.ms",
            _B.INT,
            9000,
            "Cluster mode: a broker the active controller has not heard from for this long is fenced "
            "(it leaves every ISR and leadership until it heartbeats again and has caught up).",
            at_least(1),
        ),
        ConfigKey(
            "auto.leader.rebalance.enable",
            _B.BOOLEAN,
            True,
            "Cluster mode: the controller periodically moves leadership back to each partition's "
            "preferred replica when it is in the ISR and unfenced.",
        ),
        ConfigKey(
            "leader.imbalance.check.interval.seconds",
            _B.LONG,
            300,
            "Cluster mode: how often the controller checks for partitions led by another replica than "
            "their preferred one (auto.leader.rebalance.enable).",
            at_least(1),
        ),
        ConfigKey(
            "transaction.state.log.min.isr",
            _B.INT,
            1,
            "min.insync.replicas of __transaction_state. Accepted; a single node is always enough.",
            at_least(1),
        ),
        ConfigKey(
            "min.insync.replicas",
            _B.INT,
            1,
            "Replicas (the ISR) that must have a record before an acks=all produce succeeds; topics "
            "override it with min.insync.replicas. Enforced in cluster mode (NOT_ENOUGH_REPLICAS, "
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND); a single node is the only replica and meets any value.",
            at_least(1),
        ),
        ConfigKey(
            "delete.topic.enable",
            _B.BOOLEAN,
            True,
            "Whether DeleteTopics deletes topics; when false it is refused with TOPIC_DELETION_DISABLED.",
        ),
        ConfigKey(
            "log.segment.bytes", _B.INT, 1 * GIB,
            "Roll a segment at this size (Kafka 4: at least 1 MiB; tests use the topic-level"
            " internal.segment.bytes).",
            at_least(1024 * 1024),
        ),
        ConfigKey(
            "log.roll.ms",
            _B.LONG,
            None,
            "Longest a segment stays active before a new one is rolled (ms); unset: log.roll.hours. "
            "Topics override it with segment.ms.",
        ),
        ConfigKey(
            "log.roll.hours",
            _B.INT,
            168,
            "Longest a segment stays active before a new one is rolled, in hours; log.roll.ms wins over "
            "it.",
            at_least(1),
        ),
        ConfigKey(
            "log.roll.jitter.ms",
            _B.LONG,
            None,
            "Random time Kafka subtracts from a segment's roll time (ms). Accepted; no jitter is applied.",
        ),
        ConfigKey(
            "log.roll.jitter.hours",
            _B.INT,
            0,
            "Random time Kafka subtracts from a segment's roll time, in hours, so partitions do not roll "
            "together. Accepted; no jitter is applied.",
            at_least(0),
        ),
        ConfigKey(
            "log.retention.ms",
            _B.LONG,
            None,
            "How long a segment is kept after its last record was written (ms, -1: forever); unset, "
            "log.retention.minutes or log.retention.hours decide. Topics override it with retention.ms.",
            _retention,
        ),
        ConfigKey(
            "log.retention.minutes",
            _B.INT,
            None,
            "How long a segment is kept after its last record was written, in minutes; log.retention.ms "
            "wins over it.",
        ),
        ConfigKey(
            "log.retention.hours",
            _B.INT,
            168,
            "How long a segment is kept after its last record was written, in hours; "
            "log.retention.minutes and log.retention.ms win over it.",
        ),
        ConfigKey(
            "log.retention.bytes",
            _B.LONG,
            -1,
            "Largest size of a partition's log before its oldest segments are deleted (-1: no limit). "
            "Topics override it with retention.bytes.",
            _retention,
        ),
        ConfigKey(
            "log.retention.check.interval.ms",
            _B.LONG,
            300_000,
            "How often logs are checked for segments that retention may delete (ms).",
            at_least(1),
        ),
        ConfigKey(
            "log.cleanup.policy",
            _B.LIST,
            ["delete"],
            "delete (retention), compact (the log cleaner), or both.",
            choices=("delete", "compact"),
        ),
        ConfigKey(
            "log.flush.interval.messages",
            _B.LONG,
            LONG_MAX,
            "Records appended to a partition before its log is fsynced. Topics override it with "
            "flush.messages.",
            at_least(1),
        ),
        ConfigKey(
            "log.flush.interval.ms",
            _B.LONG,
            None,
            "Longest a record stays in a partition's log before it is fsynced (ms); unset: "
            "log.flush.scheduler.interval.ms. Topics override it with flush.ms.",
        ),
        ConfigKey(
            "log.flush.scheduler.interval.ms",
            _B.LONG,
            LONG_MAX,
            "How often logs are checked for a due fsync (ms).",
        ),
        ConfigKey(
            "log.index.interval.bytes",
            _B.INT,
            4096,
            "Bytes of records between two entries of a segment's offset index: smaller finds offsets "
            "faster with a larger index. Topics override it with index.interval.bytes.",
            at_least(0),
        ),
        ConfigKey(
            "log.index.size.max.bytes",
            _B.INT,
            10 * MIB,
            "Largest size of a segment's offset index; a full index rolls the segment. Topics override it"
            " with segment.index.bytes.",
            at_least(4),
        ),
        ConfigKey(
            "log.segment.delete.delay.ms",
            _B.LONG,
            60_000,
            "How long a segment removed from a log waits before its files are deleted (ms). Topics "
            "override it with file.delete.delay.ms.",
            at_least(0),
        ),
        ConfigKey(
            "log.open.segments.max", _B.INT, None,
            "Reference broker only: most segments holding open files (up to four descriptors"
            " each); the least recently used close theirs and reopen them on their next read."
            " Default: an eighth of the descriptor limit, at most 1000.",
            at_least(16),
        ),
        ConfigKey(
            "log.cleaner.delete.retention.ms",
            _B.LONG,
            86_400_000,
            "How long a tombstone (a null value) and a transaction marker stay in a compacted log after "
            "the cleaner reaches them, so a reader behind can still see the delete (ms). Topics override "
            "it with delete.retention.ms.",
            at_least(0),
        ),
        ConfigKey(
            "log.cleaner.min.compaction.lag.ms",
            _B.LONG,
            0,
            "Youngest a record may be and still be compacted away (ms). Topics override it with "
            "min.compaction.lag.ms.",
            at_least(0),
        ),
        ConfigKey(
            "log.cleaner.max.compaction.lag.ms",
            _B.LONG,
            LONG_MAX,
            "Longest a record may stay uncompacted: a log holding an older dirty record is cleaned "
            "whatever its dirty ratio (ms). Topics override it with max.compaction.lag.ms.",
            at_least(1),
        ),
        ConfigKey(
            "log.cleaner.min.cleanable.ratio",
            _B.DOUBLE,
            0.5,
            "Share of a log that must be dirty (written since the last cleaning) before the cleaner "
            "compacts it. Topics override it with min.cleanable.dirty.ratio.",
            between(0, 1),
        ),
        ConfigKey(
            "log.cleaner.enable",
            _B.BOOLEAN,
            True,
            "Whether the log cleaner runs; without it no topic with cleanup.policy compact is ever "
            "compacted.",
        ),
        ConfigKey(
            "log.cleaner.threads",
            _B.INT,
            1,
            "Number of log cleaner threads: each compacts one log at a time in a worker thread (0: no "
            "compaction). Read at start.",
            at_least(0),
        ),
        ConfigKey(
            "log.cleaner.dedupe.buffer.size",
            _B.LONG,
            CLEANER_DEDUPE_BUFFER_SIZE,
            "The total memory used for log deduplication across all cleaner threads (bytes): each "
            "thread's key map takes this divided by log.cleaner.threads, at most 2 GiB - 1, and must "
            "get more than 1 MiB. A dirty range with more distinct keys than a map holds is cleaned "
            "over several passes.",
        ),
        ConfigKey(
            "log.cleaner.io.buffer.load.factor",
            _B.DOUBLE,
            0.9,
            "Log cleaner dedupe buffer load factor: the share of a key map's slots filled before it "
            "is full. A higher value cleans more of a log per pass but makes lookups slower.",
            Check(lambda v: 0 < v <= 1, "must be above 0 and at most 1", "(0,...,1]"),
        ),
        ConfigKey(
            "log.cleaner.backoff.ms",
            _B.LONG,
            15_000,
            "How long the log cleaner sleeps when no log needs cleaning (ms).",
            at_least(0),
        ),
        ConfigKey(
            "log.message.timestamp.type",
            _B.STRING,
            "CreateTime",
            "Whether a record's timestamp is the producer's (CreateTime) or the broker's time of append "
            "(LogAppendTime). Topics override it with message.timestamp.type.",
            choices=TIMESTAMP_TYPES,
        ),
        ConfigKey(
            "log.message.timestamp.before.max.ms",
            _B.LONG,
            LONG_MAX,
            "How far before the broker's clock a CreateTime timestamp may be; an older batch is refused "
            "with INVALID_TIMESTAMP (ms). Topics override it with message.timestamp.before.max.ms.",
            at_least(0),
        ),
        ConfigKey(
            "log.message.timestamp.after.max.ms",
            _B.LONG,
            3_600_000,
            "How far after the broker's clock a CreateTime timestamp may be; a later batch is refused "
            "with INVALID_TIMESTAMP (ms, Kafka 4: one hour). Topics override it with "
            "message.timestamp.after.max.ms.",
            at_least(0),
        ),
        ConfigKey(
            "log.preallocate",
            _B.BOOLEAN,
            False,
            "Whether Kafka preallocates a new segment's file. Accepted; files here grow as written.",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            _B.BOOLEAN,
            False,
            "Whether an out-of-sync replica may become leader. Accepted; this node leads every partition."
            " Topics override it with unclean.leader.election.enable.",
        ),
        ConfigKey(
            "replica.lag.time.max.ms",
            _B.LONG,
            30_000,
            "Cluster mode: a follower not caught up with its leader's log end for this long leaves the ISR.",
            at_least(1),
        ),
        ConfigKey(
            "replica.fetch.min.bytes",
            _B.INT,
            1,
            "Cluster mode: bytes a follower's fetch waits for (up to replica.fetch.wait.max.ms).",
            at_least(1),
        ),
        ConfigKey(
            "replica.fetch.max.bytes",
            _B.INT,
            1_048_576,
            "Cluster mode: bytes a follower fetches per partition (the first batch comes whole).",
            at_least(0),
        ),
        ConfigKey(
            "replica.fetch.wait.max.ms",
            _B.INT,
            500,
            "Cluster mode: longest a follower's fetch waits at the leader for replica.fetch.min.bytes.",
            at_least(0),
        ),
        ConfigKey(
            "replica.fetch.backoff.ms",
            _B.INT,
            1_000,
            "Cluster mode: pause of a follower's fetching after an error.",
            at_least(0),
        ),
        ConfigKey(
            "replica.fetch.response.max.bytes",
            _B.INT,
            10_485_760,
            "Cluster mode: bytes a follower's whole fetch response may hold.",
            at_least(0),
        ),
        ConfigKey(
            "replica.selector.class",
            _B.STRING,
            None,
            "Cluster mode: set (Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector) to let "
            "leaders send consumers to a caught-up replica in their client.rack (KIP-392).",
            lambda v: None if v in (None, "", RACK_AWARE_SELECTOR) else f"is not {RACK_AWARE_SELECTOR}",
        ),
        ConfigKey(
            "num.replica.fetchers",
            _B.INT,
            1,
            "Cluster mode: fetch loops per leader a follower runs (partitions spread over them).",
            at_least(1),
        ),
        ConfigKey(
            "compression.type",
            _B.STRING,
            "producer",
            "Compression of the stored batches: 'producer' keeps the producer's codec as sent; a codec "
            "name recompresses every batch with it; 'uncompressed' stores them plain. Topics override it "
            "with compression.type.",
            choices=COMPRESSION_TYPES,
        ),
        ConfigKey(
            "message.max.bytes",
            _B.INT,
            1_048_588,
            "Largest record batch (after compression) the broker accepts; a larger one is refused with "
            "MESSAGE_TOO_LARGE. Topics override it with max.message.bytes.",
            at_least(0),
        ),
        ConfigKey(
            "replica.fetch.max.bytes",
            _B.INT,
            1 * MIB,
            "Bytes per partition a follower fetches. Accepted; a single node has no followers.",
            at_least(0),
        ),
        ConfigKey(
            "socket.request.max.bytes",
            _B.INT,
            100 * MIB,
            "Largest request the broker reads; a larger size prefix closes the connection.",
            at_least(1),
        ),
        ConfigKey(
            "socket.send.buffer.bytes",
            _B.INT,
            100 * KIB,
            "SO_SNDBUF of accepted connections (-1: the operating system's default).",
        ),
        ConfigKey(
            "socket.receive.buffer.bytes",
            _B.INT,
            100 * KIB,
            "SO_RCVBUF of accepted connections (-1: the operating system's default).",
        ),
        ConfigKey(
            "fetch.max.bytes",
            _B.INT,
            55 * MIB,
            "Most bytes of record data one Fetch response carries, whatever the client asks (the first "
            "batch of the first non-empty partition is always sent whole, so a consumer makes progress).",
            at_least(1024),
        ),
        ConfigKey(
            "max.connections",
            _B.INT,
            INT_MAX,
            "Most connections the broker keeps open, in addition to the per-ip limits; per listener as "
            "listener.name.<listener>.max.connections (the broker-wide value by default). At either limit "
            "the listener stops accepting: new connections wait in the listen backlog until one closes. "
            "The inter-broker listener (when there are several) is held to its own limit only; a "
            "connection there over the broker-wide limit closes the least recently used connection of "
            "another listener.",
            at_least(0),
        ),
        ConfigKey(
            "max.connection.creation.rate",
            _B.INT,
            INT_MAX,
            "Most new connections per second the broker takes (KIP-612); per listener as "
            "listener.name.<listener>.max.connection.creation.rate. Over either rate the listener waits "
            "before taking the next connection; the inter-broker listener is held to its own rate only.",
            at_least(0),
        ),
        ConfigKey(
            "max.connections.per.ip",
            _B.INT,
            INT_MAX,
            "Most connections from one address (0 is allowed when overrides are given); a new "
            "connection over it is closed at once.",
            at_least(0),
        ),
        ConfigKey(
            "socket.listen.backlog.size",
            _B.INT,
            50,
            "Most pending connections on a listening socket (Linux also caps it by somaxconn): where "
            "new connections wait while a listener is at its connection limit or throttled.",
            at_least(1),
        ),
        ConfigKey(
            "queued.max.requests",
            _B.INT,
            500,
            "Most requests read and waiting to be served, broker-wide. Each connection may always have "
            "its next request read (Kafka's one request per connection); reading further ahead stops "
            "while this many are waiting.",
            at_least(1),
        ),
        ConfigKey(
            "queued.max.request.bytes",
            _B.LONG,
            -1,
            "Bytes of requests read and not yet handled, broker-wide (a memory pool; <=0 no limit). A "
            "request's bytes are taken when its size is read and given back once it is handled; while "
            "the pool is empty connections stop reading. When set, at least socket.request.max.bytes, "
            "and each connection reads its next request only after answering the last (Kafka's muted "
            "channel).",
        ),
        ConfigKey(
            "max.connections.per.ip.overrides",
            _B.STRING,
            "",
            "Per-address limits, host:count,... (names or addresses).",
            _ip_overrides,
        ),
        ConfigKey(
            "connections.max.idle.ms", _B.LONG, 600_000, "Close connections idle this long (ms; <0 never)."
        ),
        ConfigKey("quota.window.num", _B.INT, 11, "Samples kept for client quota rates.", at_least(1)),
        ConfigKey("quota.window.size.seconds", _B.INT, 1, "Length of one quota sample (s).", at_least(1)),
        ConfigKey(
            "max.incremental.fetch.session.cache.slots",
            _B.INT,
            1000,
            "Most incremental fetch sessions (KIP-227) the broker keeps; a client asking for one more "
            "gets a full fetch instead.",
            at_least(0),
        ),
        ConfigKey(
            "group.initial.rebalance.delay.ms",
            _B.INT,
            3000,
            "How long an empty group's first rebalance waits for more members (ms).",
            at_least(0),
        ),
        ConfigKey(
            "group.min.session.timeout.ms",
            _B.INT,
            6000,
            "Shortest session timeout a classic group member may ask for (ms); a shorter one is refused "
            "with INVALID_SESSION_TIMEOUT.",
            at_least(0),
        ),
        ConfigKey(
            "group.max.session.timeout.ms",
            _B.INT,
            1_800_000,
            "Longest session timeout a classic group member may ask for (ms); a longer one is refused "
            "with INVALID_SESSION_TIMEOUT.",
            at_least(0),
        ),
        ConfigKey(
            "group.max.size",
            _B.INT,
            INT_MAX,
            "Most members a classic group may have; a member beyond it is refused with "
            "GROUP_MAX_SIZE_REACHED.",
            at_least(1),
        ),
        ConfigKey(
            "group.coordinator.rebalance.protocols",
            _B.LIST,
            ["classic", "consumer"],
            "Group protocols served; 'consumer' (KIP-848) offers ConsumerGroupHeartbeat/Describe.",
        ),
        ConfigKey(
            "group.consumer.heartbeat.interval.ms",
            _B.INT,
            5000,
            "Heartbeat interval handed to the members of consumer groups (KIP-848), in ms.",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.session.timeout.ms",
            _B.INT,
            45000,
            "How long a consumer group member (KIP-848) may go without a heartbeat before it is removed "
            "from the group (ms).",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.min.session.timeout.ms",
            _B.INT,
            45000,
            "Smallest session timeout a consumer group may be configured with (ms).",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.max.session.timeout.ms",
            _B.INT,
            60000,
            "Largest session timeout a consumer group may be configured with (ms).",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.min.heartbeat.interval.ms",
            _B.INT,
            5000,
            "Smallest heartbeat interval a consumer group may be configured with (ms).",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.max.heartbeat.interval.ms",
            _B.INT,
            15000,
            "Largest heartbeat interval a consumer group may be configured with (ms).",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.assignors",
            _B.LIST,
            ["uniform", "range"],
            "Server-side partition assignors of consumer groups (KIP-848), by name; the first one is used"
            " when a member names none.",
        ),
        ConfigKey(
            "group.consumer.max.size",
            _B.INT,
            INT_MAX,
            "Most members a consumer group (KIP-848) may have; a member beyond it is refused with "
            "GROUP_MAX_SIZE_REACHED.",
            at_least(1),
        ),
        ConfigKey(
            "group.consumer.migration.policy",
            _B.STRING,
            "bidirectional",
            "Whether a classic group with members becomes a consumer group when a consumer-protocol"
            " member joins (upgrade) and back when its last consumer-protocol member leaves"
            " (downgrade): disabled, upgrade, downgrade or bidirectional (case-insensitive).",
            Check(
                lambda v: str(v).lower() in ("disabled", "upgrade", "downgrade", "bidirectional"),
                "must be one of disabled, upgrade, downgrade, bidirectional",
                "[DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL]",
            ),
        ),
        ConfigKey(
            "offset.metadata.max.bytes",
            _B.INT,
            4096,
            "Longest metadata string an offset commit may carry; a longer one is refused with "
            "OFFSET_METADATA_TOO_LARGE.",
            at_least(0),
        ),
        ConfigKey(
            "offsets.topic.num.partitions",
            _B.INT,
            50,
            "Partitions of __consumer_offsets, fixed when it is first created.",
            at_least(1),
        ),
        ConfigKey(
            "offsets.topic.segment.bytes",
            _B.INT,
            100 * MIB,
            "Segment size of __consumer_offsets (small, so compaction and loading stay fast).",
            at_least(14),
        ),
        ConfigKey(
            "offsets.retention.minutes",
            _B.INT,
            10080,
            "How long the committed offsets of a group that became empty are kept, in minutes; for a "
            "standalone commit, since the commit.",
            at_least(1),
        ),
        ConfigKey(
            "offsets.retention.check.interval.ms",
            _B.LONG,
            600_000,
            "How often committed offsets are checked for expiry (ms).",
            at_least(1),
        ),
        ConfigKey(
            "transaction.max.timeout.ms",
            _B.INT,
            900_000,
            "Longest transaction timeout a producer may ask for in InitProducerId; a longer one is "
            "refused with INVALID_TRANSACTION_TIMEOUT (ms).",
            at_least(1),
        ),
        ConfigKey(
            "transactional.id.expiration.ms",
            _B.INT,
            604_800_000,
            "How long a transactional id is kept after its last transaction state change while no "
            "transaction is open (ms); an expired id starts afresh.",
            at_least(1),
        ),
        ConfigKey(
            "transaction.state.log.num.partitions",
            _B.INT,
            50,
            "Partitions of __transaction_state, fixed when it is first created.",
            at_least(1),
        ),
        ConfigKey(
            "transaction.state.log.segment.bytes",
            _B.INT,
            100 * MIB,
            "Segment size of __transaction_state (small, so compaction and loading stay fast).",
            at_least(14),
        ),
        ConfigKey(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            _B.INT,
            10_000,
            "How often transactions open longer than their timeout are aborted.",
            at_least(1),
        ),
        ConfigKey(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            _B.INT,
            3_600_000,
            "How often transactional ids idle for transactional.id.expiration.ms are removed.",
            at_least(1),
        ),
        ConfigKey(
            "transaction.version",
            _B.SHORT,
            2,
            "The transaction.version feature level finalized in ApiVersions: 2 enables transactions"
            " v2 (KIP-890: epoch bump on every EndTxn, implicit adds); below 2 EndTxn v5, Produce v12+"
            " and TxnOffsetCommit v5 are not served. A single node finalizes this level; a cluster"
            " is bootstrapped with it (as kafka-storage format --feature sets it) and afterwards"
            " changes it only with UpdateFeatures (kafka-features upgrade|downgrade).",
            between(0, 2),
        ),
        ConfigKey(
            "transaction.two.phase.commit.enable",
            _B.BOOLEAN,
            False,
            "Allow InitProducerId's enable2Pc (KIP-939: transactions without timeout, kept across"
            " producer restarts).",
        ),
        ConfigKey(
            "producer.id.expiration.ms",
            _B.INT,
            86_400_000,
            "How long an idempotent producer's state is kept after its last write (ms); a producer silent"
            " for longer loses its sequence checks.",
            at_least(1),
        ),
        ConfigKey(
            "num.network.threads",
            _B.INT,
            3,
            "Kafka's network threads. Accepted; one event loop serves every connection here.",
        ),
        ConfigKey(
            "num.io.threads",
            _B.INT,
            8,
            "Kafka's request handler threads. Accepted; one event loop serves every request here.",
        ),
        ConfigKey(
            "zookeeper.connect",
            _B.STRING,
            None,
            "ZooKeeper address of pre-KRaft Kafka. Accepted and not read (Kafka 4 has no ZooKeeper).",
        ),
        ConfigKey(
            "process.roles",
            _B.LIST,
            ["broker", "controller"],
            "Whether a KRaft node is a broker, a controller or both. With controller.quorum.voters a"
            " node without the controller role is a raft observer; a single node is always both.",
        ),
        ConfigKey(
            "controller.quorum.voters",
            _B.LIST,
            [],
            "The KRaft voters as id@host:port (their controller listeners). Empty: a single node,"
            " no raft quorum.",
        ),
        ConfigKey(
            "controller.quorum.bootstrap.servers",
            _B.LIST,
            [],
            "host:port of controllers to discover a dynamic KRaft quorum from (KIP-853, kraft.version"
            " 1): the voters are then those of the metadata log. Exclusive with"
            " controller.quorum.voters.",
        ),
        ConfigKey(
            "controller.listener.names",
            _B.LIST,
            None,
            "The listeners that serve the controller APIs (raft and the quorum controller's); nodes "
            "connect to controllers over the first one, with its security protocol.",
        ),
        ConfigKey(
            "sasl.mechanism.controller.protocol",
            _B.STRING,
            "GSSAPI",
            "SASL mechanism nodes use towards controllers on a SASL controller listener; must be one "
            "of that listener's sasl.enabled.mechanisms.",
        ),
        ConfigKey(
            "controller.quorum.election.timeout.ms",
            _B.INT,
            1000,
            "How long a voter waits without a leader before it stands for election (ms), randomized"
            " up to twice this.",
            at_least(1),
        ),
        ConfigKey(
            "controller.quorum.fetch.timeout.ms",
            _B.INT,
            2000,
            "How long a follower goes without a successful Fetch from the leader before it stands"
            " for election (ms).",
            at_least(1),
        ),
        ConfigKey(
            "controller.quorum.election.backoff.max.ms",
            _B.INT,
            1000,
            "The largest backoff before a new election after one failed (ms).",
            at_least(0),
        ),
        ConfigKey(
            "controller.quorum.request.timeout.ms",
            _B.INT,
            2000,
            "How long a raft request waits for its answer (ms).",
            at_least(1),
        ),
        ConfigKey(
            "metadata.log.dir",
            _B.STRING,
            None,
            "Where the __cluster_metadata log and quorum-state live (default: the data dir).",
        ),
        ConfigKey(
            "metadata.log.max.record.bytes.between.snapshots",
            _B.LONG,
            20 * 1024 * 1024,
            "How many bytes of metadata records are committed after the latest snapshot before a"
            " new one is written.",
            at_least(1),
        ),
        ConfigKey(
            "metadata.log.max.snapshot.interval.ms",
            _B.LONG,
            3_600_000,
            "The longest time between snapshots while metadata records are committed (ms); 0 turns"
            " the time trigger off.",
            at_least(0),
        ),
        ConfigKey(
            "metadata.log.segment.bytes",
            _B.INT,
            1024 * 1024 * 1024,
            "The size of one segment of the __cluster_metadata log.",
            at_least(14),
        ),
        ConfigKey(
            "metadata.max.retention.bytes",
            _B.LONG,
            100 * 1024 * 1024,
            "Metadata log plus snapshots larger than this: the oldest snapshot and the segments"
            " before the next one are deleted (the latest snapshot is always kept); -1 no limit.",
            at_least(-1),
        ),
        ConfigKey(
            "metadata.max.retention.ms",
            _B.LONG,
            604_800_000,
            "Snapshots older than this (with the segments before the next snapshot) are deleted,"
            " the latest always kept (ms); -1 no limit.",
            at_least(-1),
        ),
        *SECURITY_KEYS,
    ]
}

#: Settings Kafka also reads per listener as ``listener.name.<listener>.<key>``.
LISTENER_KEYS = frozenset(
    k.name for k in SECURITY_KEYS if k.name.startswith(("ssl.", "sasl.", "connections."))
) | {"max.connections", "max.connection.creation.rate"}
#: ``listener.name.<listener>.<mechanism>.<key>``: the per-mechanism settings of a SASL listener.
MECHANISM_KEYS: dict[str, ConfigKey] = {
    "sasl.jaas.config": ConfigKey(
        "sasl.jaas.config",
        _B.PASSWORD,
        None,
        "JAAS configuration of one SASL mechanism on one listener: the login module and its options "
        "(for PLAIN, user_<name>=\"<password>\" entries). Sensitive: never described.",
        sensitive=True,
    ),
    "sasl.server.callback.handler.class": ConfigKey(
        "sasl.server.callback.handler.class",
        _B.CLASS,
        None,
        "For OAUTHBEARER: package.module.callable that validates a token (instead of accepting "
        "unsecured JWS tokens).",
    ),
    "connections.max.reauth.ms": ConfigKey(
        "connections.max.reauth.ms",
        _B.LONG,
        0,
        "Longest a SASL session of this mechanism on this listener lasts before re-authentication "
        "(ms).",
        at_least(0),
    ),
}
_LISTENER_PREFIX = re.compile(r"listener\.name\.([a-z0-9_]+)\.(.+)")


def nearest_key(key: str) -> str:
    """The accepted setting whose name is closest to ``key``, for the unknown-key error (a
    per-listener key is matched against the per-listener settings, keeping its listener)."""
    match = _LISTENER_PREFIX.fullmatch(key)
    if match is None:
        candidates: list[str] = list(BROKER_KEYS)
        name, prefix = key, ""
    else:
        rest = match.group(2)
        mechanism, _, mech_key = rest.partition(".")
        prefix = f"listener.name.{match.group(1)}."
        if mech_key and not mechanism.startswith(("ssl", "sasl", "connections")):
            prefix, rest = f"{prefix}{mechanism}.", mech_key
            candidates = list(MECHANISM_KEYS)
        else:
            candidates = sorted(LISTENER_KEYS)
        name = rest
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.0)
    return prefix + (close[0] if close else candidates[0])


def unknown_key_error(key: str) -> ConfigError:
    return ConfigError(
        f"unknown config key {key!r}; the nearest valid one is {nearest_key(key)!r}"
        " (python -m reference_broker configs lists every setting)"
    )


def listener_setting(key: str) -> tuple[ConfigKey, str | None]:
    """The declaration of a ``listener.name.<listener>.[<mechanism>.]<key>`` setting and the broker
    key it stands in for on that listener (Kafka's synonym of it; None when the broker has no
    such key, as for ``sasl.jaas.config``). ConfigError when ``key`` is no such setting."""
    match = _LISTENER_PREFIX.fullmatch(key)
    if match is None:
        raise unknown_key_error(key)
    rest = match.group(2)
    if rest in LISTENER_KEYS:
        return BROKER_KEYS[rest], rest
    mechanism, _, mech_key = rest.partition(".")
    spec = MECHANISM_KEYS.get(mech_key) if mechanism else None
    if spec is None:
        raise unknown_key_error(key)
    return spec, mech_key if mech_key in BROKER_KEYS else None


def parse_listener_setting(key: str, raw: Any) -> Any:
    """A ``listener.name.<listener>.[<mechanism>.]<key>`` setting, checked like its global key."""
    spec, _ = listener_setting(key)
    try:
        return spec.parse(raw)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {str(exc).partition(': ')[2]}") from None


# Topic key -> broker key that supplies its default (Kafka's LogConfig synonyms).
TOPIC_TO_BROKER_KEY: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


# Kafka's synonym groups of broker keys (DynamicBrokerConfig.brokerConfigSynonyms): every key of a
# group names the same setting, the first one with a value wins.
_SYNONYM_GROUPS = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
)
SYNONYMS: dict[str, tuple[str, ...]] = {key: group for group in _SYNONYM_GROUPS for key in group}
# log.flush.scheduler.interval.ms stands in for log.flush.interval.ms, not the other way round.
SYNONYMS["log.flush.interval.ms"] = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")


def read_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations. Enough of the format for broker configs."""
    result: dict[str, str] = {}
    logical: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip() if not logical else raw_line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        cut = min((i for i in (entry.find("="), entry.find(":")) if i >= 0), default=-1)
        if cut < 0:
            key, value = entry.strip(), ""
        else:
            key, value = entry[:cut].strip(), entry[cut + 1 :].strip()
        result[key] = value
    return result


@dataclasses.dataclass
class BrokerConfig:
    """Everything the broker is started with.

    ``settings`` holds typed values for the keys that were given explicitly (file or CLI);
    :meth:`get` falls back to Kafka's default. The CLI-only fields are plain attributes.
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9092
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    log_level: str = "INFO"
    event_loop: str = "auto"  # see reference_broker._event_loop
    #: Dynamic broker configs, typed, winning over ``settings``: this broker's own (Kafka's
    #: DYNAMIC_BROKER_CONFIG) over the cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG).
    #: reference_broker.dynamic_config loads, checks and persists them.
    dynamic_broker: dict[str, Any] = dataclasses.field(default_factory=dict)
    dynamic_default: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def build(
        cls,
        data_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        node_id: int | None = None,
        properties: Mapping[str, Any] | None = None,
        log_level: str = "INFO",
        event_loop: str = "auto",
    ) -> BrokerConfig:
        """Validate everything up front so a bad setting fails at start, not at first use."""
        if not 0 <= port <= 65535:
            raise ConfigError(f"port: {port} is not between 0 and 65535")
        settings: dict[str, Any] = {}
        for key, raw in (properties or {}).items():
            spec = BROKER_KEYS.get(key)
            if spec is None:
                settings[key] = parse_listener_setting(key, raw)
                continue
            settings[key] = spec.parse(raw)
        if node_id is not None:
            settings["node.id"] = BROKER_KEYS["node.id"].parse(node_id)
        elif settings.get("broker.id", -1) >= 0 and "node.id" not in settings:
            settings["node.id"] = settings["broker.id"]
        if settings.get("controller.quorum.voters") and settings.get("controller.quorum.bootstrap.servers"):
            raise ConfigError("controller.quorum.voters and controller.quorum.bootstrap.servers are"
                              " exclusive: static voters, or a dynamic quorum found from bootstrap servers")
        if not quorum_configured(settings):
            for key in SINGLE_NODE_REPLICATION_KEYS:
                if settings.get(key, 1) not in (1, -1):
                    raise ConfigError(f"{key}: {settings[key]!r} must be 1 (this broker has a single node)")
        for key in ("advertised.listeners",):
            for listener in settings.get(key, []):
                _split_listener(listener)
        _check_cleaner_buffer(settings)
        _check_data_dir(settings, Path(data_dir))
        if event_loop not in EVENT_LOOPS:
            raise ConfigError(f"event loop: {event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
        config = cls(
            data_dir=Path(data_dir),
            host=host,
            port=port,
            settings=settings,
            log_level=log_level,
            event_loop=event_loop,
        )
        from reference_broker.dynamic_config import load_dynamic_configs
        from reference_broker.security.config import check_security_settings

        check_security_settings(config)
        from reference_broker.cluster.inter_broker import check_peer_settings

        check_peer_settings(config)
        load_dynamic_configs(config)
        return config

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> BrokerConfig:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        props = read_properties(text)
        props.update(kwargs.pop("properties", None) or {})
        return cls.build(properties=props, **kwargs)

    def get(self, key: str) -> Any:
        """The effective value of a broker key (dynamic, explicit, derived from a synonym, or
        default)."""
        if key in self.dynamic_broker:
            return self.dynamic_broker[key]
        if key in self.dynamic_default:
            return self.dynamic_default[key]
        if key in self.settings:
            return self.settings[key]
        if key == "log.retention.ms":
            if "log.retention.minutes" in self.settings:
                return self.settings["log.retention.minutes"] * 60_000
            return self.get("log.retention.hours") * HOUR_MS
        if key == "log.roll.ms":
            return self.get("log.roll.hours") * HOUR_MS
        if key == "log.roll.jitter.ms":
            return self.get("log.roll.jitter.hours") * HOUR_MS
        if key == "log.flush.interval.ms":
            return self.get("log.flush.scheduler.interval.ms")
        return BROKER_KEYS[key].default

    def listener_get(self, listener: str, key: str) -> Any:
        """``key`` as Kafka reads it for one listener: ``listener.name.<listener>.<key>`` first."""
        prefixed = f"listener.name.{listener.lower()}.{key}"
        if prefixed in self.settings:
            return self.settings[prefixed]
        if key in BROKER_KEYS:
            return self.get(key)
        return None

    def own_value(self, key: str) -> Any:
        """The value given for ``key`` itself, not derived from a synonym: what Kafka describes
        as the broker config's value (``log.retention.ms`` is null when only hours are set)."""
        for layer in (self.dynamic_broker, self.dynamic_default, self.settings):
            if key in layer:
                return layer[key]
        return BROKER_KEYS[key].default

    def synonyms(self, key: str, *, per_broker: bool = True) -> list[tuple[str, Any, ConfigSource]]:
        """Kafka's synonym list of a broker key (ConfigHelper.configSynonyms): for each source in
        precedence order, each key of its group that has a value there; the entries before the
        first naming ``key`` itself are dropped (so ``log.retention.ms`` set only through its
        hours has none). ``per_broker=False`` keeps the cluster defaults only."""
        group = SYNONYMS.get(key, (key,))
        defaults = {k: BROKER_KEYS[k].default for k in group if k in BROKER_KEYS}
        layers: list[tuple[Mapping[str, Any], ConfigSource]] = [
            (self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.settings, ConfigSource.STATIC_BROKER_CONFIG),
            ({k: v for k, v in defaults.items() if v is not None}, ConfigSource.DEFAULT_CONFIG),
        ]
        found = [(k, layer[k], source) for layer, source in layers for k in group if k in layer]
        while found and found[0][0] != key:
            found.pop(0)
        if not per_broker:
            found = [s for s in found if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        return found

    def source(self, key: str) -> ConfigSource:
        """Where ``key``'s value comes from: its first synonym's source, as Kafka reports it."""
        synonyms = self.synonyms(key)
        return synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG

    @property
    def node_id(self) -> int:
        return int(self.get("node.id"))

    @property
    def advertised_host(self) -> str:
        if self.get("advertised.host"):
            return str(self.get("advertised.host"))
        listeners = self.get("advertised.listeners")
        if listeners:
            return _split_listener(listeners[0])[0]
        return self.host

    def advertised_port(self, bound_port: int) -> int:
        """The port in Metadata; ``bound_port`` is the real one (``--port 0`` picks it late)."""
        if self.get("advertised.port"):
            return int(self.get("advertised.port"))
        listeners = self.get("advertised.listeners")
        if listeners:
            return _split_listener(listeners[0])[1] or bound_port
        return bound_port

    def log_config(self) -> LogConfig:
        """Defaults of every partition log, from the explicitly given and dynamic broker keys
        (a dynamic key also replaces the static keys of its synonym group, as in Kafka)."""
        props = {k: render(v) for k, v in self.settings.items()}
        for layer in (self.dynamic_default, self.dynamic_broker):
            for key, value in layer.items():
                for synonym in SYNONYMS.get(key, (key,)):
                    props.pop(synonym, None)
                props[key] = render(value)
        return LogConfig.from_broker_properties(props)

    def topic_default_source(self, topic_key: str) -> ConfigSource:
        return self.source(TOPIC_TO_BROKER_KEY[topic_key])


def _check_data_dir(settings: Mapping[str, Any], data_dir: Path) -> None:
    """``log.dirs`` / ``log.dir`` must name the one data directory (``--data-dir``) when given: a
    Kafka config file's other directory would otherwise be ignored while data went elsewhere."""
    for key in ("log.dirs", "log.dir"):
        value = settings.get(key)
        if value is None:
            continue
        dirs = [part.strip() for part in value.split(",") if part.strip()]
        if len(dirs) != 1:
            raise ConfigError(f"{key}: {value!r}: this broker keeps its data in one directory,"
                              f" the --data-dir {data_dir}")
        if Path(dirs[0]).expanduser().resolve() != data_dir.expanduser().resolve():
            raise ConfigError(f"{key}: {dirs[0]!r} is not the data directory --data-dir {data_dir}"
                              " (the data would be kept there, not here)")


def _check_cleaner_buffer(settings: Mapping[str, Any]) -> None:
    """Kafka's rule: each cleaner thread's key map gets more than 1 MiB of
    ``log.cleaner.dedupe.buffer.size`` (no thread, no map: nothing to check)."""
    threads = settings.get("log.cleaner.threads", 1)
    size = settings.get("log.cleaner.dedupe.buffer.size", CLEANER_DEDUPE_BUFFER_SIZE)
    if threads > 0 and size // threads <= 1024 * 1024:
        raise ConfigError(f"log.cleaner.dedupe.buffer.size: {size} must be at least 1MB per cleaner"
                          f" thread (more than 1048576 bytes for each of {threads})")


def _split_listener(listener: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` (or ``host:port``) into host and port; port 0 means "bound"."""
    rest = listener.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"advertised.listeners: {listener!r} is not NAME://host:port")
    return host.strip("[]"), int(port)


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
