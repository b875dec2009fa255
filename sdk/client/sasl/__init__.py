"""SASL authentication as a plug-in slot of the connection layer.

After ApiVersions, a connection with a SASL security protocol sends ``SaslHandshake`` naming the
mechanism and then exchanges ``SaslAuthenticate`` tokens until the mechanism says it is done; when
the broker gives the session a lifetime (KIP-368) the connection runs the exchange again before it
ends. The mechanism itself is a small sans-IO object (``SaslMechanism``). Built in: PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER; any other ``SaslMechanism`` instance can be passed
as ``sasl_mechanism``. GSSAPI (Kerberos) is not supported and is refused by name.
"""

from __future__ import annotations

from typing import Any

from sdk.client.sasl.base import PlainMechanism, SaslMechanism
from sdk.client.sasl.oauthbearer import (
    AbstractTokenProvider,
    OAuthBearerMechanism,
    UnsecuredJwsTokenProvider,
    check_token_provider,
    unsecured_jws,
)
from sdk.client.sasl.scram import SCRAM_HASHES, ScramMechanism
from sdk.errors import ConfigError

__all__ = [
    "MECHANISMS",
    "AbstractTokenProvider",
    "OAuthBearerMechanism",
    "PlainMechanism",
    "SaslMechanism",
    "ScramMechanism",
    "UnsecuredJwsTokenProvider",
    "create_mechanism",
    "unsecured_jws",
]

#: The mechanism names ``sasl_mechanism`` accepts.
MECHANISMS = ("PLAIN", *SCRAM_HASHES, "OAUTHBEARER")


def create_mechanism(
    mechanism: str | SaslMechanism,
    *,
    username: str | None = None,
    password: str | None = None,
    token_provider: Any = None,
) -> SaslMechanism:
    """A mechanism object for the ``sasl_mechanism`` setting (a name or a ready instance).

    Raises ``ConfigError`` naming the setting that is missing or wrong.
    """
    if isinstance(mechanism, SaslMechanism):
        return mechanism
    if not isinstance(mechanism, str):
        raise ConfigError("sasl_mechanism", f"must be a mechanism name or a SaslMechanism, not {mechanism!r}")
    name = mechanism.upper()
    if name == "GSSAPI":
        raise ConfigError(
            "sasl_mechanism",
            "GSSAPI (Kerberos) is not supported; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
        )
    if name == "PLAIN" or name in SCRAM_HASHES:
        if username is None:
            raise ConfigError("sasl_plain_username", f"sasl_mechanism {name} needs sasl_plain_username")
        if password is None:
            raise ConfigError("sasl_plain_password", f"sasl_mechanism {name} needs sasl_plain_password")
        for option, value in (("sasl_plain_username", username), ("sasl_plain_password", password)):
            if not isinstance(value, str):
                raise ConfigError(option, f"must be a string, not {type(value).__name__}")
        if not username:
            raise ConfigError("sasl_plain_username", f"{name} needs a non-empty user name")
        if name == "PLAIN":
            return PlainMechanism(username, password)
        return ScramMechanism(name, username, password)
    if name == "OAUTHBEARER":
        check_token_provider(token_provider)
        return OAuthBearerMechanism(token_provider)
    raise ConfigError(
        "sasl_mechanism",
        f"unknown mechanism {mechanism!r}: one of {', '.join(MECHANISMS)}, or a SaslMechanism instance",
    )
