"""Per-connection security state: who the client is and where its SASL exchange stands.

Kafka's SaslServerAuthenticator rules, kept here so the network layer needs only two questions
answered per request (``authenticated``, ``allows``):

- before authentication, only ApiVersions (first, once) and SaslHandshake, then only
  SaslAuthenticate are accepted; any other request closes the connection;
- a refused credential is answered (SaslAuthenticate's SASL_AUTHENTICATION_FAILED, or
  SaslHandshake's UNSUPPORTED_SASL_MECHANISM) and the connection closed after it;
- SaslHandshake v0 means the tokens that follow are raw size-prefixed frames without a Kafka
  header (``raw_tokens``);
- re-authentication (KIP-368): an authenticated client may send SaslHandshake + SaslAuthenticate
  again with the same mechanism and principal; once the session lifetime announced in
  SaslAuthenticate's ``session_lifetime_ms`` has passed, any other request closes the connection.
"""

from __future__ import annotations

import enum
import logging
import time

from reference_broker.security.errors import SaslAuthenticationFailed
from reference_broker.security.listeners import Listener
from reference_broker.security.sasl import SaslServer, SaslSettings

log = logging.getLogger("reference_broker.security")

ANONYMOUS = "User:ANONYMOUS"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


_REAUTH = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


_ALLOWED = {
    SaslState.HANDSHAKE_OR_VERSIONS: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    SaslState.HANDSHAKE: frozenset({SASL_HANDSHAKE}),
    SaslState.AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    SaslState.FAILED: frozenset(),
}


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Session:
    """One connection's listener, principal and SASL progress."""

    __slots__ = (
        "authenticated",
        "expires_at_ms",
        "listener",
        "mechanism",
        "principal",
        "raw_tokens",
        "reauthenticating",
        "sasl",
        "server",
        "state",
    )

    def __init__(self, listener: Listener, sasl: SaslSettings | None, principal: str = ANONYMOUS):
        self.listener = listener
        self.sasl = sasl
        self.principal = principal
        #: False only while a SASL listener's first authentication is unfinished.
        self.authenticated = sasl is None
        self.state = SaslState.HANDSHAKE_OR_VERSIONS if sasl is not None else SaslState.COMPLETE
        self.server: SaslServer | None = None
        self.mechanism: str | None = None
        #: Monotonic ms after which only re-authentication is accepted (None: never).
        self.expires_at_ms: int | None = None
        self.raw_tokens = False
        self.reauthenticating = False

    def refusal(self, api_key: int) -> str | None:
        """Why request ``api_key`` may not be served now (the connection is then closed)."""
        if not self.authenticated:
            if api_key in _ALLOWED.get(self.state, frozenset()):
                if api_key == API_VERSIONS:
                    self.state = SaslState.HANDSHAKE
                return None
            phase = "authentication" if self.state == SaslState.AUTHENTICATE else "handshake"
            return f"Unexpected Kafka request of type {api_key} during SASL {phase}"
        expires = self.expires_at_ms
        if expires is not None and api_key not in _REAUTH and monotonic_ms() >= expires:
            return "the SASL session expired without re-authentication"
        return None

    # -- SaslHandshake / SaslAuthenticate -------------------------------------------------------

    def start(self, mechanism: str, version: int) -> str | None:
        """SaslHandshake: None when ``mechanism`` may start, else why not (close after)."""
        assert self.sasl is not None
        if mechanism not in self.sasl.mechanisms:
            self.state = SaslState.FAILED
            return f"Unsupported SASL mechanism {mechanism}"
        if self.authenticated:
            if mechanism != self.mechanism:
                self.state = SaslState.FAILED
                return (
                    f"SaslHandshakeRequest mechanism {mechanism} differs from the original mechanism"
                    f" {self.mechanism} of this connection"
                )
            self.reauthenticating = True
        self.mechanism = mechanism
        self.server = self.sasl.new_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        self.raw_tokens = version == 0
        return None

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """One SaslAuthenticate token: the challenge and, once complete, the session lifetime in
        ms (0: none). Raises ``SaslAuthenticationFailed``; the caller closes the connection."""
        server = self.server
        if server is None or self.state != SaslState.AUTHENTICATE:
            raise SaslAuthenticationFailed("Unexpected SaslAuthenticate outside a SASL exchange")
        try:
            challenge = server.evaluate(token)
            if not server.complete:
                return challenge, 0
            principal = f"User:{server.authorization_id}"
            if self.reauthenticating and principal != self.principal:
                raise SaslAuthenticationFailed(
                    f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                )
        except SaslAuthenticationFailed:
            self.state = SaslState.FAILED
            self.server = None
            raise
        self.principal = principal
        self.authenticated = True
        self.reauthenticating = False
        self.state = SaslState.COMPLETE
        self.server = None
        self.raw_tokens = False
        return challenge, self._start_session(server)

    def _start_session(self, server: SaslServer) -> int:
        assert self.sasl is not None and self.mechanism is not None
        now = monotonic_ms()
        reauth_ms = self.sasl.reauth_ms.get(self.mechanism, 0)
        lifetime: int | None = None
        if server.lifetime_ms is not None:
            lifetime = max(0, server.lifetime_ms - int(time.time() * 1000))
        if reauth_ms > 0:
            lifetime = reauth_ms if lifetime is None else min(lifetime, reauth_ms)
        self.expires_at_ms = None if lifetime is None else now + lifetime
        return lifetime or 0
