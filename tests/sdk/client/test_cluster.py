"""ClusterMetadata from real MetadataResponse objects."""

from __future__ import annotations

from sdk.client.cluster import ClusterMetadata
from sdk.errors import LeaderNotAvailableError, UnknownTopicOrPartitionError
from sdk.protocol import messages

MR = messages.MetadataResponse
Topic = MR.MetadataResponseTopic
Partition = MR.MetadataResponseTopic.MetadataResponsePartition


def _response(*topics):
    return MR(
        brokers=[
            MR.MetadataResponseBroker(node_id=1, host="a", port=1),
            MR.MetadataResponseBroker(node_id=2, host="b", port=2, rack="r2"),
        ],
        cluster_id="c",
        controller_id=1,
        topics=list(topics),
    )


def test_update_builds_lookups():
    cluster = ClusterMetadata()
    cluster.update(
        _response(
            Topic(
                name="t",
                partitions=[
                    Partition(partition_index=1, leader_id=2, replica_nodes=[1, 2]),
                    Partition(partition_index=0, leader_id=1),
                ],
            ),
            Topic(name="new", error_code=5, partitions=[Partition(partition_index=0, leader_id=-1)]),
            Topic(name="gone", error_code=3),
        ),
        {"t", "new", "gone"},
    )
    assert cluster.broker(2).rack == "r2"
    assert cluster.partitions_for("t") == (0, 1)
    assert cluster.available_partitions_for("t") == (0, 1)
    assert cluster.leader_for("t", 1) == 2
    assert cluster.partition("t", 1).replicas == (1, 2)
    assert [tp.partition for tp in cluster.partitions_for_broker(1)] == [0]
    assert cluster.partitions_for("new") == (0,)
    assert cluster.available_partitions_for("new") == ()
    assert isinstance(cluster.topic_error("new"), LeaderNotAvailableError)
    assert cluster.partitions_for("gone") is None
    assert isinstance(cluster.topic_error("gone"), UnknownTopicOrPartitionError)
    assert cluster.version == 1


def test_partial_refresh_keeps_other_topics():
    cluster = ClusterMetadata()
    cluster.update(_response(Topic(name="a", partitions=[Partition(partition_index=0, leader_id=1)])), {"a"})
    cluster.update(_response(Topic(name="b", partitions=[Partition(partition_index=0, leader_id=2)])), {"b"})
    assert set(cluster.topics) == {"a", "b"}
    cluster.update(_response(Topic(name="b", partitions=[Partition(partition_index=0, leader_id=1)])), None)
    assert set(cluster.topics) == {"b"}
    assert cluster.leader_for("b", 0) == 1


def test_incomplete_topics_are_those_a_client_must_ask_for_again():
    cluster = ClusterMetadata()
    cluster.update(
        _response(
            Topic(name="ready", partitions=[Partition(partition_index=0, leader_id=1)]),
            Topic(name="creating", error_code=5),
            Topic(name="absent", error_code=3),
            Topic(name="leaderless", partitions=[Partition(partition_index=0, leader_id=-1)]),
            Topic(name="elsewhere", partitions=[Partition(partition_index=0, leader_id=9)]),
            Topic(name="invalid", error_code=17),
            Topic(name="forbidden", error_code=29),
        ),
        {"ready", "creating", "absent", "leaderless", "elsewhere", "invalid", "forbidden"},
    )
    assert cluster.incomplete_topics == {"creating", "absent", "leaderless", "elsewhere"}
    # A leader the response does not list cannot be connected to: recorded as no leader.
    assert cluster.leader_for("elsewhere", 0) == -1
    assert cluster.available_partitions_for("elsewhere") == ()
    assert cluster.partitions_for("elsewhere") == (0,)
    assert not cluster.topic_error("invalid").retriable
    created = Topic(name="creating", partitions=[Partition(partition_index=0, leader_id=2)])
    cluster.update(_response(created), {"creating"})
    assert cluster.incomplete_topics == frozenset()
    assert cluster.topic_error("creating") is None
