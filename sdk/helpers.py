"""``create_ssl_context``: the TLS settings of the SSL and SASL_SSL protocols, as aiokafka has it.

The context verifies the broker's certificate and host name against the given CAs only (the
system's CAs when none is given) and presents a client certificate when ``certfile`` is given (brokers with
``ssl.client.auth=required``).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from sdk.errors import ConfigError

__all__ = ["create_ssl_context"]


def create_ssl_context(
    *,
    cafile: str | None = None,
    capath: str | None = None,
    cadata: str | bytes | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | bytes | Callable[[], str | bytes] | None = None,
    crlfile: str | None = None,
) -> ssl.SSLContext:
    """A client ``ssl.SSLContext`` for ``ssl_context=``.

    :param cafile: PEM file of the CA certificates to trust (the broker's CA).
    :param capath: directory of hashed CA certificates to trust.
    :param cadata: CA certificates as PEM text or DER bytes.
    :param certfile: PEM file with the client certificate (and its chain; the key too unless
        ``keyfile`` is given), for mutual TLS.
    :param keyfile: PEM file with the client certificate's private key.
    :param password: the private key's password (or a callable returning it).
    :param crlfile: PEM file of certificate revocation lists checked for the broker's certificate.
    Raises ``ConfigError`` naming the option whose file cannot be used.
    """
    if keyfile is not None and certfile is None:
        raise ConfigError("keyfile", "a private key needs its certificate (certfile)")
    if password is not None and certfile is None:
        raise ConfigError("password", "is the password of the client key: certfile is missing")
    try:
        # Given CAs replace the system's (only they are trusted), as in aiokafka.
        context = ssl.create_default_context(
            purpose=ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath, cadata=cadata
        )
    except (OSError, ssl.SSLError) as exc:
        option = "cafile" if cafile is not None else "capath" if capath is not None else "cadata"
        raise ConfigError(option, f"cannot load the CA certificates: {exc}") from exc
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("certfile", f"cannot load the client certificate and key: {exc}") from exc
    if crlfile is not None:
        try:
            context.load_verify_locations(cafile=crlfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("crlfile", f"cannot load the revocation list: {exc}") from exc
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context
