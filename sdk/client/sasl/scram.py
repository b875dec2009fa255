"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 message flow, RFC 7677), the client side.

Three messages: client-first (user name and a fresh nonce), client-final (the proof that the
client knows the salted password, for the salt and iteration count the server sent) and the check
of the server's signature in server-final, which proves the server knows the credential too. The
password is used as its UTF-8 bytes, as Kafka's ``ScramFormatter`` does (no SASLprep), and the
client refuses fewer than 4096 iterations, as Kafka's ``ScramSaslClient`` does. The primitives are
the standard library's (``hashlib.pbkdf2_hmac``, ``hmac``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from sdk.client.sasl.base import SaslMechanism
from sdk.errors import SaslAuthenticationError, SaslStateError

__all__ = ["SCRAM_HASHES", "ScramMechanism"]

#: Mechanism name -> hashlib name.
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
_GS2_HEADER = "n,,"


def _sasl_name(username: str) -> str:
    """RFC 5802 ``saslname``: ``=`` and ``,`` escaped."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    """``a=1,b=2`` -> ``{"a": "1", "b": "2"}`` (values may contain ``=``)."""
    result = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslStateError(f"malformed SCRAM server message {message!r}")
        result[key] = value
    return result


class ScramMechanism(SaslMechanism):
    """SCRAM with SHA-256 or SHA-512 for ``username``/``password``."""

    def __init__(self, name: str, username: str, password: str):
        if name not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {name!r}")
        self.name = name
        self._hash = SCRAM_HASHES[name]
        self._username = username
        self._password = password.encode("utf-8")
        self._state = "new"
        self._client_nonce = ""
        self._client_first_bare = ""
        self._expected_server_signature = b""

    def _new_nonce(self) -> str:
        """A printable random nonce (any characters but ``,``)."""
        return secrets.token_urlsafe(24)

    def initial_response(self) -> bytes:
        self._client_nonce = self._new_nonce()
        self._client_first_bare = f"n={_sasl_name(self._username)},r={self._client_nonce}"
        self._expected_server_signature = b""
        self._state = "sent-first"
        return (_GS2_HEADER + self._client_first_bare).encode("utf-8")

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        message = challenge.decode("utf-8", errors="replace")
        if self._state == "sent-first":
            self._state = "sent-final"
            return self._client_final(message).encode("utf-8")
        if self._state == "sent-final":
            self._check_server_final(message)
            self._state = "done"
            return None
        raise SaslStateError(f"unexpected SCRAM message {message!r} in state {self._state}")

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def _client_final(self, server_first: str) -> str:
        attributes = _attributes(server_first)
        if "e" in attributes:
            raise SaslAuthenticationError(f"{self.name}: server refused: {attributes['e']}")
        try:
            nonce, salt_text, iterations_text = attributes["r"], attributes["s"], attributes["i"]
            salt = base64.b64decode(salt_text, validate=True)
            iterations = int(iterations_text)
        except (KeyError, ValueError) as exc:
            raise SaslStateError(f"malformed SCRAM server-first message {server_first!r}") from exc
        if not nonce.startswith(self._client_nonce) or nonce == self._client_nonce:
            raise SaslStateError(f"{self.name}: the server's nonce does not extend the client's")
        if iterations < MIN_ITERATIONS:
            raise SaslStateError(
                f"{self.name}: {iterations} iterations requested, fewer than the minimum {MIN_ITERATIONS}"
            )
        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self._hmac(salted, b"Server Key")
        self._expected_server_signature = self._hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}"

    def _check_server_final(self, server_final: str) -> None:
        attributes = _attributes(server_final)
        if "e" in attributes:
            raise SaslAuthenticationError(f"{self.name}: server refused: {attributes['e']}")
        try:
            signature = base64.b64decode(attributes["v"], validate=True)
        except (KeyError, ValueError) as exc:
            raise SaslStateError(f"malformed SCRAM server-final message {server_final!r}") from exc
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise SaslAuthenticationError(
                f"{self.name}: the server's signature is wrong (it does not know this credential)"
            )
