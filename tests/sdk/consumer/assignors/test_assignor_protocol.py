"""ConsumerProtocolSubscription / ConsumerProtocolAssignment bytes: our round trip in every version,
and the bytes of kafka-python's and aiokafka's encoders (peer implementations) in both directions."""

from __future__ import annotations

import struct

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from sdk.client.cluster import TopicPartition
from sdk.consumer.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from sdk.protocol.errors import DecodeError

topics_st = st.lists(st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=8), max_size=5, unique=True)
partitions_st = st.lists(
    st.builds(TopicPartition, st.sampled_from(["a", "b", "topic-c"]), st.integers(0, 50)),
    max_size=8,
    unique=True,
)
user_data_st = st.one_of(st.none(), st.binary(max_size=20))


def _expected_subscription(sub: Subscription, version: int) -> Subscription:
    """What survives encoding ``sub`` in ``version`` (later fields fall back to their defaults)."""
    return Subscription(
        topics=sorted(sub.topics),
        user_data=sub.user_data,
        owned_partitions=sorted(sub.owned_partitions) if version >= 1 else [],
        generation_id=sub.generation_id if version >= 2 else -1,
        rack_id=sub.rack_id if version >= 3 else None,
    )


@settings(max_examples=60, deadline=None)
@given(
    topics=topics_st,
    user_data=user_data_st,
    owned=partitions_st,
    generation=st.integers(-1, 2**31 - 1),
    rack=st.one_of(st.none(), st.text(min_size=1, max_size=5)),
    version=st.integers(0, 3),
)
def test_subscription_round_trip_every_version(topics, user_data, owned, generation, rack, version):
    sub = Subscription(topics, user_data, owned, generation, rack)
    data = encode_subscription(sub, version)
    assert struct.unpack_from(">h", data)[0] == version
    assert decode_subscription(data) == _expected_subscription(sub, version)


@settings(max_examples=60, deadline=None)
@given(partitions=partitions_st, user_data=user_data_st, version=st.integers(0, 3))
def test_assignment_round_trip_every_version(partitions, user_data, version):
    assignment = Assignment(partitions, user_data)
    decoded = decode_assignment(encode_assignment(assignment, version))
    assert sorted(decoded.partitions) == sorted(partitions)
    assert decoded.user_data == user_data


@settings(max_examples=40, deadline=None)
@given(topics=topics_st, user_data=st.binary(max_size=20), owned=partitions_st,
       generation=st.integers(-1, 1000), version=st.integers(0, 3))
def test_kafka_python_subscription_bytes_decode(topics, user_data, owned, generation, version):
    grouped: dict[str, list[int]] = {}
    for tp in owned:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    peer = KpSubscription(
        version=version, topics=topics, user_data=user_data,
        owned_partitions=[KpSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in grouped.items()],
        generation_id=generation, rack_id="rack-1",
    )
    decoded = decode_subscription(bytes(peer.encode()))
    assert decoded.topics == topics
    assert decoded.user_data == user_data
    assert sorted(decoded.owned_partitions) == (sorted(owned) if version >= 1 else [])
    assert decoded.generation_id == (generation if version >= 2 else -1)
    assert decoded.rack_id == ("rack-1" if version >= 3 else None)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_decodes_our_subscription(version):
    sub = Subscription(["t2", "t1"], b"\x00\x01", [TopicPartition("t1", 3), TopicPartition("t1", 0)], 7, "r")
    peer = KpSubscription.decode(encode_subscription(sub, version))
    assert peer.version == version
    assert peer.topics == ["t1", "t2"]
    assert bytes(peer.user_data) == b"\x00\x01"
    if version >= 1:
        assert [(tp.topic, tp.partitions) for tp in peer.owned_partitions] == [("t1", [0, 3])]
    if version >= 2:
        assert peer.generation_id == 7
    if version >= 3:
        assert peer.rack_id == "r"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_bytes_agree_with_kafka_python(version):
    ours = Assignment([TopicPartition("t", 0), TopicPartition("u", 2), TopicPartition("t", 1)], b"ud")
    peer = KpAssignment.decode(encode_assignment(ours, version))
    assert peer.version == version
    assert [(tp.topic, tp.partitions) for tp in peer.assigned_partitions] == [("t", [0, 1]), ("u", [2])]
    assert bytes(peer.user_data) == b"ud"
    theirs = KpAssignment(
        version=version,
        assigned_partitions=[KpAssignment.TopicPartition(topic="x", partitions=[4, 1])],
        user_data=None,
    )
    decoded = decode_assignment(bytes(theirs.encode()))
    assert decoded == Assignment([TopicPartition("x", 4), TopicPartition("x", 1)], None)
    # Byte-identical to the peer's encoder for the same content.
    same = KpAssignment(
        version=version,
        assigned_partitions=[KpAssignment.TopicPartition(topic="x", partitions=[4, 1])],
        user_data=b"z",
    )
    ours_same = encode_assignment(Assignment([TopicPartition("x", 4), TopicPartition("x", 1)], b"z"), version)
    assert ours_same == bytes(same.encode())


