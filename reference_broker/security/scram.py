"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka runs it, and the durable credential store.

A credential is what Kafka keeps per user and mechanism: salt, StoredKey = H(HMAC(SaltedPassword,
"Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count; the
password and the salted password are never stored. A single broker's store is one JSON file in
its data directory, replaced atomically on every change (AlterUserScramCredentials), so
credentials survive restarts; a cluster node's store follows the metadata log instead
(``use_metadata_log``), as Kafka's ScramPublisher feeds its CredentialProvider.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from reference_broker.security.errors import SaslAuthenticationFailed

#: Kafka's ScramMechanism: protocol type code -> (name, hash name, minimum iterations).
MECHANISMS = {1: ("SCRAM-SHA-256", "sha256"), 2: ("SCRAM-SHA-512", "sha512")}
MECHANISM_TYPES = {name: code for code, (name, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, hash_name: str, salt: bytes, salted: bytes, iterations: int
    ) -> ScramCredential:
        client_key = hmac.new(salted, b"Client Key", hash_name).digest()
        return cls(
            salt=salt,
            stored_key=hashlib.new(hash_name, client_key).digest(),
            server_key=hmac.new(salted, b"Server Key", hash_name).digest(),
            iterations=iterations,
        )

    @classmethod
    def from_password(
        cls, hash_name: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        salt = secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
        return cls.from_salted_password(hash_name, salt, salted, iterations)

    def to_json(self) -> dict[str, object]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScramCredential:
        return cls(
            salt=base64.b64decode(str(data["salt"])),
            stored_key=base64.b64decode(str(data["stored_key"])),
            server_key=base64.b64decode(str(data["server_key"])),
            iterations=int(str(data["iterations"])),
        )


class ScramCredentialStore:
    """user -> mechanism name -> credential, kept in ``<data dir>/.security/scram-credentials.json``
    (``path`` None: in memory only, a cluster node's copy of the metadata image's credentials)."""

    def __init__(self, data_dir: Path | None):
        self.path: Path | None = (
            None if data_dir is None else data_dir / ".security" / "scram-credentials.json"
        )
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if self.path is not None and self.path.exists():
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self._users = {
                user: {mech: ScramCredential.from_json(c) for mech, c in creds.items()}
                for user, creds in raw.items()
            }

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: dict(creds) for user, creds in self._users.items() if creds}

    def apply(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None:
        """Change credentials and write the store before returning (callers validated them)."""
        for user, mechanism in deletions:
            self._users.get(user, {}).pop(mechanism, None)
            if not self._users.get(user):
                self._users.pop(user, None)
        for user, mechanism, credential in upserts:
            self._users.setdefault(user, {})[mechanism] = credential
        self._save()

    def use_metadata_log(self) -> None:
        """From now on the credentials are the metadata image's (``replace``): the data dir's
        file, a single node's store, is neither read nor written."""
        self.path = None
        self._users = {}

    def replace(self, users: Mapping[str, Mapping[str, ScramCredential]]) -> None:
        """Every credential at once (a cluster node publishing its metadata image's)."""
        self._users = {user: dict(creds) for user, creds in users.items() if creds}
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {u: {m: c.to_json() for m, c in creds.items()} for u, creds in self._users.items()}
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(data, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)


def _attributes(message: str) -> dict[str, str]:
    result = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslAuthenticationFailed(f"Invalid SCRAM message: {message!r}")
        result[key] = value
    return result


def _decode_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one SCRAM exchange: client-first -> server-first, client-final ->
    server-final. Failures raise ``SaslAuthenticationFailed`` with Kafka's message."""

    def __init__(self, mechanism: str, store: ScramCredentialStore):
        self.mechanism = mechanism
        self.hash_name = MECHANISMS[MECHANISM_TYPES[mechanism]][1]
        self.store = store
        self.complete = False
        self.authorization_id = ""
        self.lifetime_ms: int | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        if self._credential is None:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        gs2, _, rest = text.partition(",")
        authzid_part, _, bare = rest.partition(",")
        if gs2 not in ("n", "y") or (authzid_part and not authzid_part.startswith("a=")):
            raise SaslAuthenticationFailed("Invalid SCRAM client first message")
        attrs = _attributes(bare)
        user = _decode_saslname(attrs.get("n", ""))
        authzid = _decode_saslname(authzid_part[2:]) if authzid_part else ""
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self.store.get(user, self.mechanism)
        if credential is None or "r" not in attrs:
            raise SaslAuthenticationFailed("Authentication failed: Invalid user credentials")
        self.authorization_id = user
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Unexpected SCRAM message after completion")
        credential = self._credential
        assert credential is not None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationFailed("Invalid SCRAM client final message: no proof")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise SaslAuthenticationFailed("Invalid SCRAM client final message: nonce mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise SaslAuthenticationFailed("Invalid SCRAM client final message: bad proof") from None
        signature = hmac.new(credential.stored_key, auth_message, self.hash_name).digest()
        if len(proof) != len(signature):
            raise SaslAuthenticationFailed("Authentication failed: Invalid client final message")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), credential.stored_key):
            raise SaslAuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL"
                f" mechanism {self.mechanism}"
            )
        server_signature = hmac.new(credential.server_key, auth_message, self.hash_name).digest()
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)
