"""SASL mechanisms on the broker side: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER (GSSAPI is not
served, and naming it in ``sasl.enabled.mechanisms`` is an error at start).

``SaslSettings`` is what one SASL listener was configured with (``sasl.enabled.mechanisms``, the
``listener.name.<l>.<mechanism>.sasl.jaas.config`` entries, ``connections.max.reauth.ms``);
``new_server(mechanism)`` starts one exchange. A server's ``evaluate(token)`` returns the next
challenge and sets ``complete`` and ``authorization_id`` at the end; refused credentials raise
``SaslAuthenticationFailed``.

PLAIN users are the ``user_<name>="<password>"`` options of Kafka's PlainLoginModule entry.
OAUTHBEARER checks unsecured JWS tokens (``alg: none``) as Kafka's
OAuthBearerUnsecuredValidatorCallbackHandler does (principal claim, ``exp``, required scope,
clock skew), unless ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`` names a
Python callable ``validate(token: str, options: dict[str, str]) -> OAuthBearerToken`` (raising
``SaslAuthenticationFailed`` to refuse), the pluggable validator.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import importlib
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.security.errors import SaslAuthenticationFailed
from reference_broker.security.jaas import parse_jaas
from reference_broker.security.scram import MECHANISM_TYPES, ScramCredentialStore, ScramServer

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str
    #: When the credential stops being valid (OAUTHBEARER's ``exp``), ms since the epoch.
    lifetime_ms: int | None

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]):
        self.users = users
        self.complete = False
        self.authorization_id = ""
        self.lifetime_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = user
        self.complete = True
        return b""


@dataclasses.dataclass(frozen=True)
class OAuthBearerToken:
    """What a validator accepted: the principal name and when the token expires (ms)."""

    principal: str
    lifetime_ms: int


Validator = Callable[[str, dict[str, str]], OAuthBearerToken]


def _b64url_json(part: str) -> dict[str, Any]:
    padded = part + "=" * (-len(part) % 4)
    value = json.loads(base64.urlsafe_b64decode(padded))
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def unsecured_validator(token: str, options: dict[str, str]) -> OAuthBearerToken:
    """Kafka's unsecured JWS validation: ``header.payload.`` with ``alg: none``."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise SaslAuthenticationFailed("invalid_token: not an unsecured JWS (header.payload.)")
    try:
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    except ValueError as exc:
        raise SaslAuthenticationFailed(f"invalid_token: {exc}") from None
    if header.get("alg") != "none":
        raise SaslAuthenticationFailed("invalid_token: the unsecured validator takes alg none only")
    principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal:
        raise SaslAuthenticationFailed(f"invalid_token: no {principal_claim} claim")
    skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
    exp = claims.get("exp")
    if not isinstance(exp, int | float):
        raise SaslAuthenticationFailed("invalid_token: no exp claim")
    now_ms = int(time.time() * 1000)
    if exp * 1000 + skew_ms <= now_ms:
        raise SaslAuthenticationFailed("invalid_token: the token has expired")
    required = [s for s in options.get("unsecuredValidatorRequiredScope", "").split() if s]
    scope_claim = claims.get(options.get("unsecuredValidatorScopeClaimName", "scope"), [])
    scopes = scope_claim.split() if isinstance(scope_claim, str) else list(scope_claim or [])
    missing = [s for s in required if s not in scopes]
    if missing:
        raise SaslAuthenticationFailed(f"insufficient_scope: missing {', '.join(missing)}")
    return OAuthBearerToken(principal, int(exp * 1000))


