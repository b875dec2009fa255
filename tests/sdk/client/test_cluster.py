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
