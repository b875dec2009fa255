"""Listeners as Kafka configures them: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

Each listener has a name (``PLAINTEXT``, ``CLIENTS``, ...), a security protocol taken from the map
(Kafka's default map names each protocol after itself) and an address to bind. What Metadata,
FindCoordinator and DescribeCluster answer is the advertised address of the listener the client
connected on, as Kafka does; ``advertised.listeners`` defaults to ``listeners``. Without
``listeners`` the broker has one PLAINTEXT listener on the CLI's ``--host``/``--port``.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Mapping, Sequence

from reference_broker.config import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)")


class ListenerError(ConfigError):
    """A listener setting the broker cannot serve; the message names the setting."""


@dataclasses.dataclass
class Listener:
    """One bound listener; ``port`` is the real port once bound (0 asks the OS for one)."""

    name: str
    security_protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def advertised(self) -> tuple[str, int]:
        """The address clients are told to use for this listener."""
        host = self.advertised_host or self.host or socket.getfqdn()
        port = self.advertised_port or self.port
        return host, port


def parse_endpoint(setting: str, text: str) -> tuple[str, str, int]:
    """``NAME://host:port`` into its parts (host may be empty or a bracketed IPv6 address)."""
    match = _LISTENER.fullmatch(text.strip())
    if match is None:
        raise ListenerError(f"{setting}: {text!r} is not NAME://host:port")
    port = int(match["port"])
    if port > 65535:
        raise ListenerError(f"{setting}: port {port} in {text!r} is not between 0 and 65535")
    return match["name"].upper(), match["host"].strip("[]"), port


def parse_protocol_map(entries: Sequence[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL`` pairs)."""
    result: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ListenerError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {protocol!r} for {name} is not one of"
                f" {', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in result:
            raise ListenerError(f"listener.security.protocol.map: {name} is mapped twice")
        result[name] = protocol
    return result


def build_listeners(
    listeners: Sequence[str],
    advertised: Sequence[str],
    protocol_map: Mapping[str, str] | None,
    controller_names: Sequence[str] = (),
) -> list[Listener]:
    """The listeners of ``listeners`` with their protocols and advertised addresses, checked as
    Kafka checks them (unique names and ports, every name mapped, advertised names known).
    ``controller_names``: the controller listeners of a cluster node (else CONTROLLER is refused)."""
    mapping = dict(protocol_map) if protocol_map is not None else dict(DEFAULT_PROTOCOL_MAP)
    result: list[Listener] = []
    for text in listeners:
        name, host, port = parse_endpoint("listeners", text)
        if any(other.name == name for other in result):
            raise ListenerError(f"listeners: listener name {name} appears more than once")
        if port and any(other.port == port and other.host == host for other in result):
            raise ListenerError(f"listeners: {host}:{port} is used by more than one listener")
        if name not in mapping:
            raise ListenerError(
                f"listener.security.protocol.map: no security protocol for listener {name}"
                f" (map has {', '.join(sorted(mapping)) or 'nothing'})"
            )
        if name == "CONTROLLER" and name not in controller_names:
            raise ListenerError("listeners: CONTROLLER listeners are for KRaft controllers, not served here")
        result.append(Listener(name, mapping[name], host, port))
    if not result:
        raise ListenerError("listeners: at least one listener is needed")
    seen: set[str] = set()
    for text in advertised:
        name, host, port = parse_endpoint("advertised.listeners", text)
        match = next((lst for lst in result if lst.name == name), None)
        if match is None:
            raise ListenerError(f"advertised.listeners: {name} is not one of the listeners")
        if name in seen:
            raise ListenerError(f"advertised.listeners: listener name {name} appears more than once")
        seen.add(name)
        match.advertised_host = host or None
        match.advertised_port = port or None
    return result