def test_aiokafka_v0_metadata_and_assignment():
    metadata = ConsumerProtocolMemberMetadata(0, ["b", "a"], b"").encode()
    assert decode_subscription(metadata) == Subscription(["b", "a"], b"", [], -1, None)
    assignment = ConsumerProtocolMemberAssignment(0, [("t", [0, 2])], b"").encode()
    assert decode_assignment(assignment) == Assignment([TopicPartition("t", 0), TopicPartition("t", 2)], b"")
    ours = encode_assignment(Assignment([TopicPartition("t", 1)], b""), version=0)
    peer = ConsumerProtocolMemberAssignment.decode(ours)
    assert peer.partitions() == [("t", 1)]
    ours_sub = encode_subscription(Subscription(["x"], b"u"), version=0)
    assert ConsumerProtocolMemberMetadata.decode(ours_sub).subscription == ["x"]


def test_newer_version_with_trailing_fields_is_read_as_the_highest_known():
    sub = Subscription(["t"], b"u", [TopicPartition("t", 1)], 4, "rack")
    v3 = encode_subscription(sub, 3)
    future = struct.pack(">h", 9) + v3[2:] + b"\x00\x00\x00\x05extra"
    assert decode_subscription(future) == sub
    a3 = encode_assignment(Assignment([TopicPartition("t", 0)], None), 3)
    newer = struct.pack(">h", 4) + a3[2:] + b"\xff" * 7
    assert decode_assignment(newer).partitions == [TopicPartition("t", 0)]


def test_trailing_bytes_after_an_older_version_are_ignored():
    v1 = encode_subscription(Subscription(["t"], None, [TopicPartition("t", 1)]), 1)
    assert decode_subscription(v1 + b"junk").owned_partitions == [TopicPartition("t", 1)]


def test_empty_rack_and_negative_generation_mean_absent():
    peer = KpSubscription(
        version=3, topics=["t"], user_data=b"", owned_partitions=[], generation_id=-5, rack_id=""
    )
    decoded = decode_subscription(bytes(peer.encode()))
    assert decoded.rack_id is None and decoded.generation_id == -1


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff\xff" + encode_subscription(Subscription(["t"]), 0)[2:],
        b"\x00\x00\x00\x00\x00\x05ab",
    ],
)
def test_malformed_subscription_raises_decode_error(data):
    with pytest.raises(DecodeError):
        decode_subscription(data)


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00\x00\x00\x01\x00\x05t", b"\x80\x00"])
def test_malformed_assignment_raises_decode_error(data):
    with pytest.raises(DecodeError):
        decode_assignment(data)


@pytest.mark.parametrize("version", [-1, 4])
def test_encoding_an_unknown_version_is_refused(version):
    with pytest.raises(ValueError):
        encode_subscription(Subscription(["t"]), version)
    with pytest.raises(ValueError):
        encode_assignment(Assignment([]), version)
