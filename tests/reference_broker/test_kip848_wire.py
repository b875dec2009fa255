"""KIP-848 on the wire against a broker process: ApiVersions offers ConsumerGroupHeartbeat and
ConsumerGroupDescribe only when the consumer protocol is enabled; ListGroups, DescribeGroups and
ConsumerGroupDescribe show a consumer group as Kafka does; a classic JoinGroup cannot enter it; and a
broker killed and restarted keeps the group (its records replayed from __consumer_offsets)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from reference_broker.testing import BrokerFactory
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from tests.reference_broker.wire import WireClient

TOPIC = "orders"


def _apis(bootstrap: str) -> dict[int, tuple[int, int]]:
    client = WireClient(bootstrap)
    try:
        answer = client.request(
            ApiVersionsRequest(client_software_name="wire-test", client_software_version="1"), 3
        )
        return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    finally:
        client.close()


def test_the_consumer_group_apis_are_offered_only_when_the_consumer_protocol_is_enabled(
    broker_factory: BrokerFactory,
) -> None:
    apis = _apis(broker_factory().bootstrap)
    assert (apis[68], apis[69]) == ((0, 1), (0, 1))
    classic_only = _apis(broker_factory({"group.coordinator.rebalance.protocols": "classic"}).bootstrap)
    assert 68 not in classic_only and 69 not in classic_only


def _until(call: Any, done: Any, timeout: float = 20.0) -> Any:
    """Repeat ``call`` until ``done(answer)`` (the group loads in the background after a start)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = call()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def _join(client: WireClient, group: str, member_id: str, epoch: int = 0, owned: Any = ()) -> Any:
    request = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=list(owned),
    )
    return _until(
        lambda: client.request(request, 1), lambda a: a.error_code != E.COORDINATOR_LOAD_IN_PROGRESS
    )


def test_a_consumer_group_is_listed_described_and_kept_across_a_broker_kill(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    group, member_id = f"g-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    client = WireClient(broker.bootstrap)
    try:
        client.request(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=3, replication_factor=1)
                ],
                timeout_ms=10_000,
            ),
            5,
        )
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        joined = _join(client, group, member_id)
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, member_id, 1)
        assert joined.heartbeat_interval_ms == 5000
        assert sorted(p for tp in joined.assignment.topic_partitions for p in tp.partitions) == [0, 1, 2]

        listed = client.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed] == [
            (group, "consumer", "Stable", "consumer")
        ]
        classic = client.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert classic.group_state == "Dead"
        # A classic member may join a consumer group (Kafka's mixed groups): a dynamic one is first
        # given its member id, as in a classic group.
        classic_join = client.request(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            5,
        )
        assert classic_join.error_code == E.MEMBER_ID_REQUIRED
    finally:
        client.close()

    broker.restart(kill=True)
    client = WireClient(broker.bootstrap)
    try:
        described = _until(
            lambda: client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0],
            lambda g: g.error_code != E.COORDINATOR_LOAD_IN_PROGRESS,
        )
        assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", 1)
        [member] = described.members
        assert (member.member_id, member.member_epoch) == (member_id, 1)
        assert [(tp.topic_name, sorted(tp.partitions)) for tp in member.assignment.topic_partitions] == [
            (TOPIC, [0, 1, 2])
        ]
        # The member goes on at its epoch, as if nothing happened.
        owned = [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
            for tp in member.assignment.topic_partitions
        ]
        beat = client.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=member_id, member_epoch=1, topic_partitions=owned
            ),
            1,
        )
        assert (beat.error_code, beat.member_epoch) == (0, 1)
        left = client.request(
            ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=-1), 1
        )
        assert (left.error_code, left.member_epoch) == (0, -1)
        empty = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
        assert (empty.group_state, empty.members) == ("Empty", [])
    finally:
        client.close()


