"""OAUTHBEARER (RFC 7628) with a token provider, as aiokafka's ``sasl_oauth_token_provider``.

The provider is any object with a ``token()`` method returning the bearer token (a coroutine or a
plain function) and optionally ``extensions()`` returning SASL extensions (KIP-342). It is asked
before every authentication, so re-authentication (KIP-368) presents a fresh token. When the
broker rejects the token it sends a JSON error as a challenge; RFC 7628 has the client answer with
a lone ``0x01`` so the broker can finish with SASL_AUTHENTICATION_FAILED, whose message carries
that JSON.

``UnsecuredJwsTokenProvider`` makes the unsecured JSON Web Signatures (``alg: none``) that Kafka's
``OAuthBearerUnsecuredLoginCallbackHandler`` makes and its default validator accepts: for tests
and development only, never for production.
"""

from __future__ import annotations

import base64
import inspect
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from sdk.client.sasl.base import SaslMechanism
from sdk.errors import ConfigError, SaslStateError

__all__ = ["AbstractTokenProvider", "OAuthBearerMechanism", "UnsecuredJwsTokenProvider", "unsecured_jws"]

_SEPARATOR = "\x01"
#: Kafka's OAuthBearerClientInitialResponse rules for extension keys and values.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


class AbstractTokenProvider(ABC):
    """aiokafka's token provider shape: ``await token()`` gives the bearer token."""

    def __init__(self, **config: Any) -> None:
        self.config = config

    @abstractmethod
    async def token(self) -> str:
        """The token to present now (fetch or refresh it here)."""

    def extensions(self) -> Mapping[str, str]:
        """SASL extensions sent with the token (KIP-342); none by default."""
        return {}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unsecured_jws(
    subject: str,
    *,
    lifetime_s: float = 3600,
    scope: str | list[str] | None = None,
    issued_at: float | None = None,
    claims: Mapping[str, Any] | None = None,
) -> str:
    """An unsigned token ``header.payload.`` with ``sub``, ``iat`` and ``exp`` (seconds), as
    Kafka's unsecured login module issues; ``claims`` adds or overrides claims."""
    now = time.time() if issued_at is None else issued_at
    payload: dict[str, Any] = {"sub": subject, "iat": int(now), "exp": int(now + lifetime_s)}
    if scope is not None:
        payload["scope"] = scope
    payload.update(claims or {})
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(payload, separators=(",", ":")).encode())
    return f"{header}.{body}."


class UnsecuredJwsTokenProvider(AbstractTokenProvider):
    """A fresh unsecured JWS for ``subject`` at every authentication (tests, development)."""

    def __init__(self, subject: str, *, lifetime_s: float = 3600, scope: str | list[str] | None = None):
        super().__init__(subject=subject, lifetime_s=lifetime_s, scope=scope)
        self.subject = subject
        self.lifetime_s = lifetime_s
        self.scope = scope

    async def token(self) -> str:
        return unsecured_jws(self.subject, lifetime_s=self.lifetime_s, scope=self.scope)


def check_token_provider(provider: Any) -> None:
    """``ConfigError`` unless ``provider`` has a callable ``token``."""
    if provider is None:
        raise ConfigError("sasl_oauth_token_provider", "OAUTHBEARER needs a token provider")
    if not callable(getattr(provider, "token", None)):
        raise ConfigError(
            "sasl_oauth_token_provider",
            f"must have a token() method (like aiokafka's AbstractTokenProvider), not {provider!r}",
        )


class OAuthBearerMechanism(SaslMechanism):
    """The client side of OAUTHBEARER, with the token from ``token_provider``."""

    name = "OAUTHBEARER"

    def __init__(self, token_provider: Any):
        check_token_provider(token_provider)
        self._provider = token_provider
        self._message = b""
        self._state = "new"
        #: The broker's JSON error challenge, when it refused the token.
        self.server_error: str | None = None

    async def prepare(self) -> None:
        token = self._provider.token()
        if inspect.isawaitable(token):
            token = await token
        if not isinstance(token, str) or not token:
            raise ConfigError("sasl_oauth_token_provider", f"token() gave {token!r}, not a token string")
        extensions_of = getattr(self._provider, "extensions", None)
        extensions = dict(extensions_of() or {}) if callable(extensions_of) else {}
        parts = [f"auth=Bearer {token}"]
        for key, value in extensions.items():
            if key == "auth" or not _EXTENSION_KEY.fullmatch(key) or not _EXTENSION_VALUE.fullmatch(value):
                raise ConfigError("sasl_oauth_token_provider", f"bad SASL extension {key!r}={value!r}")
            parts.append(f"{key}={value}")
        self._message = ("n,," + _SEPARATOR + _SEPARATOR.join(parts) + _SEPARATOR * 2).encode("utf-8")

    def initial_response(self) -> bytes:
        if not self._message:
            raise SaslStateError("OAUTHBEARER: prepare() must fetch the token first")
        self._state = "sent"
        self.server_error = None
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state != "sent":
            raise SaslStateError(f"unexpected OAUTHBEARER challenge in state {self._state}")
        if challenge:
            # The broker refused the token; acknowledge so it ends the exchange with the error.
            self.server_error = challenge.decode("utf-8", errors="replace")
            self._state = "refused"
            return _SEPARATOR.encode()
        self._state = "done"
        return None

    @property
    def complete(self) -> bool:
        return self._state == "done"
