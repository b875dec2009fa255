"""What every subcommand shares: exit codes, the expected-failure exception, where the cluster is
and how to reach it (``--bootstrap-server``, ``TOPICWRIGHT_BOOTSTRAP``, ``--command-config``).

``--command-config`` takes a Kafka-style ``.properties`` file, the one Kafka's tools take, mapped
key by key to the SDK's client settings; a key with no mapping is a usage error naming it, so a
setting is never dropped silently.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "BOOTSTRAP_ENV",
    "CONSUMER_PROPERTIES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CliError",
    "UsageError",
    "add_common_options",
    "admin_client",
    "client_settings",
    "parse_key_value",
    "raise_item_error",
    "read_properties",
    "settings_from_properties",
    "without_consumer_settings",
]

#: Environment variable read when ``--bootstrap-server`` is not given.
BOOTSTRAP_ENV = "TOPICWRIGHT_BOOTSTRAP"

EXIT_OK = 0
#: The cluster answered, and refused or failed the operation (or the data was bad).
EXIT_FAILURE = 1
#: The command line or the command config is wrong (argparse uses 2 too).
EXIT_USAGE = 2
#: No bootstrap server could be reached.
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: its message is printed without a traceback, and the tool exits with
    ``exit_code``."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    """A bad command line or command config (exit code ``EXIT_USAGE``)."""

    exit_code = EXIT_USAGE


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """``"k=v"`` as ``("k", "v")`` (the value may contain ``=``); UsageError otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"{option}: expected key=value, got {text!r}")
    return key, value


# -- --command-config ---------------------------------------------------------------------------

_CONTINUATION = re.compile(r"(?<!\\)(\\\\)*\\$")


def read_properties(path: str) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments,
    backslash line continuations. UsageError if the file cannot be read or a line has no key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--command-config: cannot read {path}: {exc.strerror or exc}") from None
    properties: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if _CONTINUATION.search(line):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            if re.fullmatch(r"(?:[^=:\s\\]|\\.)+", line):  # a key without a value
                properties[line] = ""
                continue
            raise UsageError(f"--command-config: {path}:{number}: cannot read {raw!r}")
        properties[match.group(1).replace("\\", "")] = match.group(2).rstrip()
    return properties


_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$"
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)')
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _jaas_credentials(value: str) -> tuple[str, str]:
    """(username, password) of a PlainLoginModule or ScramLoginModule ``sasl.jaas.config``."""
    match = _JAAS.match(value)
    if match is None or match.group("module") not in (_PLAIN_MODULE, _SCRAM_MODULE):
        raise UsageError(
            "sasl.jaas.config: expected "
            f'"{_PLAIN_MODULE} required username=\\"...\\" password=\\"...\\";" (or {_SCRAM_MODULE})'
        )
    options = {
        m.group(1): (m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
        for m in _JAAS_OPTION.finditer(match.group("opts"))
    }
    if "username" not in options or "password" not in options:
        raise UsageError('sasl.jaas.config: needs username="..." and password="..."')
    return options["username"], options["password"]


def _milliseconds(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{key}: expected a number of milliseconds, got {value!r}") from None
    if number <= 0:
        raise UsageError(f"{key}: must be > 0, got {value!r}")
    return number


#: Kafka client property -> SDK setting, for the settings that are plain numbers of milliseconds.
_TIMES = {
    "request.timeout.ms": "request_timeout_ms",
    "socket.connection.setup.timeout.ms": "connect_timeout_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
}
#: TLS keys: read together into one ``ssl.SSLContext``.
_SSL_KEYS = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.endpoint.identification.algorithm",
    }
)
_OTHER_KEYS = frozenset({"security.protocol", "sasl.mechanism", "sasl.jaas.config", "client.id"})
#: Kafka consumer property -> SDK consumer setting: only a subcommand that builds a consumer takes
#: them (``consume``); another refuses them, as a setting that would have no effect.
CONSUMER_PROPERTIES = {"group.protocol": "group_protocol", "group.remote.assignor": "group_remote_assignor"}
_CONSUMER_SETTINGS = frozenset(CONSUMER_PROPERTIES.values())
_GROUP_PROTOCOLS = ("classic", "consumer")
#: Every key ``--command-config`` understands.
KNOWN_PROPERTIES = frozenset(_TIMES) | _SSL_KEYS | _OTHER_KEYS | frozenset(CONSUMER_PROPERTIES)


def _ssl_context(properties: dict[str, str]) -> ssl.SSLContext:
    """One TLS context from the ``ssl.*`` keys. Certificates and keys must be PEM (Python's ssl
    reads no JKS or PKCS12): the store types must say PEM when given."""
    for type_key in ("ssl.truststore.type", "ssl.keystore.type"):
        store_type = properties.get(type_key)
        if store_type is not None and store_type.upper() != "PEM":
            raise UsageError(f"{type_key}: only PEM stores can be read, not {store_type}")
    if "ssl.keystore.certificate.chain" in properties or "ssl.keystore.key" in properties:
        raise UsageError(
            "ssl.keystore.certificate.chain/ssl.keystore.key: give the certificate and key as one "
            "PEM file in ssl.keystore.location instead"
        )
    from sdk.errors import ConfigError
    from sdk.helpers import create_ssl_context

    try:
        # Given CAs replace the system's, as a Kafka truststore does.
        context = create_ssl_context(
            cafile=properties.get("ssl.truststore.location"),
            cadata=properties.get("ssl.truststore.certificates"),
            certfile=properties.get("ssl.keystore.location"),
            password=properties.get("ssl.key.password") or properties.get("ssl.keystore.password"),
        )
    except ConfigError as exc:
        raise UsageError(f"--command-config: TLS stores: {exc}") from None
    if properties.get("ssl.endpoint.identification.algorithm", "https") == "":
        context.check_hostname = False
    return context


