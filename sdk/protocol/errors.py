"""Kafka protocol errors: one exception class per error code, plus the codec's own errors.

The classes are built from the generated table so that a newer Kafka's codes arrive by
re-running the generator. Each class carries the code, the protocol name and whether Kafka's Java
client retries it, which is what the producer and consumer consult when deciding to retry.
"""

from __future__ import annotations

import enum
from typing import NoReturn

from sdk.protocol._generated_errors import ERRORS


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


class KafkaError(Exception):
    """Base of every error a Kafka broker can answer with."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    java_class: str = ""

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


def _class_name(error_name: str) -> str:
    name = "".join(part.capitalize() for part in error_name.lower().split("_"))
    name = name.removesuffix("Exception").removesuffix("Error")
    return name + "Error"


ErrorCode = enum.IntEnum("ErrorCode", [(name, code) for code, name, _, _ in ERRORS])  # type: ignore[misc]

_BY_CODE: dict[int, type[KafkaError]] = {}
__all__ = ["DecodeError", "EncodeError", "ErrorCode", "KafkaError", "UnknownKafkaError",
           "error_for_code", "raise_for_code"]

for _code, _name, _java, _retriable in ERRORS:
    if _code == 0:
        continue
    _cls_name = _class_name(_name)
    _cls = type(
        _cls_name,
        (KafkaError,),
        {
            "code": _code,
            "name": _name,
            "retriable": _retriable,
            "java_class": _java,
            "__doc__": f"Kafka error {_code} ({_name}).",
            "__module__": __name__,
        },
    )
    globals()[_cls_name] = _cls
    _BY_CODE[_code] = _cls
    __all__.append(_cls_name)


class UnsupportedVersionError(globals()["UnsupportedVersionError"]):  # type: ignore[misc]
    """A request whose api key or version this side does not implement.

    Carries what the broker needs to answer it as Kafka does: the key, version and the
    correlation id from the header.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
    ):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        super().__init__(message)


_BY_CODE[UnsupportedVersionError.code] = UnsupportedVersionError


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for an error code (``UnknownKafkaError`` for unknown ones)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownKafkaError
    return cls


def make_error(code: int, message: str | None = None) -> KafkaError:
    """An exception instance for ``code``, including codes this project does not know."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownKafkaError(code, message)
    return cls(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for ``code``; do nothing for 0 (no error)."""
    if code:
        _raise(make_error(code, message))


def _raise(err: KafkaError) -> NoReturn:
    raise err
