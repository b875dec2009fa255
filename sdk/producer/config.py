"""Producer settings: names, defaults and validation in one place.

Names follow aiokafka where aiokafka has the setting, and the Java client otherwise
(``buffer_memory``, ``max_block_ms``, ``delivery_timeout_ms``). Every problem raises ``ConfigError``
naming the offending option, at construction, so a typo fails fast instead of at the first send.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from sdk.client.config import ClientConfig
from sdk.errors import ConfigError
from sdk.producer.interceptors import ProducerInterceptor
from sdk.producer.partitioner import Partitioner
from sdk.records import Compression

__all__ = ["ProducerConfig"]

_COMPRESSION = {
    None: Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
#: aiokafka spellings accepted for the same setting.
_ALIASES = {"max_batch_size": "batch_size"}
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5
#: aiokafka options with no meaning here, and why: accepted (with a warning) so code written
#: for aiokafka runs after changing the import.
_AIOKAFKA_IGNORED = {
    "loop": "the running event loop is always used (aiokafka deprecated this option too)",
    "api_version": "API versions are negotiated with each broker (ApiVersions)",
    "connections_max_idle_ms": "connections are kept until the producer stops",
    "sasl_kerberos_service_name": "GSSAPI (Kerberos) is not supported",
    "sasl_kerberos_domain_name": "GSSAPI (Kerberos) is not supported",
}


def _warn_ignored(option: str, value: Any) -> None:
    if option == "loop":
        category: type[Warning] = DeprecationWarning
    else:
        category = UserWarning
    warnings.warn(
        f"producer option {option}={value!r} is ignored: {_AIOKAFKA_IGNORED[option]}", category, stacklevel=4
    )


@dataclass
class ProducerConfig(ClientConfig):
    """Validated producer settings; the connection settings are ``ClientConfig``'s.

    The one declaration of every producer option's name, type and default: ``Producer.__init__``
    takes its keyword arguments with these defaults (``= ProducerConfig.<name>``), documents each
    one, and tests/sdk/producer/test_config_declaration.py checks that the two list the same
    options with the same types, so neither can change alone."""

    default_client_id: ClassVar[str] = "sdk-producer"

    acks: int | str = "all"
    compression_type: str | None = None
    batch_size: int = 16384
    linger_ms: float = 5
    max_request_size: int = 1048576
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: float = 60000
    delivery_timeout_ms: float = 120000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: bool | None = None
    transactional_id: str | None = None
    transaction_timeout_ms: float = 60000
    enable_two_phase_commit: bool = False
    partitioner: Partitioner | str | Callable[..., int] | None = None
    interceptors: Iterable[ProducerInterceptor] = ()
    key_serializer: Callable[[Any], bytes | None] | None = None
    value_serializer: Callable[[Any], bytes | None] | None = None
    # Derived by validate():
    acks_value: int = field(default=-1, init=False)
    compression: Compression = field(default=Compression.NONE, init=False)
    idempotent: bool = field(default=True, init=False)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ProducerConfig:
        """Validated settings from keyword arguments; aiokafka's spellings are accepted (see
        ``_ALIASES``) and its options without a meaning here are dropped with a warning."""
        names = {f.name for f in fields(cls) if f.init}
        given: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in _AIOKAFKA_IGNORED:
                _warn_ignored(key, value)
                continue
            key = _ALIASES.get(key, key)
            if key not in names:
                raise ConfigError(key, "unknown producer option")
            given[key] = value
        config = cls(**given)
        config.validate()
        return config

    def validate(self) -> None:
        super().validate()
        try:
            self.acks_value = _ACKS[self.acks]
        except (KeyError, TypeError):
            raise ConfigError("acks", f"must be 0, 1 or 'all' (-1), not {self.acks!r}") from None
        key = (
            self.compression_type.lower() if isinstance(self.compression_type, str) else self.compression_type
        )
        if key not in _COMPRESSION:
            raise ConfigError(
                "compression_type",
                f"must be None, 'gzip', 'snappy', 'lz4' or 'zstd', not {self.compression_type!r}",
            )
        self.compression = _COMPRESSION[key]
        for name in (
            "batch_size",
            "max_request_size",
            "buffer_memory",
            "max_in_flight_requests_per_connection",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, f"must be a positive integer, not {value!r}")
        for name in ("linger_ms", "max_block_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(name, f"must be a number >= 0, not {value!r}")
        for name in ("delivery_timeout_ms", "transaction_timeout_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(name, f"must be a number > 0, not {value!r}")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                "delivery_timeout_ms",
                f"must be at least linger_ms + request_timeout_ms "
                f"({self.linger_ms} + {self.request_timeout_ms}), not {self.delivery_timeout_ms}",
            )
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(name, f"must be callable, not {value!r}")
        self.interceptors = tuple(self.interceptors or ())
        for interceptor in self.interceptors:
            if not hasattr(interceptor, "on_send") or not hasattr(interceptor, "on_acknowledgement"):
                raise ConfigError("interceptors", f"{interceptor!r} is not a ProducerInterceptor")
        self._validate_idempotence()

    def _validate_idempotence(self) -> None:
        explicit = self.enable_idempotence
        if explicit not in (None, True, False):
            raise ConfigError("enable_idempotence", f"must be True, False or None, not {explicit!r}")
        if not isinstance(self.enable_two_phase_commit, bool):
            raise ConfigError(
                "enable_two_phase_commit", f"must be True or False, not {self.enable_two_phase_commit!r}"
            )
        if self.enable_two_phase_commit and self.transactional_id is None:
            raise ConfigError("enable_two_phase_commit", "two-phase commit needs a transactional_id")
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ConfigError("transactional_id", "must be a non-empty string")
            if explicit is False:
                raise ConfigError("enable_idempotence", "a transactional producer is always idempotent")
            explicit = True
        in_flight = self.max_in_flight_requests_per_connection
        if explicit:
            if self.acks_value != -1:
                raise ConfigError(
                    "enable_idempotence", f"idempotence needs acks='all', but acks={self.acks!r}"
                )
            if in_flight > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
                raise ConfigError(
                    "max_in_flight_requests_per_connection",
                    f"idempotence keeps order only with at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} requests "
                    f"in flight, not {in_flight}",
                )
            self.idempotent = True
        elif explicit is None:
            # Kafka 3+ default: on whenever the other settings allow it.
            self.idempotent = self.acks_value == -1 and in_flight <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
        else:
            self.idempotent = False
