"""Kafka protocol errors: one exception class per error code, plus the codec's own errors.

The classes are generated (``_generated_errors``, static definitions a type checker sees) so
that a newer Kafka's codes arrive by re-running the generator. Each class carries the code, the
protocol name and whether Kafka's Java client retries it, which is what the producer and
consumer consult when deciding to retry.
"""

from __future__ import annotations

from typing import NoReturn

from sdk.protocol import _generated_errors
from sdk.protocol._error_base import DecodeError, EncodeError, KafkaError, UnknownKafkaError
from sdk.protocol._generated_errors import *  # noqa: F403  (ErrorCode and one class per code)
from sdk.protocol._generated_errors import ERROR_CLASSES
from sdk.protocol._generated_errors import UnsupportedVersionError as _GeneratedUnsupportedVersionError

__all__ = [
    "DecodeError",
    "EncodeError",
    "KafkaError",
    "UnknownKafkaError",
    # The generated class of this name is extended here (not in ``_generated_errors.__all__``).
    "UnsupportedVersionError",
    "error_for_code",
    "make_error",
    "raise_for_code",
]
__all__ += _generated_errors.__all__


class UnsupportedVersionError(_GeneratedUnsupportedVersionError):
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


_BY_CODE: dict[int, type[KafkaError]] = {
    **ERROR_CLASSES,
    UnsupportedVersionError.code: UnsupportedVersionError,
}


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
