"""Group APIs on the wire: the versions advertised, Kafka's error answers to bad input, several
members/groups per request, and group state surviving a kill -9."""

from __future__ import annotations

import uuid

import pytest

from reference_broker.testing import BrokerFactory, BrokerProcess
from sdk.protocol.codec import encode
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ApiVersionsRequest,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    ProduceRequest,
    SyncGroupRequest,
)
from sdk.records import RecordBatchBuilder
from tests.reference_broker.wire import WireClient

CONFIG = {"num.partitions": 2, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}
EXPECTED_VERSIONS = {
    8: (2, 9),
    9: (1, 9),
    10: (0, 6),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 6),
    16: (0, 5),
    42: (0, 2),
    47: (0, 0),
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def group_broker() -> BrokerProcess:
    with BrokerProcess(config=CONFIG) as proc:
        yield proc


@pytest.fixture
def wire(group_broker: BrokerProcess) -> WireClient:
    with WireClient(group_broker.bootstrap) as client:
        yield client


def subscription(*topics: str) -> bytes:
    return (0).to_bytes(2, "big") + encode(ConsumerProtocolSubscription(topics=list(topics)), 0)


def assignment(topic: str, *partitions: int) -> bytes:
    value = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(partitions))
        ]
    )
    return (0).to_bytes(2, "big") + encode(value, 0)


def join(
    wire: WireClient,
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    version: int = 5,
    session_ms: int = 6000,
    metadata: bytes = b"",
) -> object:
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
            for n, m in (protocols if protocols is not None else [("range", metadata or subscription("t"))])
        ],
    )
    return wire.request(request, version)


def join_and_sync(
    wire: WireClient, group: str, topic: str, *, instance: str | None = None
) -> tuple[str, int]:
    """A one-member group: joined (v5), given every partition of ``topic``; (member id, generation)."""
    joined = join(wire, group, instance=instance, metadata=subscription(topic))
    if joined.error_code == E.MEMBER_ID_REQUIRED:
        joined = join(wire, group, joined.member_id, instance=instance, metadata=subscription(topic))
    assert joined.error_code == 0, joined
    synced = wire.request(
        SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=joined.member_id, assignment=assignment(topic, 0, 1)
                )
            ],
        ),
        3,
    )
    assert synced.error_code == 0
    return joined.member_id, joined.generation_id


def commit(
    wire: WireClient,
    group: str,
    generation: int,
    member: str,
    topic: str,
    offset: int,
    metadata: str = "",
    version: int = 8,
    instance: str | None = None,
) -> int:
    response = wire.request(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            group_instance_id=instance,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=offset, committed_metadata=metadata
                        )
                    ],
                )
            ],
        ),
        version,
    )
    return response.topics[0].partitions[0].error_code


def create_topic(wire: WireClient, topic: str) -> None:
    wire.request(
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
        ),
        9,
    )


def test_api_versions_advertise_the_group_apis(wire: WireClient) -> None:
    response = wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    advertised = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
    assert {k: advertised.get(k) for k in EXPECTED_VERSIONS} == EXPECTED_VERSIONS


def test_find_coordinator_single_and_batched(wire: WireClient, group_broker: BrokerProcess) -> None:
    port = int(group_broker.bootstrap.rpartition(":")[2])
    for version in (0, 1, 2, 3):
        single = wire.request(FindCoordinatorRequest(key="g", key_type=0), version)
        assert (single.error_code, single.port) == (0, port)
    txn = wire.request(FindCoordinatorRequest(key="tx", key_type=1), 3)
    assert (txn.error_code, txn.port) == (0, port)
    batched = wire.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), 4)
    assert [(c.key, c.error_code, c.port) for c in batched.coordinators] == [("a", 0, port), ("b", 0, port)]
    bad = wire.request(FindCoordinatorRequest(key_type=7, coordinator_keys=["a"]), 5)
    assert bad.coordinators[0].error_code == E.INVALID_REQUEST
    # __consumer_offsets now exists and is internal
    meta = wire.request(MetadataRequest(topics=None), 9)
    internal = {t.name: t.is_internal for t in meta.topics}
    offsets_topic = next(t for t in meta.topics if t.name == "__consumer_offsets")
    assert internal.get("__consumer_offsets") is True and len(offsets_topic.partitions) == 3


