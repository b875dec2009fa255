"""The one owner of the connections a cluster node opens to other nodes, and of their security.

Two kinds of peers, as in Kafka:

- brokers (replica fetchers, WriteTxnMarkers, transaction verification): over the inter-broker
  listener, ``inter.broker.listener.name`` or else the listener named after
  ``security.inter.broker.protocol`` (Kafka's ``interBrokerListenerNameAndSecurityProtocol``),
  with ``sasl.mechanism.inter.broker.protocol``;
- controllers (raft between voters, a broker's registration, heartbeats, AlterPartition, producer
  id blocks): over the first of ``controller.listener.names``, with
  ``sasl.mechanism.controller.protocol``.

Each connection takes the listener's security protocol, as Kafka's
``ChannelBuilders.clientChannelBuilder`` does: TLS from the listener's ``ssl.*`` settings
(``listener.name.<l>.ssl.*`` first; the peer's certificate checked against the truststore and, by
default, its host name), SASL with the mechanism's JAAS entry of that listener
(``listener.name.<l>.<mechanism>.sasl.jaas.config``: ``username``/``password`` for PLAIN and
SCRAM, ``unsecuredLoginStringClaim_sub`` for OAUTHBEARER's unsecured tokens). There is no
fallback: a refused handshake fails the connection, and the caller (raft, registration, the
replica fetcher) sees it fail and retries; the failure is logged as an error.

:func:`check_peer_settings` runs at start (``BrokerConfig.build``) and refuses, with Kafka's
messages, settings that contradict each other or that this node cannot honour.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from reference_broker.config import ConfigError, quorum_configured
from reference_broker.network.peer import (
    PeerChannels,
    PeerConnection,
    PeerConnectionError,
    PeerUnsupportedError,
)
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    FetchResponse,
    Message,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from reference_broker.config import BrokerConfig

log = logging.getLogger("reference_broker.inter_broker")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Mechanisms this node can authenticate itself with (GSSAPI, Kafka's default, is not served).
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SCRAM_MIN_ITERATIONS = 4096
#: the same authentication failure is logged again after this long
_LOG_REPEAT_S = 10.0


class PeerAuthenticationError(PeerConnectionError):
    """The peer refused this node's SASL credentials or mechanism."""


@dataclasses.dataclass(frozen=True)
class SaslLogin:
    """What this node authenticates as: the mechanism and its JAAS entry's credentials."""

    mechanism: str
    username: str
    password: str = ""
    #: OAUTHBEARER: the unsecured token's claims (``sub`` and any ``unsecuredLoginStringClaim_*``)
    claims: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass
class PeerSecurity:
    """How connections to one kind of peer are secured: the listener, its protocol, the TLS
    context (SSL, SASL_SSL) and the SASL login (SASL_PLAINTEXT, SASL_SSL)."""

    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None
    _last_logged: tuple[str, float] = dataclasses.field(default=("", 0.0), repr=False)

    def connection_factory(self) -> Callable[..., PeerConnection]:
        """``PeerChannels``' factory: connections with this listener's TLS and SASL."""
        return functools.partial(SecuredPeerConnection, security=self)

    def channels(self, client_id: str, *, local_host: str | None = None,
                 connect_timeout_s: float = 5.0, request_timeout_s: float = 30.0) -> PeerChannels:
        return PeerChannels(client_id, local_host=local_host, connect_timeout_s=connect_timeout_s,
                            request_timeout_s=request_timeout_s, factory=self.connection_factory())

    async def authenticate(self, conn: PeerConnection) -> None:
        """SaslHandshake then SaslAuthenticate rounds until the mechanism completes (Kafka's
        SaslClientAuthenticator); raises ``PeerAuthenticationError`` on any refusal."""
        login = self.sasl
        assert login is not None
        where = f"{conn.host}:{conn.port} (listener {self.listener}, {login.mechanism} as {login.username})"
        try:
            handshake = await conn.exchange(SaslHandshakeRequest(mechanism=login.mechanism),
                                            conn.version_for(SaslHandshakeRequest.API_KEY))
            assert isinstance(handshake, SaslHandshakeResponse)
            if handshake.error_code:
                raise PeerAuthenticationError(
                    f"SASL mechanism {login.mechanism} refused by {where}: error {handshake.error_code},"
                    f" the peer enables {', '.join(handshake.mechanisms) or 'none'}"
                )
            exchange = _client_exchange(login)
            version = conn.version_for(SaslAuthenticateRequest.API_KEY)
            token: bytes | None = next(exchange)
            while token is not None:
                answer = await conn.exchange(SaslAuthenticateRequest(auth_bytes=token), version)
                assert isinstance(answer, SaslAuthenticateResponse)
                if answer.error_code:
                    raise PeerAuthenticationError(
                        f"SASL authentication to {where} failed: {answer.error_message or answer.error_code}"
                    )
                token = _next_token(exchange, bytes(answer.auth_bytes))
        except PeerUnsupportedError as exc:
            self.log_failure(f"{where} does not serve SASL authentication: {exc}")
            raise PeerAuthenticationError(f"{where} does not serve SASL authentication") from None
        except (PeerAuthenticationError, _ScramError) as exc:
            self.log_failure(str(exc))
            raise PeerAuthenticationError(str(exc)) from None

    def log_failure(self, message: str) -> None:
        """Log a refused connection as an error, the same one again only every few seconds."""
        now = time.monotonic()
        last, at = self._last_logged
        if message != last or now - at > _LOG_REPEAT_S:
            log.error("inter-broker connection refused: %s", message)
            self._last_logged = (message, now)


class SecuredPeerConnection(PeerConnection):
    """A ``PeerConnection`` with ``security``'s TLS and SASL; a failed TLS handshake is logged
    as an error (callers retry quietly, and a wrong truststore must not look like a slow peer)."""

    def __init__(self, host: str, port: int, *, security: PeerSecurity, **options: Any) -> None:
        super().__init__(host, port, ssl_context=security.ssl_context,
                         authenticate=security.authenticate if security.sasl is not None else None,
                         **options)
        self.security = security

    async def send(self, request: Message, *, version: int | None = None,
                   timeout_s: float | None = None) -> Message:
        try:
            response = await super().send(request, version=version, timeout_s=timeout_s)
        except PeerConnectionError as exc:
            if isinstance(exc.__cause__, ssl.SSLError):
                self.security.log_failure(
                    f"TLS handshake with {self.host}:{self.port} (listener {self.security.listener})"
                    f" failed: {exc.__cause__}"
                )
            raise
        if _refused_cluster_action(response):
            who = f"as {self.security.sasl.username} " if self.security.sasl is not None else ""
            self.security.log_failure(
                f"{self.host}:{self.port} refused {type(request).__name__} from this node {who}on listener"
                f" {self.security.listener}: its principal needs CLUSTER_ACTION on the cluster"
                " (super.users or an ACL)"
            )
        return response


def _refused_cluster_action(response: Message) -> bool:
    """A peer's authorizer refused this node: CLUSTER_AUTHORIZATION_FAILED, or a follower fetch
    answered TOPIC_AUTHORIZATION_FAILED."""
    if getattr(response, "error_code", 0) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return True
    if isinstance(response, FetchResponse):
        return any(p.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                   for t in response.responses for p in t.partitions)
    return False


class _ScramError(Exception):
    """The SCRAM server's messages do not check out (a server that does not know the credential)."""


def _next_token(exchange: Generator[bytes, bytes, None], answer: bytes) -> bytes | None:
    try:
        return exchange.send(answer)
    except StopIteration:
        return None