def settings_from_properties(properties: dict[str, str]) -> dict[str, Any]:
    """SDK client settings (``security_protocol``, ``ssl_context``, ``sasl_*``, timeouts, ...)
    from Kafka client properties; UsageError naming every key without a mapping."""
    unknown = sorted(set(properties) - KNOWN_PROPERTIES)
    if unknown:
        raise UsageError(
            f"--command-config: unknown or unsupported keys: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(KNOWN_PROPERTIES))})"
        )
    settings: dict[str, Any] = {}
    for key, setting in _TIMES.items():
        if key in properties:
            settings[setting] = _milliseconds(key, properties[key])
    if "client.id" in properties:
        settings["client_id"] = properties["client.id"]
    for key, setting in CONSUMER_PROPERTIES.items():
        if key in properties:
            settings[setting] = properties[key]
    if "group.protocol" in properties:
        given = properties["group.protocol"]
        if given.lower() not in _GROUP_PROTOCOLS:
            raise UsageError(f"group.protocol: expected classic or consumer, got {given!r}")
        settings["group_protocol"] = given.lower()
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    settings["security_protocol"] = protocol
    ssl_keys = sorted(_SSL_KEYS & set(properties))
    if ssl_keys and protocol not in ("SSL", "SASL_SSL"):
        raise UsageError(f"--command-config: {', '.join(ssl_keys)} need security.protocol SSL or SASL_SSL")
    if protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = _ssl_context(properties)
    sasl_keys = sorted({"sasl.mechanism", "sasl.jaas.config"} & set(properties))
    if sasl_keys and protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(
            f"--command-config: {', '.join(sasl_keys)} need security.protocol SASL_PLAINTEXT or SASL_SSL"
        )
    if sasl_keys:
        settings["sasl_mechanism"] = properties.get("sasl.mechanism", "GSSAPI").upper()
        if "sasl.jaas.config" in properties:
            username, password = _jaas_credentials(properties["sasl.jaas.config"])
            settings["sasl_plain_username"] = username
            settings["sasl_plain_password"] = password
    return settings


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``bootstrap_servers`` and the connection settings every client of this run is built with."""
    bootstrap = getattr(args, "bootstrap_server", None) or os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        raise UsageError(f"no cluster given: use --bootstrap-server host:port or set {BOOTSTRAP_ENV}")
    for address in bootstrap.split(","):
        host, sep, port = address.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UsageError(f"--bootstrap-server: expected host:port[,host:port...], got {bootstrap!r}")
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap}
    config_path = getattr(args, "command_config", None)
    if config_path:
        settings.update(settings_from_properties(read_properties(config_path)))
    consumer_keys = sorted(k for k, s in CONSUMER_PROPERTIES.items() if s in settings)
    if consumer_keys and not getattr(args, "builds_consumer", False):
        raise UsageError(
            f"--command-config: {', '.join(consumer_keys)}: consumer properties, taken by `consume` only"
        )
    return settings


def without_consumer_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` for a client other than a consumer (the consumer-only ones left out)."""
    return {k: v for k, v in settings.items() if k not in _CONSUMER_SETTINGS}


def add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every subcommand takes. ``suppress`` leaves an option out of the namespace
    unless given, so it may be given before or after the subcommand name."""
    default: Callable[[Any], Any] = (lambda _value: argparse.SUPPRESS) if suppress else (lambda value: value)
    parser.add_argument(
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT",
        default=default(None),
        help=f"the cluster (comma-separated list); default: ${BOOTSTRAP_ENV}",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=default(None),
        help="Kafka client properties (security.protocol, sasl.*, ssl.*, client.id, *.ms; "
        "group.protocol and group.remote.assignor for consume)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="machine-readable output (JSON) instead of tables",
    )


def admin_client(settings: dict[str, Any]) -> Any:
    """An ``sdk.AdminClient`` for ``async with`` (connects on entry, closes on exit)."""
    from sdk.admin import AdminClient

    return AdminClient(**without_consumer_settings(settings))


def raise_item_error(error: BaseException | None, what: str) -> None:
    """Raise ``error`` (a per-item result of the admin client) as a CliError naming the item."""
    if error is None:
        return
    name = type(error).__name__
    text = str(error)
    raise CliError(f"{what}: {name}: {text}" if text and text != name else f"{what}: {name}")


def existing_partitions(topic: str, description: Any) -> list[int]:
    """The partition numbers of ``topic`` from its ``TopicDescription``; CliError when the topic
    does not exist or could not be described."""
    from sdk.errors import UnknownTopicOrPartitionError

    if isinstance(description.error, UnknownTopicOrPartitionError):
        raise CliError(f"topic {topic!r} does not exist")
    raise_item_error(description.error, f"topic {topic!r}")
    return sorted(p.partition for p in description.partitions)
