"""Property-based round trips for every message class at every version it has.

Strategies are derived from each class's ``FIELDS`` rather than written per API, so a field the
codec mishandles (a version range, a nullable marker, a compact length, a tag) shows up for every
message that has one. Each (message, version) pair is its own test id, so a failure names it.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.protocol import codec
from sdk.protocol.codec import decode, decode_at, encode, encode_response_parts
from sdk.protocol.errors import DecodeError
from sdk.protocol.messages import MESSAGE_CLASSES, FieldSpec, Message

# Examples per (message, version): 671 pairs keep CI to a few per pair; PROTOCOL_EXAMPLES=200 for a
# deeper local search.
EXAMPLES = int(os.environ.get("PROTOCOL_EXAMPLES", "6"))
MAX_ITEMS = 2  # array lengths 0-2: enough to cover empty, one and many, and keeps deep messages small
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
ZERO_UUID = uuid.UUID(int=0)


def _versions(cls: type[Message]) -> range:
    return range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)


def _flexible(cls: type[Message], version: int) -> bool:
    return cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM


PAIRS = [(name, v) for name, cls in sorted(MESSAGE_CLASSES.items()) for v in _versions(cls)]


def _scalar(f: FieldSpec) -> st.SearchStrategy[Any]:
    t = f.type
    if t in INT_RANGES:
        return st.integers(*INT_RANGES[t])
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)  # NaN != NaN; its bytes are checked in test_float_nan
    if t == "string":
        return st.text(max_size=8)
    if t in ("bytes", "records"):
        return st.binary(max_size=12)
    if t == "uuid":
        return st.just(ZERO_UUID) | st.uuids()
    raise AssertionError(f"no strategy for field type {t!r}")


def _unknown_tags(cls: type[Message]) -> st.SearchStrategy[dict[int, bytes] | None]:
    """Tags the definition does not know (any version), small and multi-byte varints alike."""
    known = {f.tag for f in cls.FIELDS if f.tag is not None}
    tag = (st.integers(0, 40) | st.integers(0, 2**28)).filter(lambda t: t not in known)
    return st.none() | st.dictionaries(tag, st.binary(max_size=6), min_size=1, max_size=2)


def _build(cls: type[Message], values: dict[str, Any], unknown: dict[int, bytes] | None) -> Message:
    msg = cls(**values)
    msg.unknown_tags = unknown
    return msg


@functools.cache
def message_strategy(cls: type[Message], version: int, flexible: bool) -> st.SearchStrategy[Message]:
    """Messages valid in ``version``: fields absent there keep their defaults, null only where allowed.

    ``flexible`` comes from the top-level message (nested classes do not carry it); flexible
    structs also get unknown tagged fields, which must survive decode and re-encode.
    """
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls.FIELDS:
        if not f.present_in(version):
            continue
        element = message_strategy(f.struct, version, flexible) if f.struct is not None else _scalar(f)
        s = st.lists(element, max_size=MAX_ITEMS) if f.array else element
        if f.nullable_in(version):
            s = st.none() | s
        fields[f.name] = s
    tags = _unknown_tags(cls) if flexible else st.none()
    return st.builds(_build, st.just(cls), st.fixed_dictionaries(fields), tags)


@pytest.mark.parametrize(("name", "version"), PAIRS, ids=[f"{n}-v{v}" for n, v in PAIRS])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_round_trip(name: str, version: int, data: st.DataObject, same: Callable[..., None]) -> None:
    cls = MESSAGE_CLASSES[name]
    msg = data.draw(message_strategy(cls, version, _flexible(cls, version)))
    wire = encode(msg, version)
    back, end = decode_at(cls, memoryview(wire), 0, version)
    assert end == len(wire), "the decoder must consume exactly what the encoder wrote"
    same(msg, back)
    assert encode(back, version) == wire


def _full(cls: type[Message], version: int) -> Message:
    """Defaults everywhere, but one element in every array of structs and every struct set."""
    msg = cls()
    for f in cls.FIELDS:
        if f.struct is not None and f.present_in(version):
            sub = _full(f.struct, version)
            setattr(msg, f.name, [sub] if f.array else sub)
    return msg


def test_defaults_encode_in_every_version(same: Callable[..., None]) -> None:
    """A message built from defaults alone (and default-built nested structs) is always writable.

    Caught: FetchSnapshotResponse's never-nullable ``unaligned_records`` defaulted to ``None``.
    """
    for name, version in PAIRS:
        cls = MESSAGE_CLASSES[name]
        for msg in (cls(), _full(cls, version)):
            wire = encode(msg, version)
            back = decode(cls, wire, version)
            same(msg, back)
            assert encode(back, version) == wire


def _struct_fields(cls: type[Message]) -> Iterator[tuple[type[Message], FieldSpec]]:
    for f in cls.FIELDS:
        if f.struct is not None:
            yield cls, f
            yield from _struct_fields(f.struct)


def test_one_class_per_struct_name() -> None:
    """Structs used by several fields are one class, reachable from the message by name.

    Caught: ``LeaderChangeMessage.Voter`` (used by ``voters`` and ``granting_voters``) and seven
    other shared structs were built once per field, so a value made with ``Parent.Voter``
    compared unequal to the decoded one.
    """
    for top in MESSAGE_CLASSES.values():
        by_name: dict[str, type[Message]] = {}
        for parent, f in _struct_fields(top):
            assert f.struct is not None
            assert by_name.setdefault(f.struct.NAME, f.struct) is f.struct, (top.NAME, f.struct.NAME)
            assert getattr(parent, f.struct.NAME) is f.struct
            assert getattr(top, f.struct.NAME) is f.struct


def test_shared_struct_round_trips_with_the_public_class() -> None:
    lcm = MESSAGE_CLASSES["LeaderChangeMessage"]
    voter = lcm.Voter
    msg = lcm(leader_id=3, voters=[voter(voter_id=1), voter(voter_id=2)], granting_voters=[voter(voter_id=1)])
    assert decode(lcm, encode(msg, 1), 1) == msg
    cgd = MESSAGE_CLASSES["ConsumerGroupDescribeResponse"]
    member = cgd.DescribedGroup.Member
    m = member(member_id="m", assignment=member.Assignment(), target_assignment=member.Assignment())
    group = cgd.DescribedGroup(group_id="g", members=[m])
    back = decode(cgd, encode(cgd(groups=[group]), 0), 0)
    assert back.groups[0].members[0] == m


def test_unknown_tags_are_kept_and_rewritten_in_order() -> None:
    """Tags this side does not know come back raw and are written again, sorted with known ones."""
    fetch = MESSAGE_CLASSES["FetchRequest"]
    msg = fetch(cluster_id="c", replica_state=fetch.ReplicaState(replica_id=1, replica_epoch=2))
    msg.unknown_tags = {7: b"\x01\x02", 2**20: b""}
    topic = fetch.FetchTopic(topic="t", partitions=[fetch.FetchPartition(partition=0)])
    topic.unknown_tags = {0: b"zz"}
    msg.topics = [topic]
    wire = encode(msg, 15)  # replica_state is tagged from v15
    back = decode(fetch, wire, 15)
    assert back.unknown_tags == {7: b"\x01\x02", 2**20: b""}
    assert back.topics[0].unknown_tags == {0: b"zz"}
    assert back.cluster_id == "c" and back.replica_state == msg.replica_state
    assert encode(back, 15) == wire
    # The top-level tag section ends the message: 4 entries, tags 0, 1, 7, 2**20 in that order.
    tail = wire[-28:]
    assert tail[0] == 4
    assert tail[1:5] == b"\x00\x02\x02c"  # tag 0, size 2, compact string "c"
    assert tail[5:7] == b"\x01\x0d"  # tag 1, 13 bytes: int32, int64, empty tag section
    assert tail[20:24] == b"\x07\x02\x01\x02"
    assert tail[24:] == b"\x80\x80\x40\x00"  # tag 2**20 as a 3-byte varint, size 0


def test_default_tagged_fields_are_not_written() -> None:
    fetch = MESSAGE_CLASSES["FetchRequest"]
    plain = encode(fetch(), 12)
    assert plain[-1] == 0  # empty tag section
    assert len(encode(fetch(cluster_id="x"), 12)) == len(plain) + 4  # count stays 1 byte; tag, size, "x"


def test_tagged_struct_at_its_default_is_left_out() -> None:
    """As Kafka does (``!currentLeader.equals(new LeaderIdAndEpoch())``): -1/-1 is not written."""
    produce = MESSAGE_CLASSES["ProduceResponse"]
    part = produce.TopicProduceResponse.PartitionProduceResponse
    leader = part.LeaderIdAndEpoch

    def body(current_leader: Message) -> bytes:
        partitions = [part(current_leader=current_leader)]
        topic = produce.TopicProduceResponse(name="t", partition_responses=partitions)
        return encode(produce(responses=[topic]), 10)

    assert body(leader()) == body(leader(leader_id=-1, leader_epoch=-1))
    assert len(body(leader(leader_id=2, leader_epoch=5))) == len(body(leader())) + 1 + 1 + 9
    back = decode(produce, body(leader(leader_id=2, leader_epoch=5)), 10)
    assert back.responses[0].partition_responses[0].current_leader == leader(leader_id=2, leader_epoch=5)


def test_tags_out_of_order_are_rejected() -> None:
    fetch = MESSAGE_CLASSES["FetchRequest"]
    body = encode(fetch(), 12)[:-1]
    with pytest.raises(DecodeError):
        decode(fetch, body + b"\x02\x05\x00\x03\x00", 12)
    with pytest.raises(DecodeError):
        decode(fetch, body + b"\x02\x05\x00\x05\x00", 12)  # duplicate tag
    ok = decode(fetch, body + b"\x02\x03\x00\x05\x00", 12)
    assert ok.unknown_tags == {3: b"", 5: b""}


def test_records_are_views_into_the_input() -> None:
    produce = MESSAGE_CLASSES["ProduceRequest"]
    msg = produce(
        topic_data=[produce.TopicProduceData(name="t", partition_data=[produce.PartitionProduceData(
            index=0, records=b"batch-bytes")])]
    )
    for version in (3, 9):
        wire = bytearray(encode(msg, version))
        records = decode(produce, wire, version).topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview) and records.obj is wire
        assert bytes(records) == b"batch-bytes"


def test_large_records_are_written_once_and_not_copied_for_writelines() -> None:
    fetch = MESSAGE_CLASSES["FetchResponse"]
    data = memoryview(bytes(range(256)) * 1024)  # 256 KiB: above the copy-avoiding threshold
    part = fetch.PartitionData(partition_index=1, records=data)
    msg = fetch(responses=[fetch.FetchableTopicResponse(topic="t", partitions=[part, part])])
    for version in (4, 12):
        whole = codec.encode_response(msg, version, 9)
        pieces = encode_response_parts(msg, version, 9)
        assert b"".join(pieces) == whole
        assert sum(p is data for p in pieces) == 2
        _, back = codec.decode_response(1, version, whole)
        assert bytes(back.responses[0].partitions[1].records) == data.tobytes()
        assert encode(back, version) == encode(msg, version)
    small = codec.encode_response(fetch(), 4, 9)
    assert encode_response_parts(fetch(), 4, 9) == [small]


def test_float_nan_and_signed_zero() -> None:
    quotas = MESSAGE_CLASSES["DescribeClientQuotasResponse"]
    value = quotas.EntryData.ValueData
    for x in (float("nan"), -0.0, float("inf")):
        msg = quotas(entries=[quotas.EntryData(values=[value(key="k", value=x)])])
        wire = encode(msg, 1)
        got = decode(quotas, wire, 1).entries[0].values[0].value
        assert repr(got) == repr(x)
        assert encode(decode(quotas, wire, 1), 1) == wire


def test_a_null_assignment_in_a_response_reads_as_empty_but_a_null_request_field_is_refused() -> None:
    """librdkafka's mock cluster answers a failed SyncGroup with a null assignment, which Kafka's
    schema does not allow: the client reads it as empty, so the error code beside it reaches the
    group member instead of the connection being dropped. A broker stays strict with requests."""
    import struct

    from sdk.protocol.codec import decode_response
    from sdk.protocol.messages import SyncGroupRequest

    for version in (0, 3, 4, 5):
        flexible = version >= 4
        body = (struct.pack(">i", 0) if version >= 1 else b"") + struct.pack(">h", 27)
        if version >= 5:
            body += b"\x00\x00"  # null protocol type and name (compact)
        body += b"\x00" if flexible else struct.pack(">i", -1)  # the null assignment
        if flexible:
            body += b"\x00"  # no tags
        header = struct.pack(">i", 9) + (b"\x00" if flexible else b"")
        correlation_id, response = decode_response(14, version, header + body)
        assert (correlation_id, response.error_code, response.assignment) == (9, 27, b"")

    member = SyncGroupRequest.SyncGroupRequestAssignment(member_id="m", assignment=b"x")
    request = encode(SyncGroupRequest(group_id="g", generation_id=1, member_id="m", assignments=[member]), 3)
    assert request.endswith(struct.pack(">i", 1) + b"x")
    null_assignment = request[:-5] + struct.pack(">i", -1)
    with pytest.raises(DecodeError, match="not nullable"):
        decode(SyncGroupRequest, null_assignment, 3)
    assert decode(SyncGroupRequest, request, 3).assignments[0].assignment == b"x"