class OAuthBearerServer:
    """RFC 7628: ``gs2-header \\x01 auth=Bearer <token> \\x01 ... \\x01\\x01``. A refused token is
    answered with the JSON error as a challenge; the client's ``\\x01`` then ends the exchange
    with the failure, as Kafka's OAuthBearerSaslServer does."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validator: Validator, options: dict[str, str]):
        self.validator = validator
        self.options = options
        self.complete = False
        self.authorization_id = ""
        self.lifetime_ms: int | None = None
        self._failure: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._failure is not None:
            raise SaslAuthenticationFailed(f"Authentication failed: {self._failure}")
        text = token.decode("utf-8", "replace")
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")):
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message")
        authzid = gs2.split(",")[1]
        fields = dict(kv.partition("=")[::2] for kv in rest.split("\x01") if kv)
        auth = fields.get("auth", "")
        scheme, _, bearer = auth.partition(" ")
        if scheme.lower() != "bearer" or not bearer:
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message: no bearer token")
        try:
            accepted = self.validator(bearer.strip(), self.options)
        except SaslAuthenticationFailed as exc:
            self._failure = str(exc)
            status = str(exc).split(":", 1)[0]
            return json.dumps({"status": status or "invalid_token"}).encode()
        if authzid.startswith("a=") and authzid[2:] != accepted.principal:
            raise SaslAuthenticationFailed(
                "Authentication failed: the authorization id differs from the token's principal"
            )
        self.authorization_id = accepted.principal
        self.lifetime_ms = accepted.lifetime_ms
        self.complete = True
        return b""


def _load_validator(setting: str, path: str) -> Validator:
    module_name, _, attr = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{setting}: cannot load {path!r}: {exc}") from None
    if not callable(target):
        raise ConfigError(f"{setting}: {path!r} is not callable")
    validator: Validator = target
    return validator


@dataclasses.dataclass
class SaslSettings:
    """One SASL listener's mechanisms and their settings."""

    listener: str
    mechanisms: list[str]
    plain_users: dict[str, str]
    oauth_validator: Validator
    oauth_options: dict[str, str]
    reauth_ms: dict[str, int]
    scram_store: ScramCredentialStore | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig, listener: str) -> SaslSettings:
        key = f"listener.name.{listener.lower()}"
        mechanisms = [m.upper() for m in config.listener_get(listener, "sasl.enabled.mechanisms")]
        if not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms: listener {listener} has no SASL mechanism")
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            default = " (Kafka's default)" if "sasl.enabled.mechanisms" not in config.settings else ""
            raise ConfigError(
                f"sasl.enabled.mechanisms: {', '.join(unsupported)}{default} not supported on listener"
                f" {listener}; this broker serves {', '.join(SUPPORTED_MECHANISMS)}"
            )
        plain_users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            setting = f"{key}.plain.sasl.jaas.config"
            text = config.settings.get(setting)
            if not text:
                raise ConfigError(
                    f'{setting}: PLAIN on listener {listener} needs its users (user_<name>="pw")'
                )
            entry = parse_jaas(setting, text)
            plain_users = {k[5:]: v for k, v in entry.options.items() if k.startswith("user_")}
        oauth_options: dict[str, str] = {}
        validator: Validator = unsecured_validator
        if "OAUTHBEARER" in mechanisms:
            setting = f"{key}.oauthbearer.sasl.jaas.config"
            if config.settings.get(setting):
                oauth_options = parse_jaas(setting, config.settings[setting]).options
            handler_setting = f"{key}.oauthbearer.sasl.server.callback.handler.class"
            if config.settings.get(handler_setting):
                validator = _load_validator(handler_setting, config.settings[handler_setting])
        reauth = {}
        for mechanism in mechanisms:
            per_mech = config.settings.get(f"{key}.{mechanism.lower()}.connections.max.reauth.ms")
            reauth[mechanism] = (
                per_mech
                if per_mech is not None
                else config.listener_get(listener, "connections.max.reauth.ms")
            )
        return cls(listener, mechanisms, plain_users, validator, oauth_options, reauth)

    def new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism in MECHANISM_TYPES:
            assert self.scram_store is not None, "the broker gives SCRAM listeners the credential store"
            return ScramServer(mechanism, self.scram_store)
        return OAuthBearerServer(self.oauth_validator, self.oauth_options)
