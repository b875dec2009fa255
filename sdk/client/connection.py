"""One connection to one broker: framing, version negotiation, pipelined requests.

Requests are written as soon as they are made and answered through futures kept in a dict by
correlation id; a single reader task resolves them. Kafka answers in order on a connection, so a
request that gets no answer within ``request_timeout_ms`` closes the whole connection (everything
behind it would be stuck) and every caller sees a retriable error, as in Kafka's Java client.

On connect the connection sends ApiVersions at the newest version this client knows (KIP-511:
with the client's software name and version). A broker that does not know that version answers
UNSUPPORTED_VERSION in the v0 format with its own ApiVersions range, and the request is repeated
at the version both support. From the broker's table ``version_for`` picks, per API, the highest
version both sides support.

Security: SSL and SASL_SSL wrap the socket in TLS (a handshake failure is a fatal
``SslAuthenticationError``); the SASL protocols then authenticate with ``SaslHandshake`` and
``SaslAuthenticate`` (a refusal is a fatal ``AuthenticationError`` subclass). When the broker gives
the session a lifetime (SaslAuthenticate v1 ``session_lifetime_ms``, KIP-368) the connection
authenticates again on the same socket at 85-95% of it, as Kafka's Java client does: requests made
meanwhile are held and written right after, so they keep flowing and the broker never sees a
request on an expired session (it would close the connection).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import struct
from collections.abc import Callable, Iterable
from typing import Any

from sdk.client.sasl import SaslMechanism
from sdk.errors import (
    AuthenticationError,
    DecodeError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    ResponseTimeoutError,
    SaslAuthenticationError,
    SaslMechanismRefusedError,
    SaslStateError,
    SslAuthenticationError,
    UnsupportedVersionError,
    make_error,
)
from sdk.protocol import messages
from sdk.protocol.codec import (
    RequestHeader,
    decode,
    decode_response,
    encode_into,
    peek_correlation_id,
    request_header_version,
    supported_versions,
)
from sdk.protocol.messages import Message

__all__ = [
    "CLIENT_MAX_VERSIONS",
    "CLIENT_SOFTWARE_NAME",
    "CLIENT_SOFTWARE_VERSION",
    "Connection",
    "pick_version",
]

log = logging.getLogger(__name__)

API_VERSIONS = messages.ApiVersionsRequest.API_KEY

#: Newest versions this client speaks where the codec knows newer ones: Produce v13 names topics
#: by id only (KIP-516), which the producer does not track yet.
CLIENT_MAX_VERSIONS: dict[int, int] = {messages.ProduceRequest.API_KEY: 12}

CLIENT_SOFTWARE_NAME = "topicwright-sdk"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
_MAX_CORRELATION_ID = 2**31 - 1
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL error codes, as the fatal ``AuthenticationError`` subclasses.
_SASL_ERRORS: dict[int, type[KafkaError]] = {
    ErrorCode.SASL_AUTHENTICATION_FAILED: SaslAuthenticationError,
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: SaslMechanismRefusedError,
    ErrorCode.ILLEGAL_SASL_STATE: SaslStateError,
}
#: Re-authenticate at this fraction of the session lifetime plus up to the jitter (Java's
#: SaslClientAuthenticator: room for latency and clock drift, no storm of simultaneous ones).
_REAUTH_AT = 0.85
_REAUTH_JITTER = 0.10


def _sasl_error(code: int, message: str) -> KafkaError:
    cls = _SASL_ERRORS.get(code)
    return cls(message) if cls is not None else make_error(code, message)


def _api_name(api_key: int) -> str:
    cls = messages.REQUESTS.get(api_key)
    return cls.NAME.removesuffix("Request") if cls is not None else f"api key {api_key}"


def pick_version(
    api_key: int,
    broker_range: tuple[int, int] | None,
    *,
    min_version: int | None = None,
    max_version: int | None = None,
    broker: str = "broker",
) -> int:
    """Highest version of ``api_key`` both sides support; ``UnsupportedVersionError`` if none."""
    ours_lo, ours_hi = supported_versions(api_key)
    cap = CLIENT_MAX_VERSIONS.get(api_key)
    if cap is not None:
        ours_hi = min(ours_hi, cap)
    if max_version is not None:
        ours_hi = min(ours_hi, max_version)
    if min_version is not None:
        ours_lo = max(ours_lo, min_version)
    name = _api_name(api_key)
    if broker_range is None:
        raise UnsupportedVersionError(
            f"{broker} does not support {name} (api key {api_key}) at all", api_key=api_key
        )
    lo, hi = max(ours_lo, broker_range[0]), min(ours_hi, broker_range[1])
    if lo > hi:
        raise UnsupportedVersionError(
            f"no common version of {name} (api key {api_key}): {broker} supports "
            f"v{broker_range[0]}-{broker_range[1]}, this client v{ours_lo}-{ours_hi}",
            api_key=api_key,
        )
    return hi


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("api_key", "future", "raw", "timer", "version")

    def __init__(self, future: asyncio.Future[Any], api_key: int, version: int, raw: bool):
        self.future = future
        self.api_key = api_key
        self.version = version
        self.raw = raw
        self.timer: asyncio.TimerHandle | None = None


class Connection:
    """A TCP (optionally TLS, optionally SASL) connection to one broker.

    ``on_close(connection, error)`` is called once when the connection ends for any reason, so the
    owner (``KafkaClient``) can drop it, back off and refresh metadata.
    """

    #: Re-authenticate before the broker's session lifetime ends (KIP-368). Only tests turn it
    #: off, to show that the broker then closes the connection.
    reauthenticates = True

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int | None = None,
        client_id: str | None = "sdk",
        request_timeout_ms: float = 30000,
        connect_timeout_ms: float = 10000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: SaslMechanism | None = None,
        max_frame_bytes: int = 256 * 1024 * 1024,
        on_close: Callable[[Connection, BaseException | None], None] | None = None,
    ):
        if security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security_protocol {security_protocol!r}")
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.security_protocol = security_protocol
        self._ssl_context = ssl_context
        self._sasl = sasl_mechanism
        self._max_frame = max_frame_bytes
        self._on_close = on_close
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._correlation_id = 0
        self._state = "new"  # new -> connecting -> ready -> closed
        self._close_error: BaseException | None = None
        self._closed_event: asyncio.Event | None = None
        self.broker_versions: dict[int, tuple[int, int]] = {}
        #: Feature levels the cluster finalized (ApiVersions v3+, KIP-584), e.g.
        #: ``{"transaction.version": 2}``: a feature's max_version_level by name.
        self.finalized_features: dict[str, int] = {}
        self._version_cache: dict[int, int] = {}
        #: Frames of requests made while the connection re-authenticates, written after it.
        self._held: list[bytearray] | None = None
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        #: Session lifetime the broker gave at the last authentication (0: none, KIP-368).
        self.session_lifetime_ms = 0
        #: Successful re-authentications on this connection.
        self.reauthentications = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<Connection {self.describe()} {self._state}>"

    def describe(self) -> str:
        node = f" (node {self.node_id})" if self.node_id is not None else ""
        return f"{self.host}:{self.port}{node}"

    @property
    def connected(self) -> bool:
        """Ready for requests: connected, versions negotiated, authenticated."""
        return self._state == "ready"

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def write_buffer_size(self) -> int:
        """Bytes written but not yet handed to the kernel (grows when the broker reads slowly)."""
        writer = self._writer
        return writer.transport.get_write_buffer_size() if writer is not None else 0

    @property
    def in_flight(self) -> int:
        """Requests written and not answered yet."""
        return len(self._pending)

    async def connect(self) -> None:
        """Open the socket, negotiate versions and authenticate; raise on any failure."""
        if self._state != "new":
            raise KafkaConnectionError(f"connection to {self.describe()} already {self._state}")
        self._state = "connecting"
        self._closed_event = asyncio.Event()
        use_tls = self.security_protocol in ("SSL", "SASL_SSL")
        ctx: ssl.SSLContext | None = None
        if use_tls:
            ctx = self._ssl_context or ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=ctx, limit=2**20
                )
        except ssl.SSLError as exc:
            error: KafkaError = _tls_error(self.describe(), exc)
            self._close(error)
            raise error from exc
        except (OSError, TimeoutError) as exc:
            error = KafkaConnectionError(f"cannot connect to {self.describe()}: {exc!r}")
            self._close(error)
            raise error from exc
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"kafka-reader-{self.describe()}"
        )
        try:
            await self._negotiate_versions()
            if self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                await self._authenticate()
        except BaseException as exc:
            # A TLS alert read by the reader task (the broker refused our certificate) closed the
            # connection with the fatal error; the request that saw the close names it less well.
            closed_by = self._close_error
            if isinstance(closed_by, AuthenticationError):
                error = closed_by
            elif isinstance(exc, KafkaError):
                error = exc
            else:
                error = KafkaConnectionError(f"handshake with {self.describe()} failed: {exc!r}")
            self._close(error)
            if error is exc:
                raise
            raise error from exc
        self._state = "ready"

    def close(self, error: BaseException | None = None) -> None:
        """Close now; requests still waiting fail with ``error`` (a connection error by default)."""
        self._close(error)

    async def wait_closed(self) -> None:
        if self._closed_event is not None:
            await self._closed_event.wait()

    def _close(self, error: BaseException | None) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        self._close_error = error
        self._held = None
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        reauth = self._reauth_task
        if reauth is not None and reauth is not asyncio.current_task():
            reauth.cancel()
        if self._writer is not None:
            self._writer.close()
        task = self._reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(
                    error
                    if isinstance(error, KafkaConnectionError)
                    else KafkaConnectionError(
                        f"connection to {self.describe()} closed: {error or 'by client'}"
                    )
                )
                # A caller that stopped waiting must not trigger "exception never retrieved".
                entry.future.exception()
        if self._closed_event is not None:
            self._closed_event.set()
        callback, self._on_close = self._on_close, None
        if callback is not None:
            callback(self, error)

    # -- negotiation ----------------------------------------------------------------------------

    async def _negotiate_versions(self) -> None:
        _, newest = supported_versions(API_VERSIONS)
        request = messages.ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
        )
        version: int | None = newest
        tried: set[int] = set()
        while version is not None and version not in tried:
            tried.add(version)
            raw = await self._send_raw(request, version)
            # The error code is the first body field in every version, right after the v0 header.
            (error_code,) = _ERROR_CODE.unpack_from(raw, 4)
            if error_code == ErrorCode.UNSUPPORTED_VERSION:
                version = self._fallback_version(raw, version)
                continue
            response = decode(messages.ApiVersionsResponse, memoryview(raw)[4:], version)
            if response.error_code:
                raise make_error(response.error_code, f"ApiVersions from {self.describe()}")
            self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            self.finalized_features = {
                feature.name: feature.max_version_level for feature in response.finalized_features or ()
            }
            return
        raise UnsupportedVersionError(
            f"{self.describe()} accepted no ApiVersions version this client speaks", api_key=API_VERSIONS
        )

    def _fallback_version(self, raw: bytes, rejected: int) -> int | None:
        """The ApiVersions version to retry with after UNSUPPORTED_VERSION.

        KIP-511 says the answer is in the v0 format and lists the broker's ApiVersions range. Some
        brokers get that format wrong; then step down to v3 (the oldest with client software
        fields) and finally v0, which every broker speaks.
        """
        try:
            fallback = decode(messages.ApiVersionsResponse, memoryview(raw)[4:], 0)
            theirs = {k.api_key: (k.min_version, k.max_version) for k in fallback.api_keys}
            return pick_version(API_VERSIONS, theirs[API_VERSIONS], max_version=rejected - 1)
        except (DecodeError, KeyError, UnsupportedVersionError):
            log.debug("unreadable ApiVersions fallback answer from %s", self.describe())
        if rejected > 3:
            return 3
        return 0 if rejected > 0 else None

    def version_for(self, api_key: int) -> int:
        """Highest version of ``api_key`` both this client and the broker support."""
        version = self._version_cache.get(api_key)
        if version is None:
            version = pick_version(api_key, self.broker_versions.get(api_key), broker=self.describe())
            self._version_cache[api_key] = version
        return version

    def supports(self, api_key: int, min_version: int = 0) -> bool:
        """Whether the broker supports ``api_key`` at ``min_version`` or newer (with this client)."""
        try:
            return self.version_for(api_key) >= min_version
        except UnsupportedVersionError:
            return False

    async def _authenticate(self) -> None:
        mechanism = self._sasl
        if mechanism is None:
            raise SaslStateError(f"{self.security_protocol} needs a SASL mechanism")
        await mechanism.prepare()
        await self._sasl_exchange(mechanism)

    async def _sasl_exchange(self, mechanism: SaslMechanism) -> None:
        """One whole SASL exchange of a prepared mechanism (first or re-authentication); schedules
        the next one when the broker gives the session a lifetime."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        handshake = await self._request_now(
            messages.SaslHandshakeRequest(mechanism=mechanism.name),
            pick_version(
                messages.SaslHandshakeRequest.API_KEY,
                self.broker_versions.get(messages.SaslHandshakeRequest.API_KEY),
                min_version=1,
                broker=self.describe(),
            ),
        )
        if handshake.error_code:
            enabled = ", ".join(handshake.mechanisms or []) or "none"
            raise _sasl_error(
                handshake.error_code,
                f"{self.describe()} does not enable SASL mechanism {mechanism.name} (enabled: {enabled})",
            )
        version = self.version_for(messages.SaslAuthenticateRequest.API_KEY)
        token: bytes | None = mechanism.initial_response()
        lifetime_ms = 0
        while token is not None:
            response = await self._request_now(messages.SaslAuthenticateRequest(auth_bytes=token), version)
            if response.error_code:
                reason = response.error_message or "no reason given"
                raise _sasl_error(
                    response.error_code,
                    f"{self.describe()} refused SASL {mechanism.name} authentication: {reason}",
                )
            lifetime_ms = getattr(response, "session_lifetime_ms", 0) or 0
            token = mechanism.evaluate_challenge(bytes(response.auth_bytes or b""))
        if not mechanism.complete:
            raise SaslStateError(f"SASL {mechanism.name} exchange with {self.describe()} did not complete")
        self.session_lifetime_ms = lifetime_ms
        if lifetime_ms > 0 and self.reauthenticates:
            fraction = _REAUTH_AT + _REAUTH_JITTER * random.random()
            delay = max(0.0, started + lifetime_ms / 1000 * fraction - loop.time())
            self._reauth_timer = loop.call_later(delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._state != "ready" or self._sasl is None:
            return
        self._reauth_task = asyncio.get_running_loop().create_task(
            self._reauthenticate(self._sasl), name=f"kafka-reauth-{self.describe()}"
        )

    async def _reauthenticate(self, mechanism: SaslMechanism) -> None:
        try:
            # A token may take a while to fetch: requests flow meanwhile, and are held only
            # during the exchange itself.
            await mechanism.prepare()
            if self._state != "ready":
                return
            self._held = []
            await self._sasl_exchange(mechanism)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, KafkaError)
                else KafkaConnectionError(f"re-authentication with {self.describe()} failed: {exc!r}")
            )
            log.warning("re-authentication with %s failed: %s", self.describe(), error)
            self._close(error)
            return
        finally:
            self._reauth_task = None
        self.reauthentications += 1
        held, self._held = self._held, None
        log.debug(
            "re-authenticated with %s (%d requests held meanwhile)", self.describe(), len(held or ())
        )
        writer = self._writer
        if held and writer is not None and self._state == "ready":
            writer.writelines(held)

    # -- requests -------------------------------------------------------------------------------

    def send(
        self,
        request: Message,
        version: int | None = None,
        *,
        expect_response: bool = True,
        timeout_ms: float | None = None,
    ) -> asyncio.Future[Any] | None:
        """Write ``request`` now; return a future for the decoded response.

        ``expect_response=False`` is for requests the broker never answers (Produce with acks=0):
        nothing waits and None is returned.
        """
        if self._state != "ready":
            raise KafkaConnectionError(f"connection to {self.describe()} is {self._state}")
        return self._write(request, version, expect_response, timeout_ms, raw=False)

    async def request(
        self, request: Message, version: int | None = None, *, timeout_ms: float | None = None
    ) -> Any:
        """Send and wait for the response."""
        future = self.send(request, version, timeout_ms=timeout_ms)
        assert future is not None
        return await future

    async def _request_now(self, request: Message, version: int) -> Any:
        """A request of the handshake (before the connection is ``ready``, or re-authenticating):
        written at once, never held."""
        future = self._write(request, version, True, None, raw=False, handshake=True)
        assert future is not None
        return await future

    async def _send_raw(self, request: Message, version: int) -> bytes:
        future = self._write(request, version, True, None, raw=True)
        assert future is not None
        return await future

    def _write(
        self,
        request: Message,
        version: int | None,
        expect_response: bool,
        timeout_ms: float | None,
        raw: bool,
        handshake: bool = False,
    ) -> asyncio.Future[Any] | None:
        writer = self._writer
        if writer is None or self._state == "closed":
            raise KafkaConnectionError(f"connection to {self.describe()} is closed")
        api_key = request.API_KEY
        assert api_key is not None
        if version is None:
            version = self.version_for(api_key)
        correlation_id = self._correlation_id
        self._correlation_id = 0 if correlation_id >= _MAX_CORRELATION_ID else correlation_id + 1
        header = RequestHeader(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=self.client_id,
        )
        out = bytearray(4)
        encode_into(out, header, request_header_version(api_key, version))
        encode_into(out, request, version)
        _SIZE.pack_into(out, 0, len(out) - 4)
        future: asyncio.Future[Any] | None = None
        if expect_response:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            entry = _Pending(future, api_key, version, raw)
            timeout = self.request_timeout if timeout_ms is None else timeout_ms / 1000
            entry.timer = loop.call_later(timeout, self._on_timeout, correlation_id)
            self._pending[correlation_id] = entry
        if self._held is not None and not handshake:
            self._held.append(out)
        else:
            writer.write(out)
        return future

    def _on_timeout(self, correlation_id: int) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return
        error = ResponseTimeoutError(
            f"no response from {self.describe()} to {_api_name(entry.api_key)} within "
            f"{self.request_timeout * 1000:.0f} ms"
        )
        if not entry.future.done():
            entry.future.set_exception(error)
            entry.future.exception()
        self._close(KafkaConnectionError(f"connection to {self.describe()} closed after a request timeout"))

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark (back-pressure)."""
        if self._writer is not None and self._state != "closed":
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._close(KafkaConnectionError(f"write to {self.describe()} failed: {exc!r}"))

    # -- responses ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        readexactly = reader.readexactly
        unpack = _SIZE.unpack
        error: BaseException | None = None
        try:
            while True:
                (size,) = unpack(await readexactly(4))
                if size < 4 or size > self._max_frame:
                    raise DecodeError(f"response frame of {size} bytes from {self.describe()}")
                self._on_response(await readexactly(size))
        except asyncio.CancelledError:
            raise
        except ssl.SSLError as exc:
            error = (
                _tls_error(self.describe(), exc)
                if self._state == "connecting"
                else KafkaConnectionError(f"connection to {self.describe()} lost: {exc!r}")
            )
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            error = KafkaConnectionError(f"connection to {self.describe()} lost: {exc!r}")
        except Exception as exc:  # a broker bug must not kill the event loop
            log.warning("closing %s after a bad response: %r", self.describe(), exc)
            error = KafkaConnectionError(f"bad response from {self.describe()}: {exc!r}")
        self._close(error)

    def _on_response(self, data: bytes) -> None:
        correlation_id = peek_correlation_id(data)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            raise DecodeError(f"response with unknown correlation id {correlation_id}")
        if entry.timer is not None:
            entry.timer.cancel()
        future = entry.future
        if future.done():
            return
        if entry.raw:
            future.set_result(data)
            return
        try:
            _, body = decode_response(entry.api_key, entry.version, data)
        except DecodeError as exc:
            # Name the response: the broker bug it points at depends on the API and version.
            named = DecodeError(f"{_api_name(entry.api_key)} v{entry.version} response: {exc}")
            future.set_exception(named)
            raise named from exc
        future.set_result(body)


def describe_versions(versions: Iterable[tuple[int, tuple[int, int]]]) -> str:
    """A readable ApiVersions table, for logs."""
    return ", ".join(f"{_api_name(k)} v{lo}-{hi}" for k, (lo, hi) in sorted(versions))


def _tls_error(address: str, exc: ssl.SSLError) -> SslAuthenticationError:
    """The fatal error for a failed TLS handshake, with OpenSSL's reason (e.g. an unknown CA)."""
    detail = getattr(exc, "verify_message", None) or exc.reason or str(exc)
    return SslAuthenticationError(f"TLS handshake with {address} failed: {detail} ({exc})")
