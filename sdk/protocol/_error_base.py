"""The base exception classes of ``sdk.protocol.errors``, in a module of their own so that the
generated per-code classes (``_generated_errors``) can derive from ``KafkaError`` without an
import cycle."""

from __future__ import annotations

__all__ = ["DecodeError", "EncodeError", "KafkaError", "UnknownKafkaError"]


class DecodeError(ValueError):
    """Bytes that do not decode as the expected structure.

    The only exception the decoders raise for bad input, so callers (notably the broker's network
    layer) can answer or drop one connection without guessing what else might escape.
    """

    def __init__(self, reason: str, offset: int | None = None):
        self.reason = reason
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{reason}{where}")


class EncodeError(ValueError):
    """A message whose field values cannot be written in the requested version."""


class _CodeAlias:
    """``errno``: aiokafka's (and kafka-python's) name for ``code``, on the class and on instances."""

    def __get__(self, instance: object, owner: type[KafkaError]) -> int:
        return (owner if instance is None else instance).code  # type: ignore[attr-defined]


class KafkaError(Exception):
    """Base of every error a Kafka broker can answer with."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    java_class: str = ""
    errno = _CodeAlias()

    def __init__(self, message: str | None = None):
        self.message = message
        super().__init__(message or self.name)

    def __str__(self) -> str:
        if self.message and self.message != self.name:
            return f"[Error {self.code}] {self.name}: {self.message}"
        return f"[Error {self.code}] {self.name}"


class UnknownKafkaError(KafkaError):
    """A code this version of the project does not know; ``code`` is the one received."""

    def __init__(self, code: int, message: str | None = None):
        self.code = code
        self.name = f"UNKNOWN_CODE_{code}"
        super().__init__(message)
