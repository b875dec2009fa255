"""The sans-IO shape of a SASL mechanism, and PLAIN.

A mechanism turns server challenges into client responses and never touches the socket; the
connection runs the exchange (SaslHandshake, then SaslAuthenticate tokens) around it. One instance
belongs to one connection: ``initial_response`` starts a new exchange, so the same instance
re-authenticates that connection (KIP-368) but is never shared between connections that may
authenticate at the same time (``copy`` makes the per-connection instance).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

__all__ = ["PlainMechanism", "SaslMechanism"]


class SaslMechanism(ABC):
    """One side of a SASL exchange; ``name`` is what SaslHandshake announces (e.g. ``"PLAIN"``)."""

    name: str = ""

    async def prepare(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Fetch what the next exchange needs (an OAuth token, ...); awaited before every
        authentication, re-authentications included."""

    @abstractmethod
    def initial_response(self) -> bytes:
        """Start a new exchange: the first token the client sends."""

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The reply to a server token, or None when the exchange is complete."""
        return None

    @property
    def complete(self) -> bool:
        """True once the exchange succeeded from the client's side (server proof checked)."""
        return True

    def copy(self) -> SaslMechanism:
        """A fresh instance with the same settings, for another connection."""
        return copy.copy(self)


class PlainMechanism(SaslMechanism):
    """RFC 4616 PLAIN: one message, ``authzid NUL authcid NUL password``. Only safe over TLS."""

    name = "PLAIN"

    def __init__(self, username: str, password: str, authorization_id: str = ""):
        self._token = b"\0".join(s.encode("utf-8") for s in (authorization_id, username, password))

    def initial_response(self) -> bytes:
        return self._token
