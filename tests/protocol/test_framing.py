"""Request and response framing: header versions, client ids, and what the broker gets for
requests it cannot serve.

The header version is chosen per (api key, version), not per message, so these tests pin the
byte layout of each header version and the KIP-511 exception for ApiVersions responses.
"""

from __future__ import annotations

import struct

import pytest

from sdk.protocol import codec
from sdk.protocol.codec import (
    decode_request,
    decode_request_header,
    decode_response,
    encode,
    encode_request,
    encode_response,
    peek_correlation_id,
    request_class,
    response_class,
    supported_versions,
)
from sdk.protocol.errors import DecodeError, EncodeError, UnsupportedVersionError
from sdk.protocol.messages import MESSAGE_CLASSES, REQUESTS, RESPONSES

MetadataRequest = MESSAGE_CLASSES["MetadataRequest"]
MetadataResponse = MESSAGE_CLASSES["MetadataResponse"]
ApiVersionsRequest = MESSAGE_CLASSES["ApiVersionsRequest"]
ApiVersionsResponse = MESSAGE_CLASSES["ApiVersionsResponse"]
ProduceRequest = MESSAGE_CLASSES["ProduceRequest"]


def _metadata_request() -> object:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")])


@pytest.mark.parametrize("client_id", [None, "", "client-é"])
@pytest.mark.parametrize(("version", "header_version"), [(4, 1), (8, 1), (9, 2), (12, 2)])
def test_request_round_trip(client_id: str | None, version: int, header_version: int) -> None:
    msg = _metadata_request()
    wire = encode_request(msg, version, 1234567, client_id)
    header, body = decode_request(wire)
    assert (header.request_api_key, header.request_api_version) == (3, version)
    assert header.correlation_id == 1234567
    assert header.client_id == client_id
    assert body == msg
    # Layout: key, version, correlation id, then the client id as a classic (never compact)
    # nullable string in both header versions; v2 adds an empty tag section.
    assert wire[:8] == struct.pack(">hhi", 3, version, 1234567)
    raw_id = (client_id or "").encode()
    id_field = b"\xff\xff" if client_id is None else struct.pack(">h", len(raw_id)) + raw_id
    rest = id_field + (b"\x00" if header_version == 2 else b"")
    assert wire[8 : 8 + len(rest)] == rest
    assert wire[8 + len(rest) :] == encode(msg, version)
    parsed, offset = decode_request_header(wire)
    assert offset == 8 + len(rest)
    assert parsed == header


def test_request_header_tags_are_read_and_kept() -> None:
    wire = encode_request(_metadata_request(), 12, 5, "c")
    # Splice an unknown tag into the v2 header's tag section (after "c": 8 + 2 + 1 bytes).
    tagged = wire[:11] + b"\x01\x09\x02hi" + wire[12:]
    header, body = decode_request(tagged)
    assert header.unknown_tags == {9: b"hi"}
    assert body == _metadata_request()


def test_controlled_shutdown_v0_has_no_client_id() -> None:
    req = MESSAGE_CLASSES["ControlledShutdownRequest"](broker_id=7)
    wire = encode_request(req, 0, 9, "ignored")
    assert wire == struct.pack(">hhii", 7, 0, 9, 7)
    header, body = decode_request(wire)
    assert header.client_id == "" and body.broker_id == 7


@pytest.mark.parametrize(("version", "flexible"), [(0, False), (8, False), (9, True), (13, True)])
def test_response_header(version: int, flexible: bool) -> None:
    msg = MetadataResponse(cluster_id="c", controller_id=1, brokers=[MetadataResponse.MetadataResponseBroker(
        node_id=1, host="h", port=9092)])
    wire = encode_response(msg, version, 77)
    assert wire[:4] == struct.pack(">i", 77)
    header_size = 5 if flexible else 4
    if flexible:
        assert wire[4] == 0
    assert wire[header_size:] == encode(msg, version)
    assert peek_correlation_id(wire) == 77
    corr, back = decode_response(3, version, wire)
    assert corr == 77
    assert back.brokers == msg.brokers
    assert encode(back, version) == encode(msg, version)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_header_is_always_v0(version: int) -> None:
    key = ApiVersionsResponse.ApiVersion
    msg = ApiVersionsResponse(api_keys=[key(api_key=0, min_version=3, max_version=13)])
    wire = encode_response(msg, version, 3)
    assert wire[:4] == b"\x00\x00\x00\x03"
    assert wire[4:] == encode(msg, version)  # no tag byte even when the body is flexible
    corr, back = decode_response(18, version, wire)
    assert corr == 3 and back.api_keys == msg.api_keys


