"""kafka-python as an independent peer: our bytes must be the bytes it writes, and what it writes
must decode to what it was given.

Two of its encoders serve as oracles. ``kafka.protocol.old`` is hand-written per version (the
non-flexible versions only), so agreeing with it checks our reading of the definitions, not just
our codec. ``kafka.protocol.{metadata,producer,consumer,admin}`` is a second codec built from
Kafka's JSON, covering flexible versions, tagged fields and every API it ships; for those the test
converts one of our random messages into its classes field by field and compares whole frames
(size prefix and header included).
"""

from __future__ import annotations

import importlib
import random
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sdk.protocol.codec import (
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request,
    encode_response,
)
from sdk.protocol.messages import MESSAGE_CLASSES, Message

kafka = pytest.importorskip("kafka", minversion="3.0")
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.old import end_txn as old_end_txn  # noqa: E402
from kafka.protocol.old import fetch as old_fetch  # noqa: E402
from kafka.protocol.old import group as old_group  # noqa: E402
from kafka.protocol.old import init_producer_id as old_init_producer_id  # noqa: E402
from kafka.protocol.old import metadata as old_metadata  # noqa: E402
from kafka.protocol.old import produce as old_produce  # noqa: E402
from kafka.protocol.schemas.fields.codecs import BitField  # noqa: E402

for _module in ("metadata", "producer", "consumer", "admin"):
    importlib.import_module(f"kafka.protocol.{_module}")

CLIENT_ID = "oracle-é"
SEEDS = (1, 2, 3)


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# kafka-python's message classes by name (the unversioned ones; ``Cls[v]`` are its wrappers).
PEER: dict[str, Any] = {c.name: c for c in _subclasses(ApiMessage) if c._class_version is None}
FOCUS = ["Metadata", "Produce", "Fetch", "JoinGroup", "InitProducerId", "EndTxn"]


def _common_versions(name: str) -> list[int]:
    lo, hi = MESSAGE_CLASSES[name].VALID_VERSIONS
    peer_lo, peer_hi = PEER[name]._valid_versions
    return list(range(max(lo, peer_lo), min(hi, peer_hi) + 1))


def to_peer(msg: Message, peer_cls: Any, version: int) -> Any:
    """The same content as a kafka-python object, field by field.

    kafka-python turns the int32 ``*_authorized_operations`` fields into sets of bit positions
    (and renames two of them in Metadata); everything else maps one to one, except tagged fields
    at their default (below).
    """
    values: dict[str, Any] = {}
    for f in msg.FIELDS:
        if not f.present_in(version):
            continue
        value = getattr(msg, f.name)
        if f.tagged_in(version) and f.is_default(value):
            # Kafka (and we) leave a tagged field out when it holds its default; kafka-python
            # writes every tagged field it was handed, so hand it only the ones Kafka writes.
            continue
        if f.struct is not None and value is not None:
            sub = getattr(peer_cls, f.struct.NAME)
            value = [to_peer(x, sub, version) for x in value] if f.array else to_peer(value, sub, version)
        name = f.name
        if name not in peer_cls._struct.fields and name.endswith("authorized_operations"):
            name = "authorized_operations"
        if getattr(peer_cls._struct.fields[name], "_type", None) is BitField:
            value = {bit for bit in range(32) if (value & 0xFFFFFFFF) >> bit & 1}
        values[name] = value
    return peer_cls(**values)


def _peer_frame(peer: Any, version: int, correlation_id: int) -> bytes:
    peer._header = None  # its version setter trips over a decoded response's header
    peer.API_VERSION = version
    if peer.is_request():
        peer.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
    else:
        peer.with_header(correlation_id=correlation_id)
    return bytes(peer.encode(header=True, framed=True))


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


FOCUS_PAIRS = [
    (name, v)
    for api in FOCUS
    for name in (f"{api}Request", f"{api}Response")
    for v in _common_versions(name)
]


@pytest.mark.parametrize(("name", "version"), FOCUS_PAIRS, ids=[f"{n}-v{v}" for n, v in FOCUS_PAIRS])
def test_focus_frames_match_kafka_python(
    name: str, version: int, make_message: Callable[..., Message], same: Callable[..., None]
) -> None:
    """Full frames, both directions, for the APIs a producer and consumer live on."""
    cls, peer_cls = MESSAGE_CLASSES[name], PEER[name]
    for seed in SEEDS:
        msg = make_message(cls, version, random.Random(f"{name}/{version}/{seed}"))
        theirs = _peer_frame(to_peer(msg, peer_cls, version), version, 1000 + seed)
        if cls.KIND == "request":
            ours = encode_request(msg, version, 1000 + seed, CLIENT_ID)
            assert _framed(ours) == theirs
            header, body = decode_request(theirs[4:])
            assert header.client_id == CLIENT_ID and header.correlation_id == 1000 + seed
        else:
            ours = encode_response(msg, version, 1000 + seed)
            assert _framed(ours) == theirs
            correlation_id, body = decode_response(cls.API_KEY, version, theirs[4:])
            assert correlation_id == 1000 + seed
        same(msg, body)
        # And kafka-python reads our bytes back to the same frame.
        parsed = peer_cls.decode(ours, version=version, header=True)
        assert _peer_frame(parsed, version, 1000 + seed) == theirs


