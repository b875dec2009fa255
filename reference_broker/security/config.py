"""The security settings read together and checked at start: listeners, TLS, SASL, authorizer.

``check_security_settings`` runs inside ``BrokerConfig.build``: every TLS listener's keystore and
truststore are loaded and every SASL listener's mechanisms resolved, so a setting the broker
cannot honour stops it before it binds, with an error naming the setting.
"""

from __future__ import annotations

import functools

from reference_broker.config import BrokerConfig, ConfigError, quorum_configured
from reference_broker.security.listeners import Listener, build_listeners, parse_protocol_map

#: Kafka's authorizers; both are served by ``reference_broker.security.authorizer``.
AUTHORIZER_CLASSES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
    }
)
DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


def configured_listeners(config: BrokerConfig) -> list[Listener]:
    """The listeners to bind, from ``listeners`` or, when it is empty, the CLI host and port."""
    if not config.get("listeners"):
        listener = Listener("PLAINTEXT", "PLAINTEXT", config.host, config.port)
        listener.advertised_host = config.advertised_host
        advertised_port = config.advertised_port(0)
        listener.advertised_port = advertised_port or None
        return [listener]
    for legacy in ("advertised.host", "advertised.port"):
        if config.settings.get(legacy) is not None:
            raise ConfigError(
                f"{legacy}: with listeners set, give advertised addresses in advertised.listeners"
            )
    listeners = build_listeners(
        config.get("listeners"),
        config.get("advertised.listeners"),
        parse_protocol_map(config.get("listener.security.protocol.map")),
        [n.upper() for n in config.get("controller.listener.names") or []]
        if quorum_configured(config) else (),
    )
    inter_broker = config.get("inter.broker.listener.name")
    if inter_broker and inter_broker.upper() not in {lst.name for lst in listeners}:
        raise ConfigError(f"inter.broker.listener.name: {inter_broker} is not one of the listeners")
    return listeners


def super_users(config: BrokerConfig) -> frozenset[str]:
    """``super.users``: ``User:alice;User:bob``."""
    text = config.get("super.users") or ""
    users = [u.strip() for u in text.split(";") if u.strip()]
    for user in users:
        kind, sep, name = user.partition(":")
        if not sep or not kind or not name:
            raise ConfigError(f"super.users: {user!r} is not a principal (Type:name, e.g. User:admin)")
    return frozenset(users)


def authorizer_enabled(config: BrokerConfig) -> bool:
    name = (config.get("authorizer.class.name") or "").strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name: {name!r} is not supported; use"
            " org.apache.kafka.metadata.authorizer.StandardAuthorizer (or leave it empty)"
        )
    return bool(name)


def check_security_settings(config: BrokerConfig) -> None:
    from reference_broker.security.sasl import SaslSettings
    from reference_broker.security.tls import server_context

    listeners = configured_listeners(config)
    for listener in listeners:
        if listener.uses_tls:
            server_context(listener.name, functools.partial(config.listener_get, listener.name))
        if listener.uses_sasl:
            SaslSettings.from_config(config, listener.name)
    builder = config.get("principal.builder.class")
    if builder and builder != DEFAULT_PRINCIPAL_BUILDER:
        raise ConfigError(f"principal.builder.class: only {DEFAULT_PRINCIPAL_BUILDER} is supported")
    authorizer_enabled(config)
    super_users(config)