def _answers(bootstrap: str, tag: str) -> list[tuple[str, Any]]:
    """One scripted conversation with a broker: what each request was answered (error code, error
    message and the fields a client acts on), with the group names made broker-independent."""
    group, unknown, topic_name = f"g-{tag}", f"unknown-{tag}", f"{TOPIC}-{tag}"
    client = WireClient(bootstrap)
    answers: list[tuple[str, Any]] = []

    def heartbeat(step: str, version: int = 1, **fields: Any) -> None:
        request: dict[str, Any] = {
            "group_id": group,
            "member_id": "m1",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": [topic_name],
            "topic_partitions": [],
        }
        request.update(fields)
        r = client.request(ConsumerGroupHeartbeatRequest(**request), version)
        sizes = (
            None
            if r.assignment is None
            else sorted(len(tp.partitions) for tp in r.assignment.topic_partitions)
        )
        message = None if r.error_message is None else r.error_message.replace(tag, "*")
        answers.append((step, (r.error_code, message, r.member_epoch, r.heartbeat_interval_ms, sizes)))

    def commit(step: str, version: int, epoch: int, member: str = "m1") -> None:
        partition = OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
        topic = OffsetCommitRequest.OffsetCommitRequestTopic(name=topic_name, partitions=[partition])
        r = client.request(
            OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=epoch, member_id=member, topics=[topic]
            ),
            version,
        )
        answers.append((step, r.topics[0].partitions[0].error_code))

    def fetch(step: str, epoch: int, member: str | None = "m1") -> None:
        wanted = OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, member_id=member, member_epoch=epoch, topics=None
        )
        r = client.request(OffsetFetchRequest(groups=[wanted]), 9).groups[0]
        answers.append(
            (step, (r.error_code, [(t.name, [p.committed_offset for p in t.partitions]) for t in r.topics]))
        )

    try:
        client.request(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name=topic_name, num_partitions=3, replication_factor=1
                    )
                ],
                timeout_ms=10_000,
            ),
            5,
        )
        # Kafka answers CreateTopics before its brokers' metadata has the topic: wait for it.
        wanted = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)])
        _until(
            lambda: client.request(wanted, 12).topics[0],
            lambda t: t.error_code == 0 and len([p for p in t.partitions if p.leader_id >= 0]) == 3,
        )
        # Kafka's group coordinator sees a new topic later still: a probe member joins until it
        # is assigned the topic's partitions, then leaves.
        probe = ConsumerGroupHeartbeatRequest(
            group_id=f"probe-{tag}",
            member_id="probe",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic_name],
            topic_partitions=[],
        )
        _until(
            lambda: client.request(probe, 1),
            lambda r: r.error_code == 0 and r.assignment is not None and bool(r.assignment.topic_partitions),
            timeout=60,
        )
        client.request(
            ConsumerGroupHeartbeatRequest(group_id=f"probe-{tag}", member_id="probe", member_epoch=-1), 1
        )
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group, unknown]), 4)
        not_ready = (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE)
        _until(
            lambda: client.request(ConsumerGroupDescribeRequest(group_ids=[group, unknown]), 0).groups,
            lambda groups: all(g.error_code not in not_ready for g in groups),
            timeout=60,
        )
        heartbeat("unknown group, epoch 3", group_id=unknown, member_epoch=3)
        heartbeat("unknown group, leave", group_id=unknown, member_epoch=-1)
        heartbeat("v1 without member id", member_id="")
        heartbeat("join", member_epoch=0)
        heartbeat(
            "steady",
            member_epoch=1,
            rebalance_timeout_ms=-1,
            subscribed_topic_names=None,
            topic_partitions=None,
        )
        heartbeat(
            "epoch ahead",
            member_epoch=7,
            rebalance_timeout_ms=-1,
            subscribed_topic_names=None,
            topic_partitions=None,
        )
        heartbeat(
            "unknown member",
            member_id="zz",
            member_epoch=1,
            rebalance_timeout_ms=-1,
            subscribed_topic_names=None,
        )
        heartbeat("unknown assignor", member_epoch=1, server_assignor="sticky")
        heartbeat("epoch -3", member_epoch=-3)
        heartbeat("join without rebalance timeout", member_id="m9", rebalance_timeout_ms=-1)
        heartbeat("join owning partitions", member_id="m9", topic_partitions=None)
        commit("commit v9", 9, 1)
        commit("commit v9, epoch ahead", 9, 2)
        commit("commit v9, epoch behind", 9, 0)
        commit("commit v8", 8, 1)
        commit("commit v9, unknown member", 9, 1, "zz")
        commit("commit v9, no member", 9, -1, "")
        fetch("fetch v9", 1)
        fetch("fetch v9, epoch ahead", 2)
        fetch("fetch v9, unknown member", 1, "zz")
        fetch("fetch v9, no member", -1, None)
        listed = client.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups
        answers.append(
            ("list", [(g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == group])
        )
        described = client.request(DescribeGroupsRequest(groups=[group]), 6).groups[0]
        answers.append(
            (
                "describe v6",
                (
                    described.error_code,
                    (described.error_message or "").replace(tag, "*"),
                    described.group_state,
                ),
            )
        )
        deleted = client.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0]
        answers.append(("delete while members", deleted.error_code))
        heartbeat("leave", member_epoch=-1)
        heartbeat("leave again", member_epoch=-1)
        empty = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
        answers.append(("describe empty", (empty.error_code, empty.group_state, len(empty.members))))
        # A dynamic member joining again under its own id, and static members (KIP-345 in KIP-848).
        steady: dict[str, Any] = {
            "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None,
            "topic_partitions": None,
        }
        heartbeat("join with the range assignor", member_id="d1", server_assignor="range")
        heartbeat("rejoin with epoch 0", member_id="d1")
        heartbeat("static join", member_id="s1", instance_id="i1")
        heartbeat("instance id taken", member_id="s2", instance_id="i1")
        heartbeat("instance id, wrong member", member_id="s2", instance_id="i1", member_epoch=3, **steady)
        heartbeat("unknown instance id", member_id="s3", instance_id="i9", member_epoch=3, **steady)
        heartbeat("static temporary leave", member_id="s1", instance_id="i1", member_epoch=-2)
        heartbeat("static replacement", member_id="s2", instance_id="i1")
        heartbeat("static leave", member_id="s2", instance_id="i1", member_epoch=-1)
        final = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]
        answers.append(("described", (final.group_state, final.assignor_name, len(final.members))))
    finally:
        client.close()
    return answers


def test_consumer_group_answers_match_apache_kafka(broker_factory: BrokerFactory, apache_kafka: Any) -> None:
    tag = uuid.uuid4().hex[:8]  # the same names on both brokers
    ours = _answers(broker_factory().bootstrap, tag)
    kafka = _answers(apache_kafka.bootstrap, tag)
    differences = [
        (step, mine, theirs) for (step, mine), (_, theirs) in zip(ours, kafka, strict=True) if mine != theirs
    ]
    assert differences == []
