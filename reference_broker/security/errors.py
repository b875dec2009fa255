"""Exceptions of the security layer."""

from __future__ import annotations


class SaslAuthenticationFailed(Exception):
    """The client's credentials or SASL messages were refused; the text is what the client is
    sent as SaslAuthenticate's error_message (Kafka's wording where it has one)."""