@pytest.mark.parametrize("name", sorted(PEER))
def test_every_api_matches_kafka_python(name: str, make_message: Callable[..., Message]) -> None:
    """Every message kafka-python ships, at every version both sides have, one seed each."""
    cls, peer_cls = MESSAGE_CLASSES[name], PEER[name]
    assert peer_cls.API_KEY == cls.API_KEY
    versions = _common_versions(name)
    assert versions, f"no version in common for {name}"
    for version in versions:
        msg = make_message(cls, version, random.Random(f"{name}/{version}"))
        theirs = _peer_frame(to_peer(msg, peer_cls, version), version, 7)
        if cls.KIND == "request":
            assert _framed(encode_request(msg, version, 7, CLIENT_ID)) == theirs, f"v{version}"
        else:
            assert _framed(encode_response(msg, version, 7)) == theirs, f"v{version}"


@pytest.mark.parametrize("name", ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"])
def test_consumer_protocol_data_matches_kafka_python(name: str, make_message: Callable[..., Message]) -> None:
    """The group protocol blobs a consumer puts in JoinGroup/SyncGroup (body only, no version)."""
    cls = MESSAGE_CLASSES[name]
    peer_cls = getattr(importlib.import_module("kafka.protocol.consumer.metadata"), name)
    for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
        for seed in SEEDS:
            msg = make_message(cls, version, random.Random(f"{name}/{version}/{seed}"))
            ours = encode(msg, version)
            assert bytes(to_peer(msg, peer_cls, version).encode(version=version, header=False)) == ours
            assert decode(cls, ours, version) == msg


def test_api_versions_response_keeps_header_v0_like_kafka_python() -> None:
    cls = MESSAGE_CLASSES["ApiVersionsResponse"]
    msg = cls(api_keys=[cls.ApiVersion(api_key=3, min_version=0, max_version=13)], throttle_time_ms=5)
    for version in (0, 3, 4):
        theirs = _peer_frame(to_peer(msg, PEER["ApiVersionsResponse"], version), version, 42)
        assert _framed(encode_response(msg, version, 42)) == theirs


# --- the hand-written, pre-flexible encoders in kafka.protocol.old -------------------------------

Meta = MESSAGE_CLASSES["MetadataRequest"]
Produce = MESSAGE_CLASSES["ProduceRequest"]
Fetch = MESSAGE_CLASSES["FetchRequest"]
Join = MESSAGE_CLASSES["JoinGroupRequest"]
InitPid = MESSAGE_CLASSES["InitProducerIdRequest"]
EndTxn = MESSAGE_CLASSES["EndTxnRequest"]
RECORDS = bytes(range(61)) + "value-é".encode()


def _metadata(version: int) -> tuple[Message, Any]:
    topics = ["orders", "pay-é"]
    ours = Meta(
        topics=[Meta.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    args: dict[str, Any] = {"topics": topics}
    if version >= 4:
        args["allow_auto_topic_creation"] = False
    if version >= 8:
        args["include_cluster_authorized_operations"] = True
        args["include_topic_authorized_operations"] = True
    return ours, old_metadata.MetadataRequest[version](**args)


def _produce(version: int) -> tuple[Message, Any]:
    ours = Produce(
        transactional_id="txn-1",
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            Produce.TopicProduceData(name="orders", partition_data=[
                Produce.PartitionProduceData(index=0, records=RECORDS),
                Produce.PartitionProduceData(index=7, records=None),
            ]),
        ],
    )
    old = old_produce.ProduceRequest[version](
        transactional_id="txn-1", acks=-1, timeout_ms=30000,
        topic_data=[("orders", [(0, RECORDS), (7, None)])],
    )
    return ours, old


def _fetch(version: int) -> tuple[Message, Any]:
    part = Fetch.FetchPartition(
        partition=2,
        current_leader_epoch=5,
        fetch_offset=1 << 40,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    ours = Fetch(
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1, rack_id="rack-a",
        topics=[Fetch.FetchTopic(topic="orders", partitions=[part])],
        forgotten_topics_data=[Fetch.ForgottenTopic(topic="old", partitions=[1, 2, 3])],
    )
    if version >= 9:
        partition: tuple[Any, ...] = (2, 5, 1 << 40, -1, 1 << 20)
    elif version >= 5:
        partition = (2, 1 << 40, -1, 1 << 20)
    else:
        partition = (2, 1 << 40, 1 << 20)
    values: list[Any] = [-1, 500, 1, 52428800, 1]
    if version >= 7:
        values += [0, -1]
    values.append([("orders", [partition])])
    if version >= 7:
        values.append([("old", [1, 2, 3])])
    if version >= 11:
        values.append("rack-a")
    return ours, old_fetch.FetchRequest[version](*values)


def _join_group(version: int) -> tuple[Message, Any]:
    protocols = [("range", b"\x00\x01meta"), ("roundrobin", b"")]
    ours = Join(
        group_id="group-é", session_timeout_ms=45000, rebalance_timeout_ms=300000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[Join.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
    )
    values: list[Any] = ["group-é", 45000]
    if version >= 1:
        values.append(300000)
    values.append("")
    if version >= 5:
        values.append(None)
    values += ["consumer", protocols]
    return ours, old_group.JoinGroupRequest[version](*values)


def _init_producer_id(version: int) -> tuple[Message, Any]:
    ours = InitPid(transactional_id=None, transaction_timeout_ms=60000)
    return ours, old_init_producer_id.InitProducerIdRequest[version](None, 60000)


def _end_txn(version: int) -> tuple[Message, Any]:
    ours = EndTxn(transactional_id="txn-1", producer_id=(1 << 40) + 3, producer_epoch=7, committed=True)
    return ours, old_end_txn.EndTxnRequest[version]("txn-1", (1 << 40) + 3, 7, True)


OLD_CASES: list[tuple[str, Callable[[int], tuple[Message, Any]], int]] = [
    *(("Metadata", _metadata, v) for v in range(0, 9)),
    *(("Produce", _produce, v) for v in range(3, 9)),
    *(("Fetch", _fetch, v) for v in range(4, 12)),
    *(("JoinGroup", _join_group, v) for v in range(0, 6)),
    *(("InitProducerId", _init_producer_id, v) for v in range(0, 2)),
    *(("EndTxn", _end_txn, v) for v in range(0, 3)),
]


@pytest.mark.parametrize(("api", "build", "version"), OLD_CASES, ids=[f"{a}-v{v}" for a, _, v in OLD_CASES])
def test_matches_hand_written_kafka_python(
    api: str, build: Callable[[int], tuple[Message, Any]], version: int
) -> None:
    ours, old = build(version)
    assert version == old.API_VERSION
    assert encode(ours, version) == old.encode()
    old.with_header(correlation_id=99, client_id="legacy")
    frame = encode_request(ours, version, 99, "legacy")
    assert _framed(frame) == old.encode(header=True, framed=True)
    _, body = decode_request(frame)
    assert encode(body, version) == old.encode()


def test_hand_written_responses_decode() -> None:
    """Responses written by the hand-written classes decode with ours to the same values."""
    md = old_metadata.MetadataResponse[1](
        brokers=[(1, "broker-1", 9092, "rack")], controller_id=1,
        topics=[(0, "orders", False, [(0, 0, 1, [1, 2], [1])])],
    )
    md.with_header(correlation_id=5)
    correlation_id, body = decode_response(3, 1, md.encode(header=True))
    assert correlation_id == 5
    assert [(b.node_id, b.host, b.port, b.rack) for b in body.brokers] == [(1, "broker-1", 9092, "rack")]
    topic = body.topics[0]
    assert (topic.name, topic.is_internal, topic.partitions[0].replica_nodes) == ("orders", False, [1, 2])
    pid = old_init_producer_id.InitProducerIdResponse[1](throttle_time_ms=3, error_code=0,
                                                         producer_id=123456789, producer_epoch=2)
    pid.with_header(correlation_id=6)
    _, body = decode_response(22, 1, pid.encode(header=True))
    assert (body.throttle_time_ms, body.producer_id, body.producer_epoch) == (3, 123456789, 2)


def test_uuid_fields_match_kafka_python() -> None:
    """Metadata v12 addresses topics by id: 16 raw bytes, all-zero for "by name"."""
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    msg = Meta(topics=[Meta.MetadataRequestTopic(topic_id=topic_id, name=None),
                       Meta.MetadataRequestTopic(name="by-name")])
    theirs = _peer_frame(to_peer(msg, PEER["MetadataRequest"], 12), 12, 1)
    ours = encode_request(msg, 12, 1, CLIENT_ID)
    assert _framed(ours) == theirs
    assert topic_id.bytes in ours and bytes(16) in ours
