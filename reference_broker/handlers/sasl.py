"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2): the SASL exchange of a
SASL_PLAINTEXT or SASL_SSL listener, decided by the connection's ``Session``
(``reference_broker.security.session``).

A failed exchange is answered (UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms,
SASL_AUTHENTICATION_FAILED with the reason) and the connection closed after the answer, as
Kafka's SaslServerAuthenticator does. On a listener without SASL, and for SaslAuthenticate outside
an exchange, the answer is ILLEGAL_SASL_STATE and the connection stays (Kafka's KafkaApis).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from reference_broker.security.errors import SaslAuthenticationFailed
from reference_broker.security.session import SaslState
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

log = logging.getLogger("reference_broker.security")


def handle_handshake(
    broker: Broker, ctx: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    session = ctx.connection.session
    if session.sasl is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = list(session.sasl.mechanisms)
    problem = session.start(request.mechanism, ctx.api_version)
    if problem is not None:
        log.warning("closing connection from %s: %s", ctx.connection.peer, problem)
        ctx.close_after = True
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)


def handle_authenticate(
    broker: Broker, ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    session = ctx.connection.session
    if session.sasl is None or session.state != SaslState.AUTHENTICATE:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication"
            if session.authenticated
            else "SaslAuthenticate request received before SaslHandshake",
        )
    try:
        challenge, lifetime_ms = session.authenticate(bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        log.warning(
            "closing connection from %s: SASL %s authentication failed: %s",
            ctx.connection.peer,
            session.mechanism,
            exc,
        )
        ctx.close_after = True
        return SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc)
        )
    if session.authenticated and session.state == SaslState.COMPLETE:
        log.debug("%s authenticated as %s with %s", ctx.connection.peer, session.principal, session.mechanism)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.NONE, auth_bytes=challenge, session_lifetime_ms=lifetime_ms
    )


def handshake_error(request: SaslHandshakeRequest, version: int, code: int) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


def authenticate_error(request: SaslAuthenticateRequest, version: int, code: int) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code)


def install(registry: HandlerRegistry) -> None:
    registry.register(SaslHandshakeRequest.API_KEY, handle_handshake, error_response=handshake_error)
    registry.register(SaslAuthenticateRequest.API_KEY, handle_authenticate, error_response=authenticate_error)