def _client_exchange(login: SaslLogin) -> Generator[bytes, bytes, None]:
    """The client's tokens as a generator: each ``send`` takes the server's answer and yields the
    next token, or None once the exchange is complete."""
    if login.mechanism == "PLAIN":
        yield f"\0{login.username}\0{login.password}".encode()
        return None
    if login.mechanism == "OAUTHBEARER":
        if (yield _oauth_first_message(login)):  # an error challenge: acknowledge it, the server fails
            yield b"\x01"
        return None
    hash_name = _SCRAM_HASHES[login.mechanism]
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    user = login.username.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={user},r={nonce}"
    server_first = (yield f"n,,{first_bare}".encode()).decode()
    fields = _scram_fields(server_first)
    if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
        raise _ScramError(f"invalid SCRAM server-first message {server_first!r}")
    iterations = int(fields["i"])
    if iterations < _SCRAM_MIN_ITERATIONS:
        raise _ScramError(f"SCRAM iterations {iterations} below the minimum {_SCRAM_MIN_ITERATIONS}")
    salted = hashlib.pbkdf2_hmac(hash_name, login.password.encode(), base64.b64decode(fields["s"]),
                                 iterations)
    final_bare = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    signature = hmac.new(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = (yield f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
    final = _scram_fields(server_final)
    if "e" in final:
        raise _ScramError(f"SCRAM authentication failed: {final['e']}")
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    expected = hmac.new(server_key, auth_message, hash_name).digest()
    if not hmac.compare_digest(base64.b64decode(final.get("v", "")), expected):
        raise _ScramError("SCRAM server signature does not match: the peer does not know the credential")
    return None


def _scram_fields(message: str) -> dict[str, str]:
    fields = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            fields[key] = value
    return fields


def _oauth_first_message(login: SaslLogin) -> bytes:
    """An unsecured JWS (``alg: none``), as Kafka's OAuthBearerUnsecuredLoginCallbackHandler
    makes from ``unsecuredLoginStringClaim_sub``, valid for an hour."""
    now = int(time.time())
    claims: dict[str, Any] = {"iat": now, "exp": now + 3600, **dict(login.claims)}

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    token = f"{part({'alg': 'none'})}.{part(claims)}."
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


# -- which listener, which protocol --------------------------------------------------------------


def _protocol_map(config: BrokerConfig) -> dict[str, str]:
    from reference_broker.security.listeners import DEFAULT_PROTOCOL_MAP, parse_protocol_map

    if "listener.security.protocol.map" not in config.settings:
        mapping = dict(DEFAULT_PROTOCOL_MAP)
        for name in config.get("controller.listener.names") or []:  # Kafka maps these to PLAINTEXT
            mapping.setdefault(name.upper(), "PLAINTEXT")
        return mapping
    return parse_protocol_map(config.get("listener.security.protocol.map"))


def inter_broker_listener(config: BrokerConfig) -> tuple[str, str]:
    """(listener name, security protocol) brokers use among themselves, by Kafka's rules."""
    name = config.settings.get("inter.broker.listener.name")
    if name:
        if "security.inter.broker.protocol" in config.settings:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        protocol = _protocol_map(config).get(name.upper())
        if protocol is None:
            raise ConfigError(
                f"Listener with name {name.upper()} defined in inter.broker.listener.name not found in"
                " listener.security.protocol.map."
            )
        return name.upper(), protocol
    protocol = str(config.get("security.inter.broker.protocol") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security.inter.broker.protocol: {protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    return protocol, protocol


def controller_listener(config: BrokerConfig) -> tuple[str, str]:
    """(listener name, security protocol) of the first of ``controller.listener.names``: the one
    this node connects to controllers with, as Kafka's brokers and voters do."""
    names = config.get("controller.listener.names") or []
    if not names:
        raise ConfigError("controller.listener.names must contain at least one value when running KRaft")
    name = names[0].upper()
    protocol = _protocol_map(config).get(name)
    if protocol is None:
        raise ConfigError(
            f"Controller listener with name {name} defined in controller.listener.names not found in"
            " listener.security.protocol.map  (an explicit security mapping for each controller listener"
            " is required if listener.security.protocol.map is non-empty, or if there are security"
            " protocols other than PLAINTEXT in use)"
        )
    return name, protocol


def _sasl_login(config: BrokerConfig, listener: str, mechanism: str, mechanism_key: str) -> SaslLogin:
    from reference_broker.security.jaas import parse_jaas

    mechanism = mechanism.upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            f"{mechanism_key}: {mechanism} is not supported for connections between nodes; use one of"
            f" {', '.join(CLIENT_MECHANISMS)}"
        )
    setting = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.settings.get(setting)
    if not text:
        raise ConfigError(
            f"{setting}: the node authenticates to its peers on listener {listener} with {mechanism}"
            " and needs its credentials in this JAAS entry"
        )
    options = parse_jaas(setting, text).options
    if mechanism == "OAUTHBEARER":
        claims = {k[len("unsecuredLoginStringClaim_"):]: v for k, v in options.items()
                  if k.startswith("unsecuredLoginStringClaim_")}
        if not claims.get("sub"):
            raise ConfigError(f"{setting}: OAUTHBEARER between nodes needs unsecuredLoginStringClaim_sub")
        return SaslLogin(mechanism, claims["sub"], claims=tuple(sorted(claims.items())))
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            f'{setting}: {mechanism} between nodes needs username="..." and password="..." in this entry'
        )
    return SaslLogin(mechanism, options["username"], options["password"])


def _security(config: BrokerConfig, listener: str, protocol: str, mechanism_key: str) -> PeerSecurity:
    from reference_broker.security.tls import client_context

    security = PeerSecurity(listener, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        security.ssl_context = client_context(listener, functools.partial(config.listener_get, listener))
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config.get(mechanism_key)).upper()
        enabled = [m.upper() for m in config.listener_get(listener, "sasl.enabled.mechanisms") or []]
        if mechanism not in enabled:
            what = "inter-broker" if "inter.broker" in mechanism_key else "controller"
            raise ConfigError(
                f"{mechanism_key} must be included in sasl.enabled.mechanisms when SASL is used for"
                f" {what} communication"
            )
        security.sasl = _sasl_login(config, listener, mechanism, mechanism_key)
    return security


def inter_broker_security(config: BrokerConfig) -> PeerSecurity:
    """How this node connects to other brokers."""
    listener, protocol = inter_broker_listener(config)
    return _security(config, listener, protocol, "sasl.mechanism.inter.broker.protocol")


def controller_security(config: BrokerConfig) -> PeerSecurity:
    """How this node connects to controllers (its own raft peers too)."""
    listener, protocol = controller_listener(config)
    return _security(config, listener, protocol, "sasl.mechanism.controller.protocol")


def check_peer_settings(config: BrokerConfig) -> None:
    """Kafka's start-time checks of the inter-broker and controller connection settings.

    Everywhere: ``inter.broker.listener.name`` and ``security.inter.broker.protocol`` are
    exclusive and must resolve to a mapped listener, and ``ssl.endpoint.identification.algorithm``
    is ``https`` or empty (a per-listener value is checked when that listener's peers are). On a
    cluster node (``controller.quorum.voters`` set), what the node will use towards its peers is
    built now, so missing credentials, a mechanism the listener does not enable or an unloadable
    truststore stop it at start; a broker's inter-broker listener must be one of its advertised
    (non-controller) listeners."""
    from reference_broker.security.tls import ENDPOINT_IDENTIFICATION

    listener, _ = inter_broker_listener(config)
    algorithm = str(config.get("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if algorithm not in ENDPOINT_IDENTIFICATION:
        raise ConfigError(
            f"ssl.endpoint.identification.algorithm: {algorithm!r} is not supported (https, or empty"
            " for no host name verification)"
        )
    if not quorum_configured(config):
        return
    roles = config.get("process.roles") or []
    if "broker" in roles:
        from reference_broker.security.config import configured_listeners

        controllers = {n.upper() for n in config.get("controller.listener.names") or []}
        advertised = [lst.name for lst in configured_listeners(config) if lst.name not in controllers]
        if listener not in advertised:
            raise ConfigError(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners."
                f" The valid options based on currently configured listeners are {','.join(advertised)}"
            )
        inter_broker_security(config)
    controller_security(config)
