"""Primitive wire types and the encoder's refusals.

Pinned byte layouts for the types every message is made of, plus the limits Kafka sets (classic
strings are at most 32767 bytes, varints at most 5 bytes) and the values an encoder must refuse
rather than write as something else.
"""

from __future__ import annotations

import array
import uuid

import pytest

from sdk.protocol import primitives as p
from sdk.protocol.codec import decode, encode
from sdk.protocol.errors import DecodeError, EncodeError
from sdk.protocol.messages import MESSAGE_CLASSES

Meta = MESSAGE_CLASSES["MetadataRequest"]
Produce = MESSAGE_CLASSES["ProduceRequest"]
EndTxn = MESSAGE_CLASSES["EndTxnRequest"]


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (2**31 - 1, b"\xff\xff\xff\xff\x07"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint(value: int, wire: bytes) -> None:
    out = bytearray()
    p.write_uvarint(out, value)
    assert bytes(out) == wire
    assert p.read_uvarint(memoryview(wire + b"\x99"), 0, len(wire)) == (value, len(wire))


def test_unsigned_varint_limits() -> None:
    with pytest.raises(DecodeError):
        p.read_uvarint(memoryview(b"\x80\x80\x80\x80\x80\x01"), 0, 6)  # six bytes
    with pytest.raises(DecodeError):
        p.read_uvarint(memoryview(b"\x80\x80"), 0, 2)  # continuation bit on the last byte
    with pytest.raises(EncodeError):
        p.write_uvarint(bytearray(), -1)


def test_classic_and_compact_strings() -> None:
    msg = Meta(topics=[Meta.MetadataRequestTopic(name="é")])
    assert encode(msg, 1) == b"\x00\x00\x00\x01\x00\x02\xc3\xa9"  # int32 count, int16 byte length
    # Compact: varint count+1 and length+1, a tag section per struct; then the three booleans
    # (allow_auto_topic_creation defaults to true) and the message's own tag section.
    assert encode(msg, 9) == b"\x02\x03\xc3\xa9\x00" + b"\x01\x00\x00" + b"\x00"
    assert encode(Meta(topics=None), 1) == b"\xff\xff\xff\xff"
    assert encode(Meta(topics=None), 9) == b"\x00\x01\x00\x00\x00"


def test_classic_string_length_limit() -> None:
    longest = Meta(topics=[Meta.MetadataRequestTopic(name="x" * 32767)])
    assert decode(Meta, encode(longest, 4), 4) == longest
    too_long = Meta(topics=[Meta.MetadataRequestTopic(name="é" * 16384)])  # 32768 bytes
    with pytest.raises(EncodeError):
        encode(too_long, 4)
    assert decode(Meta, encode(too_long, 9), 9) == too_long  # compact strings have no such limit


def test_encoder_refuses_values_it_cannot_write() -> None:
    with pytest.raises(EncodeError):
        encode(EndTxn(transactional_id=None), 0)  # not nullable
    with pytest.raises(EncodeError):
        encode(EndTxn(producer_epoch=40000), 0)  # int16 overflow
    with pytest.raises(EncodeError):
        encode(EndTxn(producer_id="7"), 0)  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        encode(Produce(topic_data=None), 3)  # non-nullable array
    with pytest.raises(EncodeError):
        encode(Produce(topic_data=[Produce.TopicProduceData(name=None)]), 3)


def test_decoder_refuses_nulls_where_not_nullable_and_bad_utf8() -> None:
    with pytest.raises(DecodeError, match="null string"):
        decode(EndTxn, b"\xff\xff" + bytes(11), 0)
    with pytest.raises(DecodeError, match="UTF-8"):
        decode(EndTxn, b"\x00\x02\xc3\x28" + bytes(11), 0)
    with pytest.raises(DecodeError, match="negative"):
        decode(Produce, b"\xff\xff\x00\x01\x00\x00\x00\x01\xff\xff\xff\xfe", 3)


def test_bool_reads_any_nonzero_byte_as_true() -> None:
    wire = encode(EndTxn(transactional_id="t", committed=False), 0)
    assert decode(EndTxn, wire[:-1] + b"\x02", 0).committed is True
    assert decode(EndTxn, wire, 0).committed is False


def test_uuid_zero_and_random() -> None:
    topic_id = uuid.uuid4()
    msg = Meta(topics=[Meta.MetadataRequestTopic(topic_id=topic_id, name=None), Meta.MetadataRequestTopic()])
    back = decode(Meta, encode(msg, 12), 12)
    assert back.topics[0].topic_id == topic_id
    assert back.topics[1].topic_id == uuid.UUID(int=0)


def test_decode_accepts_any_byte_buffer() -> None:
    """Views of another item format are read as bytes.

    Caught: an ``array('h')`` was indexed in 2-byte items, so lengths and varints were misread.
    """
    msg = Meta(topics=[Meta.MetadataRequestTopic(name="x" * 200)])
    wire = encode(msg, 9)
    assert len(wire) % 2 == 0
    shorts = array.array("h")
    shorts.frombytes(wire)
    for buf in (wire, bytearray(wire), memoryview(wire), array.array("b", wire), shorts, memoryview(shorts)):
        assert decode(Meta, buf, 9) == msg


def test_output_buffer_joins_large_values_once() -> None:
    big = memoryview(b"R" * p.LARGE_VALUE)
    out = p.OutputBuffer()
    out += b"head"
    p.write_bytes(out, big, nullable=False, compact=False)
    out += b"mid"
    p.write_bytes(out, big, nullable=False, compact=True)
    p.write_bytes(out, b"small", nullable=False, compact=False)
    parts = out.parts()
    assert parts[1] is big and parts[3] is big
    expected = (
        b"head" + len(big).to_bytes(4, "big") + bytes(big) + b"mid" + b"\x81\x80\x02" + bytes(big)
        + b"\x00\x00\x00\x05small"
    )
    assert out.getvalue() == expected == b"".join(parts)
    plain = bytearray()
    p.write_bytes(plain, big, nullable=False, compact=False)
    assert bytes(plain) == len(big).to_bytes(4, "big") + bytes(big)
    assert p.OutputBuffer(b"abc").parts() == [b"abc"]