def test_bad_joins_get_kafka_errors_and_the_group_keeps_working(
    wire: WireClient, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    group, topic = unique("g"), unique("t")
    create_topic(wire, topic)
    assert join(wire, group, protocols=[], version=5).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(wire, group, "not-a-member").error_code == E.UNKNOWN_MEMBER_ID
    assert join(wire, group, session_ms=10).error_code == E.INVALID_SESSION_TIMEOUT
    assert join(wire, "", version=5).error_code == E.INVALID_GROUP_ID
    member, generation = join_and_sync(wire, group, topic)
    other = join(wire, group, protocols=[("unknown-assignor", b"")], version=3)
    assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    with WireClient(bootstrap) as second:
        # A new member with 2 MiB of metadata: accepted as Kafka does; the group rebalances around it.
        big = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=6000,
            rebalance_timeout_ms=6000,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * (2 << 20))],
        )
        second.send(big, 3)
        beat = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member)
        for _ in range(50):
            if wire.request(beat, 3).error_code == E.REBALANCE_IN_PROGRESS:
                break
        else:
            pytest.fail("the first member was never told to rejoin")
        rejoined = join(wire, group, member, version=3, metadata=subscription(topic))
        _, huge = second.receive(JoinGroupRequest.API_KEY, 3)
        assert rejoined.error_code == huge.error_code == 0
        assert rejoined.generation_id == huge.generation_id == generation + 1
        assert {m.member_id: len(m.metadata) for m in rejoined.members}[huge.member_id] == 2 << 20
        leave = wire.request(
            LeaveGroupRequest(
                group_id=group,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=huge.member_id),
                    LeaveGroupRequest.MemberIdentity(member_id=member),
                    LeaveGroupRequest.MemberIdentity(member_id="ghost"),
                ],
            ),
            3,
        )
        assert [m.error_code for m in leave.members] == [0, 0, E.UNKNOWN_MEMBER_ID]
    member, generation = join_and_sync(wire, group, topic)  # the group forms again
    assert commit(wire, group, generation, member, topic, 5) == 0


def test_member_id_required_from_v4(wire: WireClient) -> None:
    group = unique("g")
    first = join(wire, group, version=4)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    second = join(wire, group, first.member_id, version=4)
    assert second.error_code == 0 and second.member_id == first.member_id and second.leader == first.member_id
    assert join(wire, unique("g"), version=3).error_code == 0  # v3 and older: an id at once


def test_commits_from_stale_generation_or_unknown_member_are_refused(wire: WireClient) -> None:
    group, topic = unique("g"), unique("t")
    create_topic(wire, topic)
    member, generation = join_and_sync(wire, group, topic)
    assert commit(wire, group, generation - 1, member, topic, 1) == E.ILLEGAL_GENERATION
    assert commit(wire, group, generation, "stranger", topic, 1) == E.UNKNOWN_MEMBER_ID
    assert commit(wire, group, -1, "", topic, 1) == E.UNKNOWN_MEMBER_ID  # the group has members
    assert (
        commit(wire, group, generation, member, topic, 1, metadata="m" * 5000) == E.OFFSET_METADATA_TOO_LARGE
    )
    assert commit(wire, group, generation, member, "no-such-topic-x", 1) == E.UNKNOWN_TOPIC_OR_PARTITION
    assert commit(wire, unique("none"), 3, "m", topic, 1, version=8) == E.ILLEGAL_GENERATION
    assert commit(wire, unique("none"), 3, "m", topic, 1, version=9) == E.GROUP_ID_NOT_FOUND
    assert commit(wire, group, generation, member, topic, 42, metadata="kept") == 0
    fetched = wire.request(
        OffsetFetchRequest(
            group_id=group,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])],
        ),
        7,
    )
    parts = fetched.topics[0].partitions
    assert [(p.committed_offset, p.metadata) for p in parts] == [(42, "kept"), (-1, "")]


def test_offset_fetch_several_groups_at_once(wire: WireClient) -> None:
    topic = unique("t")
    create_topic(wire, topic)
    groups = [unique("g") for _ in range(3)]
    for i, group in enumerate(groups[:2]):
        assert commit(wire, group, -1, "", topic, 10 + i) == 0
    response = wire.request(
        OffsetFetchRequest(
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups],
            require_stable=True,
        ),
        8,
    )
    found = {
        g.group_id: [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics]
        for g in response.groups
    }
    assert found == {groups[0]: [(topic, [10])], groups[1]: [(topic, [11])], groups[2]: []}


