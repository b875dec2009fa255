"""Spark's Kafka security options as the SDK's settings.

``kafka.security.protocol`` and ``kafka.sasl.mechanism`` are SDK settings of the same name
(``security_protocol``, ``sasl_mechanism``) and go through the generic mapping. This module reads
what has no SDK setting of its name: the ``kafka.ssl.*`` options become one ``ssl_context`` and
``kafka.sasl.jaas.config`` (PLAIN or SCRAM login module) becomes ``sasl_plain_username`` and
``sasl_plain_password``.

Python's ``ssl`` reads PEM only: Java's JKS and PKCS12 stores are refused with what to use instead.
Options are parsed on the driver and the settings are pickled to the executors, and an
``ssl.SSLContext`` cannot be pickled, so the context built here pickles as the options it was
built from and is built again where it is unpickled.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from typing import Any

__all__ = ["SSL_OPTIONS", "security_settings"]

#: The ``kafka.ssl.*`` options understood (lower case, as Spark passes them).
SSL_OPTIONS = (
    "kafka.ssl.truststore.location", "kafka.ssl.truststore.type", "kafka.ssl.truststore.certificates",
    "kafka.ssl.keystore.location", "kafka.ssl.keystore.type", "kafka.ssl.keystore.password",
    "kafka.ssl.key.password", "kafka.ssl.endpoint.identification.algorithm",
)
_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\s*(?P<args>.*?);?\s*$", re.S)
_JAAS_ARG = re.compile(r"(\w+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|(\S+?))(?=\s|;|$)")
_PASSWORD_LOGINS = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                    "org.apache.kafka.common.security.scram.ScramLoginModule")


def _error(message: str) -> Exception:
    from spark_integration.options import OptionError

    return OptionError(message)


class _PicklableSSLContext(ssl.SSLContext):
    """An ``ssl.SSLContext`` that pickles as the ``kafka.ssl.*`` options it was built from."""

    ssl_options: dict[str, str]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _build_context, (self.ssl_options,)


def _pem_only(options: Mapping[str, str], store: str) -> None:
    kind = (options.get(f"kafka.ssl.{store}.type") or "").strip().upper()
    location = options.get(f"kafka.ssl.{store}.location") or ""
    if kind not in ("", "PEM") or (not kind and location.lower().endswith((".jks", ".p12", ".pfx"))):
        raise _error(f"option 'kafka.ssl.{store}.location': Python reads PEM files only, not "
                     f"{kind or location.rsplit('.', 1)[-1].upper()}; convert it (keytool -exportcert -rfc, "
                     "or "
                     f"openssl pkcs12 -nodes) and set kafka.ssl.{store}.type=PEM")


def _build_context(options: dict[str, str]) -> ssl.SSLContext:
    _pem_only(options, "truststore")
    _pem_only(options, "keystore")
    if options.get("kafka.ssl.truststore.password"):
        raise _error("option 'kafka.ssl.truststore.password' protects a JKS or PKCS12 store: a PEM "
                     "truststore has none, leave it out")
    context = _PicklableSSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.ssl_options = dict(options)
    location = options.get("kafka.ssl.truststore.location")
    certificates = options.get("kafka.ssl.truststore.certificates")
    try:
        if location or certificates:
            context.load_verify_locations(cafile=location or None, cadata=certificates or None)
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        keystore = options.get("kafka.ssl.keystore.location")
        if keystore:
            password = options.get("kafka.ssl.key.password") or options.get("kafka.ssl.keystore.password")
            context.load_cert_chain(keystore, password=password or None)
    except (OSError, ssl.SSLError) as exc:
        raise _error(f"the kafka.ssl.* options do not make a TLS context: {exc}") from exc
    algorithm = options.get("kafka.ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.strip().lower() not in ("", "https"):
        raise _error(f"option 'kafka.ssl.endpoint.identification.algorithm' must be https or empty, "
                     f"not {algorithm!r}")
    if algorithm is not None and not algorithm.strip():  # Kafka: empty turns host name checks off
        context.check_hostname = False
    return context


def _jaas(config: str) -> dict[str, str]:
    match = _JAAS.match(config)
    if match is None:
        raise _error("option 'kafka.sasl.jaas.config' must be '<LoginModule> required username=\"...\" "
                     "password=\"...\";'")
    if match["module"] not in _PASSWORD_LOGINS:
        raise _error(f"option 'kafka.sasl.jaas.config': the login module {match['module']} is not supported "
                     f"(only {', '.join(_PASSWORD_LOGINS)}: SASL PLAIN and SCRAM)")
    args = {m[1]: m[2] if m[2] is not None else m[3] for m in _JAAS_ARG.finditer(match["args"])}
    if "username" not in args or "password" not in args:
        raise _error("option 'kafka.sasl.jaas.config' needs username=\"...\" and password=\"...\"")
    return {"sasl_plain_username": args["username"].replace('\\"', '"'),
            "sasl_plain_password": args["password"].replace('\\"', '"')}


def security_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The SDK settings the ``kafka.ssl.*`` and ``kafka.sasl.jaas.config`` options make; an
    unknown ``kafka.ssl.*`` option is refused with the nearest known one."""
    settings: dict[str, Any] = {}
    given = {name: value for name, value in options.items() if name.startswith("kafka.ssl.")}
    for name in given:
        if name not in SSL_OPTIONS and name != "kafka.ssl.truststore.password":
            from spark_integration.options import _unknown

            _unknown(name, {n: n for n in SSL_OPTIONS}, f"option {name!r} is not supported")
    if given:
        protocol = (options.get("kafka.security.protocol") or "PLAINTEXT").upper()
        if protocol not in ("SSL", "SASL_SSL"):
            raise _error(
                f"the kafka.ssl.* options need kafka.security.protocol SSL or SASL_SSL, not {protocol}")
        settings["ssl_context"] = _build_context(given)
    for name in options:
        if name.startswith("kafka.sasl.jaas.") and name != "kafka.sasl.jaas.config":
            raise _error(f"option {name!r} is not supported (kafka.sasl.jaas.config is)")
    jaas = options.get("kafka.sasl.jaas.config")
    if jaas is not None:
        settings.update(_jaas(jaas))
    return settings
