"""The sans-IO Kafka wire protocol: message classes, the codec and the error codes.

Nothing here touches a socket; the SDK's connection layer and the reference broker both build on
it. ``sdk.protocol.messages`` holds the classes, ``sdk.protocol.codec`` turns them into bytes and
back, ``sdk.protocol.errors`` maps error codes to exceptions.

Names are resolved lazily (PEP 562): the error modules (``sdk.errors`` builds on
``sdk.protocol.errors``) load without building every message class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._lazy import lazy_attributes

if TYPE_CHECKING:
    from sdk.protocol import messages
    from sdk.protocol.codec import (
        decode,
        decode_request,
        decode_request_header,
        decode_response,
        encode,
        encode_request,
        encode_response,
        request_class,
        response_class,
        supported_versions,
    )
    from sdk.protocol.errors import DecodeError, EncodeError, KafkaError, UnsupportedVersionError

#: Public name -> (module, attribute in it; empty: the module itself).
_LAZY: dict[str, tuple[str, str]] = {
    "messages": ("sdk.protocol.messages", ""),
    **{
        name: ("sdk.protocol.codec", name)
        for name in (
            "decode",
            "decode_request",
            "decode_request_header",
            "decode_response",
            "encode",
            "encode_request",
            "encode_response",
            "request_class",
            "response_class",
            "supported_versions",
        )
    },
    **{
        name: ("sdk.protocol.errors", name)
        for name in (
            "DecodeError",
            "EncodeError",
            "KafkaError",
            "UnsupportedVersionError",
        )
    },
}

__all__ = [
    "DecodeError",
    "EncodeError",
    "KafkaError",
    "UnsupportedVersionError",
    "decode",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode",
    "encode_request",
    "encode_response",
    "messages",
    "request_class",
    "response_class",
    "supported_versions",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