def test_list_describe_delete_and_offset_delete(wire: WireClient) -> None:
    group, topic, other = unique("g"), unique("t"), unique("t")
    create_topic(wire, topic)
    create_topic(wire, other)
    member, generation = join_and_sync(wire, group, topic)
    assert commit(wire, group, generation, member, topic, 3) == 0
    assert commit(wire, group, generation, member, other, 4) == 0
    listed = wire.request(ListGroupsRequest(states_filter=["stable"]), 4)
    assert (group, "consumer", "Stable") in {
        (g.group_id, g.protocol_type, g.group_state) for g in listed.groups
    }
    described = wire.request(
        DescribeGroupsRequest(groups=[group, "missing-group"], include_authorized_operations=True), 5
    )
    mine, missing = described.groups
    assert (mine.group_state, mine.protocol_data, [m.member_id for m in mine.members]) == (
        "Stable",
        "range",
        [member],
    )
    assert mine.members[0].member_assignment == assignment(topic, 0, 1)
    assert (missing.error_code, missing.group_state) == (0, "Dead")
    assert (
        wire.request(DescribeGroupsRequest(groups=["missing-group"]), 6).groups[0].error_code
        == E.GROUP_ID_NOT_FOUND
    )
    deleted = wire.request(
        OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=n, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
                )
                for n in (topic, other)
            ],
        ),
        0,
    )
    assert [t.partitions[0].error_code for t in deleted.topics] == [E.GROUP_SUBSCRIBED_TO_TOPIC, 0]
    assert (
        wire.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code == E.NON_EMPTY_GROUP
    )
    left = wire.request(LeaveGroupRequest(group_id=group, member_id=member), 1)
    assert left.error_code == 0
    result = wire.request(DeleteGroupsRequest(groups_names=[group, "never-was"]), 2).results
    assert [r.error_code for r in result] == [0, E.GROUP_ID_NOT_FOUND]
    assert group not in {g.group_id for g in wire.request(ListGroupsRequest(), 3).groups}


def test_static_member_and_offsets_survive_kill_9(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(CONFIG)
    group, topic = unique("g"), unique("t")
    with WireClient(broker.bootstrap) as wire:
        create_topic(wire, topic)
        member, generation = join_and_sync(wire, group, topic, instance="instance-1")
        assert (
            commit(wire, group, generation, member, topic, 7, metadata="before-crash", instance="instance-1")
            == 0
        )
    broker.restart(kill=True)
    with WireClient(broker.bootstrap) as wire:
        described = wire.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert described.group_state == "Stable"
        assert [(m.member_id, m.group_instance_id) for m in described.members] == [(member, "instance-1")]
        # The restarted static member rejoins with no member id: same generation, its assignment back.
        rejoined = join(wire, group, instance="instance-1", metadata=subscription(topic))
        assert (
            rejoined.error_code == 0 and rejoined.generation_id == generation and rejoined.member_id != member
        )
        synced = wire.request(
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=rejoined.member_id,
                group_instance_id="instance-1",
            ),
            3,
        )
        assert synced.assignment == assignment(topic, 0, 1)
        old = wire.request(
            HeartbeatRequest(
                group_id=group, generation_id=generation, member_id=member, group_instance_id="instance-1"
            ),
            3,
        )
        assert old.error_code == E.FENCED_INSTANCE_ID
        fetched = wire.request(OffsetFetchRequest(group_id=group, topics=None), 7)
        assert [(t.name, p.committed_offset, p.metadata) for t in fetched.topics for p in t.partitions] == [
            (topic, 7, "before-crash")
        ]


def test_clients_cannot_produce_to_consumer_offsets(wire: WireClient) -> None:
    wire.request(FindCoordinatorRequest(key="any", key_type=0), 3)  # creates __consumer_offsets
    builder = RecordBatchBuilder()
    builder.append(0, b"key", b"forged")
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="__consumer_offsets",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())],
            )
        ],
    )
    response = wire.request(request, 9)
    assert response.responses[0].partition_responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
