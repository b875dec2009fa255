"""The broker's metadata publisher: images become local topics and replica transitions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker import internal_records as rec
from reference_broker.cluster.metadata_publisher import BrokerMetadataPublisher, partition_view
from reference_broker.config import BrokerConfig
from reference_broker.metadata.loader import MetadataLoader
from reference_broker.storage import Storage
from sdk.protocol.errors import ErrorCode

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID(int=42)


class RecordingReplicas:
    """Records the transitions asked of the replica manager."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.addresses: dict[int, tuple[str, int]] = {}
        self.channels = self

    def update(self, node_id: int, host: str, port: int) -> None:
        self.addresses[node_id] = (host, port)

    def become_leader(
        self, tp: Any, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]
    ) -> None:
        self.calls.append(("leader", tp, leader_epoch))

    def become_follower(
        self, tp: Any, leader: int, leader_epoch: int, partition_epoch: int, replicas: list[int]
    ) -> None:
        self.calls.append(("follower", tp, leader, leader_epoch))

    def stop_replica(self, tp: Any, delete: bool) -> None:
        self.calls.append(("stop", tp, delete))


def register(broker_id: int, epoch: int) -> Any:
    endpoint = rec.RegisterBrokerRecord.BrokerEndpoint(
        name="PLAINTEXT", host=f"127.0.0.{broker_id}", port=9092
    )
    return rec.RegisterBrokerRecord(
        broker_id=broker_id, broker_epoch=epoch, end_points=[endpoint], fenced=False
    )


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    opened = Storage.open(BrokerConfig.build(tmp_path))
    yield opened
    opened.close()


def test_images_drive_local_topics_and_replica_transitions(storage: Storage) -> None:
    replicas = RecordingReplicas()
    publisher = BrokerMetadataPublisher(
        1, storage=storage, replica_manager=replicas, inter_broker_listener="PLAINTEXT"
    )
    loader = MetadataLoader()
    loader.install(publisher)
    batch: list[Any] = [
        register(1, 0),
        register(2, 1),
        register(3, 2),
        rec.TopicRecord(name="t", topic_id=TOPIC_ID),
    ]
    batch += [
        rec.PartitionRecord(
            partition_id=0, topic_id=TOPIC_ID, replicas=[1, 2], isr=[1, 2], leader=1, leader_epoch=0
        ),
        rec.PartitionRecord(
            partition_id=1, topic_id=TOPIC_ID, replicas=[2, 1], isr=[2, 1], leader=2, leader_epoch=0
        ),
        rec.PartitionRecord(
            partition_id=2, topic_id=TOPIC_ID, replicas=[2, 3], isr=[2, 3], leader=2, leader_epoch=0
        ),
    ]
    loader.replay(batch, last_offset=7, epoch=1)
    local = storage.topic("t")
    assert local is not None and local.topic_id == TOPIC_ID and local.num_partitions == 3
    assert replicas.addresses == {2: ("127.0.0.2", 9092), 3: ("127.0.0.3", 9092)}
    assert replicas.calls == [("leader", ("t", 0), 0), ("follower", ("t", 1), 2, 0)]
    replicas.calls.clear()

    # broker 2 fenced: partition 1 moves to us, partition 0 loses a follower
    loader.replay(
        [
            rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=1, leader=1, isr=[1]),
            rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, isr=[1]),
            rec.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, fenced=1),
        ],
        last_offset=10,
        epoch=1,
    )
    assert replicas.calls == [("leader", ("t", 0), 0), ("leader", ("t", 1), 1)]
    view = partition_view(loader.image, loader.image.topics_by_id[TOPIC_ID], "PLAINTEXT")
    assert view[2]["offline_replicas"] == [2] and view[1]["isr_nodes"] == [1]
    replicas.calls.clear()

    loader.replay(
        [rec.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1234")],
        last_offset=10,
        epoch=1,
    )
    assert storage.topic_overrides("t") == {"retention.ms": "1234"}

    # reassigned away from us, then the topic deleted
    loader.replay(
        [rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, replicas=[3], isr=[3], leader=3)],
        last_offset=11,
        epoch=1,
    )
    assert replicas.calls == [("stop", ("t", 0), True)]
    replicas.calls.clear()
    loader.replay([rec.RemoveTopicRecord(topic_id=TOPIC_ID)], last_offset=12, epoch=1)
    assert storage.topic("t") is None
    assert ("stop", ("t", 1), True) in replicas.calls


def test_a_partition_without_a_leader_is_leader_not_available(storage: Storage) -> None:
    loader = MetadataLoader()
    loader.replay(
        [
            register(1, 0),
            rec.TopicRecord(name="t", topic_id=TOPIC_ID),
            rec.PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=[1], isr=[1], leader=-1),
        ],
        last_offset=2,
        epoch=1,
    )
    entry = partition_view(loader.image, loader.image.topics_by_id[TOPIC_ID], "PLAINTEXT")[0]
    assert (entry["error_code"], entry["leader_id"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
