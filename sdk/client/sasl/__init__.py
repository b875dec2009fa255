"""SASL authentication as a plug-in slot of the connection layer.

After ApiVersions, a connection with a SASL security protocol sends ``SaslHandshake`` naming the
mechanism and then exchanges ``SaslAuthenticate`` tokens until the mechanism says it is done. The
mechanism itself is a small sans-IO object (``SaslMechanism``): it turns server challenges into
client responses and never touches the socket, so SCRAM or OAUTHBEARER can be added without
changing ``Connection``. PLAIN is built in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from sdk.errors import ConfigError

__all__ = ["PlainMechanism", "SaslMechanism", "create_mechanism"]


class SaslMechanism(ABC):
    """One side of a SASL exchange; ``name`` is what SaslHandshake announces (e.g. ``"PLAIN"``)."""

    name: str = ""

    @abstractmethod
    def initial_response(self) -> bytes:
        """The first token the client sends."""

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The reply to a server token, or None when the exchange is complete."""
        return None

    @property
    def complete(self) -> bool:
        """True once no more tokens need to be exchanged."""
        return True


class PlainMechanism(SaslMechanism):
    """RFC 4616 PLAIN: one message, ``authzid NUL authcid NUL password``. Only safe over TLS."""

    name = "PLAIN"

    def __init__(self, username: str, password: str, authorization_id: str = ""):
        self._token = b"\0".join(s.encode("utf-8") for s in (authorization_id, username, password))

    def initial_response(self) -> bytes:
        return self._token


def create_mechanism(
    mechanism: str | SaslMechanism,
    *,
    username: str | None = None,
    password: str | None = None,
) -> SaslMechanism:
    """A mechanism object for the ``sasl_mechanism`` setting (a name or a ready instance)."""
    if isinstance(mechanism, SaslMechanism):
        return mechanism
    name = str(mechanism).upper()
    if name == "PLAIN":
        if username is None or password is None:
            raise ConfigError(
                "sasl_plain_username", "PLAIN needs sasl_plain_username and sasl_plain_password"
            )
        return PlainMechanism(username, password)
    raise ConfigError(
        "sasl_mechanism",
        f"mechanism {mechanism!r} is not built in (only PLAIN is); pass a SaslMechanism instance "
        "to plug another one in",
    )
