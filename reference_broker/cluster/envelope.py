"""Envelope (58): a client's request a broker forwards to the active controller, with the client's
principal and address, as Kafka's ForwardingManager sends it and ControllerApis opens it.

A broker forwards on its own connection to the controller, authenticated as the broker (a super
user). Sent bare, the request would be authorized as the broker: any client could then do
through a broker what only its ACLs should let it. Inside an Envelope the controller authorizes
the envelope (CLUSTER_ACTION: only nodes may forward) and then the request itself as the client,
with the same checks a client reaching the controller listener directly gets
(``reference_broker.controller.authorization``).

- ``sealed(ctx, request)``: the Envelope of a client's request, encoded at the client's version
  with its header (or of a request made for the client, ``cluster.auto_create``); the principal
  is Kafka's DefaultPrincipalData (version-prefixed), the address the client's IP in bytes.
- ``opened(envelope_response, ...)``: the client's answer; an error of the envelope itself (the
  broker may not forward, the controller could not read it) is logged and answered
  UNKNOWN_SERVER_ERROR, as Kafka's ForwardingManager does (the client could not act on it).
- ``install(registry)``: the controller listener's Envelope handler. Only APIs Kafka marks
  forwardable are accepted (INVALID_REQUEST otherwise); an unreadable principal is
  PRINCIPAL_DESERIALIZATION_FAILURE, an unreadable request UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import ipaddress
import logging
import struct
from collections.abc import Callable
from typing import Any

from reference_broker.network.server import RequestContext
from sdk.protocol.codec import (
    DecodeError,
    UnsupportedVersionError,
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request,
    encode_response,
)
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import DefaultPrincipalData, EnvelopeRequest, EnvelopeResponse, Message

log = logging.getLogger("reference_broker.cluster")

#: The APIs Kafka's ApiKeys mark forwardable: CreateTopics, DeleteTopics, CreateAcls, DeleteAcls,
#: AlterConfigs, CreatePartitions, the delegation token APIs, ElectLeaders,
#: IncrementalAlterConfigs, Alter/ListPartitionReassignments, AlterClientQuotas,
#: AlterUserScramCredentials, DescribeQuorum, UpdateFeatures, UnregisterBroker,
#: AllocateProducerIds, AddRaftVoter, RemoveRaftVoter.
FORWARDABLE = frozenset({19, 20, 30, 31, 33, 37, 38, 39, 40, 43, 44, 45, 46, 49, 51, 55, 57, 64, 67, 80, 81})
_PRINCIPAL_VERSION = 0
_VERSION_PREFIX = struct.Struct(">h")


def principal_bytes(principal: str) -> bytes:
    """``Type:name`` as Kafka's DefaultKafkaPrincipalBuilder serializes it."""
    kind, _, name = principal.partition(":")
    data = DefaultPrincipalData(type=kind, name=name, token_authenticated=False)
    return _VERSION_PREFIX.pack(_PRINCIPAL_VERSION) + encode(data, _PRINCIPAL_VERSION)


def principal_of(data: bytes | None) -> str:
    """The ``Type:name`` principal of ``principal_bytes``; ValueError when unreadable."""
    if data is None or len(data) < _VERSION_PREFIX.size:
        raise ValueError("no principal in the envelope")
    (version,) = _VERSION_PREFIX.unpack_from(data)
    if version != _PRINCIPAL_VERSION:
        raise ValueError(f"unknown DefaultPrincipalData version {version}")
    try:
        principal = decode(DefaultPrincipalData, bytes(data[_VERSION_PREFIX.size:]), version)
    except DecodeError as exc:
        raise ValueError(str(exc)) from exc
    if not principal.type or principal.name is None:
        raise ValueError("principal without a type")
    return f"{principal.type}:{principal.name}"


def _address_bytes(host: str) -> bytes:
    return ipaddress.ip_address(host.split("%", 1)[0]).packed


def sealed(ctx: Any, request: Message, *, version: int | None = None) -> EnvelopeRequest:
    """The Envelope carrying ``request`` as the client ``ctx`` sent it; with ``version``, a
    request the broker makes for that client (auto-creation: Kafka's header then borrows the
    client id and correlation id of the client's request) at that version."""
    connection = ctx.connection
    at = ctx.api_version if version is None else version
    return EnvelopeRequest(
        request_data=encode_request(request, at, ctx.correlation_id, ctx.client_id),
        request_principal=principal_bytes(connection.session.principal),
        client_host_address=_address_bytes(connection.peer_host),
    )


def opened(response: Any, api_key: int, version: int, error: Callable[[int], Any]) -> Any:
    """The client's answer inside the controller's EnvelopeResponse."""
    if response.error_code != E.NONE or response.response_data is None:
        log.warning("the controller refused a forwarded request (api key %d v%d): error %d",
                    api_key, version, response.error_code)
        return error(E.UNKNOWN_SERVER_ERROR)
    _, answer = decode_response(api_key, version, bytes(response.response_data))
    return answer


class _ForwardedSession:
    __slots__ = ("principal",)

    def __init__(self, principal: str):
        self.principal = principal


class ForwardedConnection:
    """What a handler reads of the connection of a request that came in an Envelope: the
    client's principal and address (Kafka builds the forwarded request's context from them)."""

    __slots__ = ("envelope_connection", "peer_host", "session")

    def __init__(self, principal: str, peer_host: str, envelope_connection: Any):
        self.session = _ForwardedSession(principal)
        self.peer_host = peer_host
        self.envelope_connection = envelope_connection


def _refused(code: int) -> EnvelopeResponse:
    return EnvelopeResponse(response_data=None, error_code=code)


def install(registry: Any) -> None:
    """Serve Envelope on the controller listener: the request inside is run by ``registry``'s
    own handler (behind its authorization) as the principal the envelope names."""

    async def envelope(broker: Any, ctx: Any, request: EnvelopeRequest) -> EnvelopeResponse:
        try:
            principal = principal_of(request.request_principal)
        except ValueError as exc:
            log.warning("envelope from %s: unreadable principal: %s", ctx.connection.peer_host, exc)
            return _refused(E.PRINCIPAL_DESERIALIZATION_FAILURE)
        try:
            client_host = str(ipaddress.ip_address(bytes(request.client_host_address)))
        except ValueError:
            return _refused(E.INVALID_REQUEST)
        try:
            header, inner = decode_request(bytes(request.request_data))
        except (UnsupportedVersionError, DecodeError):
            return _refused(E.UNSUPPORTED_VERSION)
        api_key, version = header.request_api_key, header.request_api_version
        if api_key not in FORWARDABLE or registry.find(api_key, version) is None:
            return _refused(E.INVALID_REQUEST)
        forwarded = RequestContext(api_key, version, header.correlation_id, header.client_id,
                                   ForwardedConnection(principal, client_host, ctx.connection))  # type: ignore[arg-type]
        try:
            answer = await registry.handle(forwarded, inner)
        except Exception:
            log.exception("forwarded %s v%d failed", type(inner).__name__, version)
            answer = registry.error_response(forwarded, inner, E.UNKNOWN_SERVER_ERROR)
        if answer is None:
            return _refused(E.UNKNOWN_SERVER_ERROR)
        return EnvelopeResponse(response_data=encode_response(answer, version, header.correlation_id),
                                error_code=E.NONE)

    registry.register(EnvelopeRequest.API_KEY, envelope, error_response=lambda _req, _v, code: _refused(code))
