"""TLS for SSL and SASL_SSL listeners from Kafka's ``ssl.*`` settings (PEM stores only).

Kafka reads each setting as ``listener.name.<listener>.<key>`` first, then ``<key>``; the
``lookup`` passed in does that. Keystores and truststores are PEM: a file
(``ssl.keystore.location`` holding the private key and the certificate chain,
``ssl.truststore.location`` the CA certificates) or the PEM text itself
(``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``, ``ssl.truststore.certificates``).
JKS and PKCS12 stores are refused at start with an error naming the setting, as is anything else
this broker cannot honour.

A client certificate becomes the principal ``User:<subject DN>``, the DN written as RFC 2253
(Java's ``X500Principal.getName()``), which is what Kafka's default principal builder with
``ssl.principal.mapping.rules=DEFAULT`` gives.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from reference_broker.security.listeners import ListenerError

Lookup = Callable[[str], Any]
CLIENT_AUTH_MODES = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def server_context(listener: str, lookup: Lookup) -> ssl.SSLContext:
    """The server-side context of one TLS listener; ``ListenerError`` names a bad setting."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, lookup)
    _load_keystore(context, listener, lookup)
    has_trust = _load_truststore(context, lookup)
    mode = str(lookup("ssl.client.auth") or "none").lower()
    if mode not in CLIENT_AUTH_MODES:
        raise ListenerError(f"ssl.client.auth: {mode!r} is not one of required, requested, none")
    if mode != "none" and not has_trust:
        raise ListenerError(
            f"ssl.client.auth: {mode} on listener {listener} needs a truststore"
            " (ssl.truststore.location or ssl.truststore.certificates)"
        )
    context.verify_mode = CLIENT_AUTH_MODES[mode]
    if lookup("ssl.cipher.suites"):
        raise ListenerError("ssl.cipher.suites: choosing cipher suites is not supported by this broker")
    rules = lookup("ssl.principal.mapping.rules")
    if rules and str(rules).strip() != "DEFAULT":
        raise ListenerError("ssl.principal.mapping.rules: only DEFAULT is supported by this broker")
    return context


#: ``ssl.endpoint.identification.algorithm`` values: ``https`` checks the peer's host name
#: against its certificate, empty does not (Kafka's only two choices).
ENDPOINT_IDENTIFICATION = ("https", "")


def client_context(listener: str, lookup: Lookup) -> ssl.SSLContext:
    """The client-side context this node uses towards peers on ``listener`` (Kafka uses the
    listener's own ``ssl.*`` settings for inter-broker connections): the peer's certificate is
    verified against the truststore (the system's CAs without one), the node's keystore is its
    client certificate, and the host name is checked unless
    ``ssl.endpoint.identification.algorithm`` is empty."""
    algorithm = str(lookup("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if algorithm not in ENDPOINT_IDENTIFICATION:
        raise ListenerError(
            f"ssl.endpoint.identification.algorithm: {algorithm!r} is not supported (https, or empty"
            " for no host name verification)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _set_protocols(context, lookup)
    _load_keystore(context, listener, lookup)
    if not _load_truststore(context, lookup):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


def _set_protocols(context: ssl.SSLContext, lookup: Lookup) -> None:
    enabled = lookup("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]
    unknown = [p for p in enabled if p not in _TLS_VERSIONS]
    if unknown:
        raise ListenerError(
            f"ssl.enabled.protocols: {', '.join(unknown)} not supported (only TLSv1.2, TLSv1.3)"
        )
    versions = sorted(_TLS_VERSIONS[p] for p in enabled)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _store_type(key: str, lookup: Lookup) -> None:
    store_type = str(lookup(key) or "JKS").upper()
    if store_type != "PEM":
        default = " (Kafka's default)" if lookup(key) is None else ""
        raise ListenerError(f"{key}: {store_type}{default} stores are not supported; use PEM")


def _load_keystore(context: ssl.SSLContext, listener: str, lookup: Lookup) -> None:
    location = lookup("ssl.keystore.location")
    chain = lookup("ssl.keystore.certificate.chain")
    key = lookup("ssl.keystore.key")
    password = lookup("ssl.key.password") or lookup("ssl.keystore.password")
    if location and (chain or key):
        raise ListenerError(
            "ssl.keystore.location: give either a keystore file or ssl.keystore.certificate.chain"
            " with ssl.keystore.key, not both"
        )
    if not location and not (chain and key):
        raise ListenerError(
            f"ssl.keystore.location: listener {listener} uses TLS and needs a keystore"
            " (ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key)"
        )
    _store_type("ssl.keystore.type", lookup)
    try:
        if location:
            context.load_cert_chain(str(location), password=password or None)
            return
        with tempfile.TemporaryDirectory(prefix="broker-keystore-") as scratch:
            path = os.path.join(scratch, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(f"{str(key).strip()}\n{str(chain).strip()}\n")
            context.load_cert_chain(path, password=password or None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        setting = "ssl.keystore.location" if location else "ssl.keystore.certificate.chain"
        raise ListenerError(f"{setting}: cannot load the keystore of listener {listener}: {exc}") from None


def _load_truststore(context: ssl.SSLContext, lookup: Lookup) -> bool:
    location = lookup("ssl.truststore.location")
    certificates = lookup("ssl.truststore.certificates")
    if lookup("ssl.truststore.password"):  # Kafka's DefaultSslEngineFactory refuses it too
        raise ListenerError(
            "ssl.truststore.password: SSL trust store password cannot be specified for PEM format"
            if location or certificates else
            "ssl.truststore.password: SSL trust store is not specified, but trust store password is"
            " specified")
    if not location and not certificates:
        return False
    _store_type("ssl.truststore.type", lookup)
    try:
        if location:
            context.load_verify_locations(cafile=str(location))
        else:
            context.load_verify_locations(cadata=str(certificates))
    except (OSError, ssl.SSLError, ValueError) as exc:
        setting = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise ListenerError(f"{setting}: cannot load the truststore: {exc}") from None
    return True


#: Python's attribute names in ``getpeercert()`` -> the keywords of RFC 2253 / Java's X500Principal.
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_DN_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12"}


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in ',+"\\<>;' or (char == "#" and i == 0) or (char == " " and i in (0, len(value) - 1)):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def subject_dn(peercert: dict[str, Any]) -> str:
    """The certificate subject as RFC 2253 text (most specific attribute first)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        parts = []
        for attr, value in rdn:
            keyword = _DN_KEYWORDS.get(attr)
            if keyword is not None:
                parts.append(f"{keyword}={_escape(value)}")
            else:
                oid = _DN_OIDS.get(attr, attr)
                parts.append(f"{oid}=#{_der_string(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _der_string(value: str) -> str:
    """Java prints attributes without a keyword as the hex of their DER encoding (IA5String for
    e-mail addresses, PrintableString otherwise)."""
    data = value.encode()
    tag = 0x16 if "@" in value else 0x13
    return bytes([tag, len(data)]).hex() + data.hex()
