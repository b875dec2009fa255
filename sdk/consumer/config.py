"""Consumer settings: names, defaults and validation in one place.

Names and defaults follow aiokafka's ``AIOKafkaConsumer`` (so code written for it keeps its
meaning), with the Java client's names for what aiokafka lacks (``retry_backoff_max_ms``,
``allow_auto_create_topics``). The connection settings are ``ClientConfig``'s, shared with the
producer. Every problem raises ``ConfigError`` naming the offending option, at construction, so
a typo fails fast instead of at the first fetch.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sdk.client.config import ClientConfig
from sdk.errors import ConfigError

__all__ = [
    "AIOKAFKA_IGNORED",
    "AUTO_OFFSET_RESETS",
    "CLASSIC_ONLY",
    "GROUP_PROTOCOLS",
    "ISOLATION_LEVELS",
    "ConsumerConfig",
    "warn_ignored",
]

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")
#: The group protocols (Java's ``group.protocol``): the classic rebalance protocol, or KIP-848's.
GROUP_PROTOCOLS = ("classic", "consumer")
#: Settings of the classic protocol only, with their defaults: with ``group_protocol="consumer"``
#: the broker owns the session timeout, the heartbeat interval and the assignor, so setting one
#: is an error (Java's consumer refuses them too).
CLASSIC_ONLY = {
    "partition_assignment_strategy": "range",
    "session_timeout_ms": 10000,
    "heartbeat_interval_ms": 3000,
}
#: isolation_level name -> the FetchRequest/ListOffsetsRequest int8.
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
_GROUP_ID = re.compile(r"\S")
#: aiokafka consumer options with no meaning here, and why: accepted with a warning so code
#: written for aiokafka runs after changing the import (as the producer does).
AIOKAFKA_IGNORED = {
    "loop": "the running event loop is always used (aiokafka deprecated this option too)",
    "api_version": "API versions are negotiated with each broker (ApiVersions)",
    "connections_max_idle_ms": "connections are kept until the consumer stops",
    "sasl_kerberos_service_name": "GSSAPI (Kerberos) is not supported",
    "sasl_kerberos_domain_name": "GSSAPI (Kerberos) is not supported",
}


def warn_ignored(option: str, value: Any) -> None:
    """The warning for an aiokafka option accepted without effect."""
    category: type[Warning] = DeprecationWarning if option == "loop" else UserWarning
    warnings.warn(
        f"consumer option {option}={value!r} is ignored: {AIOKAFKA_IGNORED[option]}", category, stacklevel=3
    )


@dataclass
class ConsumerConfig(ClientConfig):
    """Validated consumer settings (see ``Consumer`` for what each one means); the connection
    settings are ``ClientConfig``'s (with aiokafka's consumer default ``request_timeout_ms``)."""

    default_client_id: ClassVar[str] = "sdk-consumer"

    request_timeout_ms: float = 40000
    group_id: str | None = None
    group_instance_id: str | None = None
    key_deserializer: Callable[[bytes | None], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: float = 5000
    isolation_level: str = "read_uncommitted"
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: float = 500
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 1048576
    max_poll_records: int | None = None
    max_poll_interval_ms: float = 300000
    session_timeout_ms: float = 10000
    heartbeat_interval_ms: float = 3000
    rebalance_timeout_ms: float | None = None
    partition_assignment_strategy: Any = "range"
    check_crcs: bool = True
    exclude_internal_topics: bool = True
    allow_auto_create_topics: bool = True
    consumer_timeout_ms: float = 200
    client_rack: str | None = None
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None
    #: ``ConsumerInterceptor``s (``sdk.consumer.interceptors``), run in order.
    interceptors: Any = ()
    # Derived by validate():
    isolation: int = field(default=0, init=False)

    def validate(self) -> None:
        """Raise ``ConfigError`` for the first bad or conflicting setting; fill derived fields."""
        super().validate()
        for name in ("group_id", "group_instance_id", "client_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _GROUP_ID.search(value)):
                raise ConfigError(name, f"must be a non-empty string or None, not {value!r}")
        if self.client_rack is not None and not isinstance(self.client_rack, str):
            raise ConfigError("client_rack", f"must be a string or None, not {self.client_rack!r}")
        if self.group_instance_id is not None and self.group_id is None:
            raise ConfigError("group_instance_id", "static membership needs a group_id")
        if self.auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ConfigError(
                "auto_offset_reset", f"must be one of {AUTO_OFFSET_RESETS}, not {self.auto_offset_reset!r}"
            )
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(
                "isolation_level",
                f"must be 'read_uncommitted' or 'read_committed', not {self.isolation_level!r}",
            )
        self.isolation = ISOLATION_LEVELS[self.isolation_level]
        flags = ("enable_auto_commit", "check_crcs", "exclude_internal_topics", "allow_auto_create_topics")
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, not {getattr(self, name)!r}")
        for name in ("fetch_min_bytes", "fetch_max_bytes", "max_partition_fetch_bytes"):
            _positive_int(name, getattr(self, name))
        if self.max_poll_records is not None:
            _positive_int("max_poll_records", self.max_poll_records)
        for name in ("fetch_max_wait_ms", "consumer_timeout_ms"):
            _number(name, getattr(self, name), minimum_exclusive=False)
        for name in (
            "auto_commit_interval_ms",
            "max_poll_interval_ms",
            "session_timeout_ms",
            "heartbeat_interval_ms",
        ):
            _number(name, getattr(self, name), minimum_exclusive=True)
        if self.rebalance_timeout_ms is None:
            self.rebalance_timeout_ms = self.session_timeout_ms
        _number("rebalance_timeout_ms", self.rebalance_timeout_ms, minimum_exclusive=True)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                "heartbeat_interval_ms",
                f"must be lower than session_timeout_ms ({self.session_timeout_ms}), "
                f"not {self.heartbeat_interval_ms}",
            )
        if self.fetch_max_wait_ms >= self.request_timeout_ms:
            raise ConfigError(
                "request_timeout_ms",
                f"must be larger than fetch_max_wait_ms ({self.fetch_max_wait_ms}), or every long "
                f"poll would time out; got {self.request_timeout_ms}",
            )
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(name, f"must be callable, not {value!r}")
        if self.partition_assignment_strategy is None or self.partition_assignment_strategy in ("", (), []):
            raise ConfigError("partition_assignment_strategy", "at least one assignor is needed")
        self.interceptors = tuple(self.interceptors or ())
        for interceptor in self.interceptors:
            if not callable(getattr(interceptor, "on_consume", None)):
                raise ConfigError("interceptors", f"{interceptor!r} is not a ConsumerInterceptor")
        self._validate_group_protocol()

    def _validate_group_protocol(self) -> None:
        if not isinstance(self.group_protocol, str) or self.group_protocol.lower() not in GROUP_PROTOCOLS:
            raise ConfigError(
                "group_protocol", f"must be 'classic' or 'consumer', not {self.group_protocol!r}"
            )
        self.group_protocol = self.group_protocol.lower()
        assignor = self.group_remote_assignor
        if assignor is not None and (not isinstance(assignor, str) or not _GROUP_ID.search(assignor)):
            raise ConfigError(
                "group_remote_assignor", f"must be a non-empty string or None, not {assignor!r}"
            )
        if self.group_protocol == "classic":
            if assignor is not None:
                raise ConfigError("group_remote_assignor", "is a setting of group_protocol='consumer' only")
            return
        for name, default in CLASSIC_ONLY.items():
            if getattr(self, name) != default:
                raise ConfigError(
                    name,
                    "is not supported with group_protocol='consumer': the group coordinator decides it "
                    "(group.consumer.* broker settings; choose a server assignor with group_remote_assignor)",
                )


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, f"must be a positive integer, not {value!r}")


def _number(name: str, value: Any, *, minimum_exclusive: bool) -> None:
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad:
        bad = value <= 0 if minimum_exclusive else value < 0
    if bad:
        raise ConfigError(name, f"must be a number {'>' if minimum_exclusive else '>='} 0, not {value!r}")
