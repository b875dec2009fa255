"""Settings every client (producer, consumer, admin) shares: where the cluster is, how long to
wait, how to back off, how to authenticate.

Each client's own config class (``ProducerConfig``, ...) is a subclass that adds its settings, so
users still pass one flat set of keyword arguments, every shared setting is validated in one
place, and ``KafkaClient.from_config(config)`` builds the connection layer from it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, ClassVar

from sdk.client.connection import SECURITY_PROTOCOLS
from sdk.client.sasl import create_mechanism
from sdk.errors import ConfigError

__all__ = ["ClientConfig"]


@dataclass
class ClientConfig:
    """Validated connection settings (aiokafka's names)."""

    #: ``"host:port,host:port"`` or a list of ``host:port``: where to fetch cluster metadata first.
    bootstrap_servers: str | list[str] = "localhost:9092"
    #: Sent with every request (broker logs, quotas); None: ``default_client_id``.
    client_id: str | None = None
    #: How long to wait for a response before the connection is closed and the request retried.
    request_timeout_ms: float = 30000
    #: How long a TCP (and TLS/SASL) connection attempt may take.
    connect_timeout_ms: float = 10000
    #: First and longest wait before retrying a failed request (exponential in between).
    retry_backoff_ms: float = 100
    retry_backoff_max_ms: float = 1000
    #: First and longest wait before reconnecting to a broker (exponential in between).
    reconnect_backoff_ms: float = 50
    reconnect_backoff_max_ms: float = 1000
    #: Metadata is refreshed at least this often, even without errors.
    metadata_max_age_ms: float = 300000
    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    security_protocol: str = "PLAINTEXT"
    #: TLS settings for SSL and SASL_SSL (``ssl.create_default_context()`` when None; see
    #: ``sdk.helpers.create_ssl_context`` for a custom CA and client certificates).
    ssl_context: ssl.SSLContext | None = None
    #: For the SASL protocols: ``'PLAIN'`` (also when None), ``'SCRAM-SHA-256'``,
    #: ``'SCRAM-SHA-512'``, ``'OAUTHBEARER'`` or a ``sdk.client.SaslMechanism`` instance.
    sasl_mechanism: Any = None
    #: User name and password of PLAIN and SCRAM.
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None
    #: OAUTHBEARER's token source: an object with a ``token()`` coroutine (aiokafka's
    #: ``AbstractTokenProvider``), asked at every (re-)authentication.
    sasl_oauth_token_provider: Any = None

    #: The client id used when ``client_id`` is None (subclasses name their client).
    default_client_id: ClassVar[str] = "sdk"

    @property
    def effective_client_id(self) -> str:
        return self.client_id or self.default_client_id

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first bad setting."""
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers", "at least one host:port is needed")
        if self.client_id is not None and not isinstance(self.client_id, str):
            raise ConfigError("client_id", "must be a string")
        for name in (
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "reconnect_backoff_ms",
            "reconnect_backoff_max_ms",
        ):
            _check_number(name, getattr(self, name), positive=False)
        for name in ("request_timeout_ms", "connect_timeout_ms", "metadata_max_age_ms"):
            _check_number(name, getattr(self, name), positive=True)
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError("security_protocol", f"must be one of {SECURITY_PROTOCOLS}")
        self._validate_security()

    def _validate_security(self) -> None:
        """TLS settings only with a TLS protocol, SASL settings only with a SASL one, and what the
        chosen mechanism needs; a setting that would be ignored is an error, not a surprise."""
        protocol = self.security_protocol
        if self.ssl_context is not None:
            if not isinstance(self.ssl_context, ssl.SSLContext):
                raise ConfigError("ssl_context", f"must be an ssl.SSLContext, not {self.ssl_context!r}")
            if protocol not in ("SSL", "SASL_SSL"):
                raise ConfigError(
                    "ssl_context", f"is only used with security_protocol SSL or SASL_SSL, not {protocol}"
                )
        if protocol.startswith("SASL"):
            create_mechanism(
                "PLAIN" if self.sasl_mechanism is None else self.sasl_mechanism,
                username=self.sasl_plain_username,
                password=self.sasl_plain_password,
                token_provider=self.sasl_oauth_token_provider,
            )
            return
        sasl_only = f"is only used with security_protocol SASL_PLAINTEXT or SASL_SSL, not {protocol}"
        for option in ("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider"):
            if getattr(self, option) is not None:
                raise ConfigError(option, sasl_only)
        if self.sasl_mechanism not in (None, "PLAIN"):
            raise ConfigError("sasl_mechanism", sasl_only)


def _check_number(name: str, value: Any, *, positive: bool) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value < 0
        or (positive and value == 0)
    ):
        raise ConfigError(name, f"must be a number {'>' if positive else '>='} 0, not {value!r}")
