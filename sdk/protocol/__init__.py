"""The sans-IO Kafka wire protocol: message classes, the codec and the error codes.

Nothing here touches a socket; the SDK's connection layer and the reference broker both build on
it. ``sdk.protocol.messages`` holds the classes, ``sdk.protocol.codec`` turns them into bytes and
back, ``sdk.protocol.errors`` maps error codes to exceptions.
"""

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