def test_api_versions_error_answer_in_v0_is_read_at_any_version() -> None:
    """A broker that does not know the asked version answers in v0 (KIP-511); Kafka's client
    then reads v0. Here a v0 UNSUPPORTED_VERSION answer is decoded as if it were v3."""
    key = ApiVersionsResponse.ApiVersion
    v0 = ApiVersionsResponse(error_code=35, api_keys=[key(api_key=18, min_version=0, max_version=2)])
    wire = encode_response(v0, 0, 11)
    corr, back = decode_response(18, 3, wire)
    assert corr == 11
    assert back.error_code == 35 and back.api_keys == v0.api_keys
    with pytest.raises(DecodeError):  # no error code: nothing to fall back for
        decode_response(18, 3, encode_response(ApiVersionsResponse(api_keys=v0.api_keys), 0, 11))


@pytest.mark.parametrize(
    ("api_key", "api_version"),
    [(1000, 0), (-1, 0), (3, 99), (0, 0), (0, 2), (18, 5), (32767, 32767)],
)
def test_unsupported_requests_carry_key_version_and_correlation_id(api_key: int, api_version: int) -> None:
    wire = struct.pack(">hhi", api_key, api_version, 424242) + b"\x00\x01x" + b"\x00" * 8
    for call in (decode_request, decode_request_header):
        with pytest.raises(UnsupportedVersionError) as info:
            call(wire)
        err = info.value
        assert (err.api_key, err.api_version, err.correlation_id) == (api_key, api_version, 424242)
        assert err.code == 35


def test_unknown_api_key_in_lookups_and_responses() -> None:
    for lookup in (request_class, response_class, supported_versions):
        with pytest.raises(UnsupportedVersionError) as info:
            lookup(1000)
        assert info.value.api_key == 1000
    # Was a KeyError: the response header version looked the key up without a check.
    with pytest.raises(UnsupportedVersionError):
        decode_response(1000, 0, b"\x00\x00\x00\x01")
    with pytest.raises(UnsupportedVersionError):
        decode_response(3, 99, b"\x00\x00\x00\x01")


def test_short_or_truncated_frames() -> None:
    for wire in (b"", b"\x00\x03\x00", b"\x00\x03\x00\x0c\x00\x00\x00"):
        with pytest.raises(DecodeError):
            decode_request(wire)
    full = encode_request(_metadata_request(), 12, 5, "client")
    for cut in range(8, len(full)):
        with pytest.raises(DecodeError):
            decode_request(full[:cut])
    with pytest.raises(DecodeError):
        peek_correlation_id(b"\x00\x01")
    with pytest.raises(DecodeError):
        decode_response(3, 12, b"\x00\x00")


def test_encode_request_and_response_check_the_kind() -> None:
    with pytest.raises(EncodeError):
        encode_request(MetadataResponse(), 1, 1, None)
    with pytest.raises(EncodeError):
        encode_response(_metadata_request(), 1, 1)
    with pytest.raises(UnsupportedVersionError):
        encode_request(_metadata_request(), 14, 1, None)
    with pytest.raises(UnsupportedVersionError):
        encode(ProduceRequest(), 2)


def test_api_key_tables() -> None:
    assert set(REQUESTS) == set(RESPONSES)
    for key, cls in REQUESTS.items():
        assert key == cls.API_KEY and cls.KIND == "request"
        assert key == RESPONSES[key].API_KEY and RESPONSES[key].KIND == "response"
        assert supported_versions(key) == cls.VALID_VERSIONS
        assert RESPONSES[key].VALID_VERSIONS == cls.VALID_VERSIONS
    # Key 74 is ListConfigResources in Kafka 4, not the retired ListClientMetricsResources.
    assert request_class(74).NAME == "ListConfigResourcesRequest"
    assert supported_versions(0) == (3, 13) and supported_versions(1) == (4, 18)
    assert codec.request_header_version(18, 3) == 2 and codec.request_header_version(18, 2) == 1
    assert codec.response_header_version(18, 4) == 0 and codec.response_header_version(3, 9) == 1


def test_every_request_and_response_frames_at_every_version() -> None:
    for key, cls in REQUESTS.items():
        lo, hi = cls.VALID_VERSIONS
        for version in range(lo, hi + 1):
            header, body = decode_request(encode_request(cls(), version, key, "id"))
            assert (header.request_api_key, header.request_api_version) == (key, version)
            assert header.correlation_id == key and body == cls()
            resp = RESPONSES[key]
            assert decode_response(key, version, encode_response(resp(), version, -key)) == (-key, resp())
