"""Replaying Kafka's metadata records into images, as Kafka's MetadataDelta does."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from reference_broker import internal_records as rec
from reference_broker.metadata.delta import MetadataDelta, MetadataReplayError
from reference_broker.metadata.image import CONFIG_TOPIC, RECOVERING, MetadataImage
from reference_broker.metadata.loader import MetadataLoader

pytestmark = pytest.mark.unit

TOPIC_ID = uuid.UUID(int=7)


def register(
    broker_id: int, epoch: int, *, fenced: bool = True, rack: str | None = None
) -> rec.RegisterBrokerRecord:
    return rec.RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=uuid.UUID(int=100 + broker_id),
        end_points=[
            rec.RegisterBrokerRecord.BrokerEndpoint(
                name="PLAINTEXT", host=f"127.0.0.{broker_id}", port=9092, security_protocol=0
            )
        ],
        rack=rack,
        fenced=fenced,
    )


def replay(image: MetadataImage, *records: object) -> tuple[MetadataDelta, MetadataImage]:
    delta = MetadataDelta(image)
    for r in records:
        delta.replay(r)
    return delta, delta.apply()


def topic_image() -> MetadataImage:
    _, image = replay(
        MetadataImage(),
        register(1, 10, fenced=False),
        register(2, 11, fenced=False),
        register(3, 12, fenced=False),
        rec.TopicRecord(name="t", topic_id=TOPIC_ID),
        rec.PartitionRecord(
            partition_id=0,
            topic_id=TOPIC_ID,
            replicas=[1, 2, 3],
            isr=[1, 2, 3],
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        ),
    )
    return image


def test_partition_change_with_defaults_changes_only_the_partition_epoch() -> None:
    image = topic_image()
    delta, after = replay(image, rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0))
    part = after.partition("t", 0)
    assert part is not None
    assert (part.leader, part.leader_epoch, part.partition_epoch, part.isr) == (1, 0, 1, (1, 2, 3))
    assert delta.changed_partitions == {TOPIC_ID: {0}}
    # the previous image is untouched
    assert image.partition("t", 0).partition_epoch == 0  # type: ignore[union-attr]


def test_leader_change_bumps_the_leader_epoch_and_isr_replaces() -> None:
    _, after = replay(
        topic_image(), rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, leader=2, isr=[2, 3])
    )
    part = after.partition("t", 0)
    assert part is not None
    assert (part.leader, part.leader_epoch, part.partition_epoch, part.isr) == (2, 1, 1, (2, 3))
    # a leader of -1 (no leader) is a change too
    _, after = replay(
        after,
        rec.PartitionChangeRecord(
            topic_id=TOPIC_ID,
            partition_id=0,
            leader=-1,
            leader_recovery_state=RECOVERING,
            eligible_leader_replicas=[3],
        ),
    )
    part = after.partition("t", 0)
    assert part is not None
    assert (part.leader, part.leader_epoch, part.leader_recovery_state, part.elr) == (-1, 2, RECOVERING, (3,))


def test_reassignment_fields_replace_only_when_present() -> None:
    _, after = replay(
        topic_image(),
        rec.PartitionChangeRecord(
            topic_id=TOPIC_ID,
            partition_id=0,
            replicas=[1, 2, 3, 4],
            adding_replicas=[4],
            removing_replicas=[3],
        ),
    )
    part = after.partition("t", 0)
    assert part is not None and part.is_reassigning
    _, after = replay(
        after,
        rec.PartitionChangeRecord(
            topic_id=TOPIC_ID,
            partition_id=0,
            replicas=[1, 2, 4],
            adding_replicas=[],
            removing_replicas=[],
            isr=[1, 2, 4],
        ),
    )
    part = after.partition("t", 0)
    assert part is not None
    assert (part.replicas, part.isr, part.is_reassigning, part.partition_epoch) == (
        (1, 2, 4),
        (1, 2, 4),
        False,
        2,
    )


def test_broker_fencing_records_check_the_broker_epoch() -> None:
    image = topic_image()
    _, after = replay(image, rec.FenceBrokerRecord(id=2, epoch=11))
    assert after.brokers[2].fenced and not after.is_active(2)
    _, after = replay(after, rec.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=11, fenced=-1))
    assert not after.brokers[2].fenced
    _, after = replay(
        after, rec.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=11, in_controlled_shutdown=1)
    )
    assert after.brokers[2].in_controlled_shutdown and not after.is_active(2)
    with pytest.raises(MetadataReplayError):
        replay(after, rec.FenceBrokerRecord(id=2, epoch=99))
    delta, after = replay(after, rec.UnregisterBrokerRecord(broker_id=2, broker_epoch=11))
    assert 2 not in after.brokers and delta.changed_brokers == {2}


def test_remove_topic_drops_partitions_name_and_configs() -> None:
    _, image = replay(
        topic_image(),
        rec.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name="t", name="retention.ms", value="5"),
    )
    assert image.topic_config("t") == {"retention.ms": "5"}
    delta, after = replay(image, rec.RemoveTopicRecord(topic_id=TOPIC_ID))
    assert after.topic("t") is None and after.topic_config("t") == {}
    assert delta.deleted_topics == {TOPIC_ID: "t"}
    with pytest.raises(MetadataReplayError):
        replay(after, rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0))


def test_configs_features_producer_ids_and_quotas() -> None:
    _, image = replay(
        MetadataImage(),
        rec.ConfigRecord(resource_type=4, resource_name="", name="a", value="1"),
        rec.ConfigRecord(resource_type=4, resource_name="", name="b", value="2"),
        rec.ConfigRecord(resource_type=4, resource_name="", name="a", value=None),
        rec.FeatureLevelRecord(name="metadata.version", feature_level=27),
        rec.FeatureLevelRecord(name="transaction.version", feature_level=2),
        rec.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
        rec.ClientQuotaRecord(
            entity=[rec.ClientQuotaRecord.EntityData(entity_type="user", entity_name="u")],
            key="producer_byte_rate",
            value=10.0,
        ),
        rec.NoOpRecord(),
    )
    assert image.configs[(4, "")] == {"b": "2"}
    assert image.features == {"metadata.version": 27, "transaction.version": 2}
    assert image.next_producer_id == 1000
    assert image.client_quotas[(("user", "u"),)] == {"producer_byte_rate": 10.0}
    _, image = replay(
        image,
        rec.FeatureLevelRecord(name="transaction.version", feature_level=0),
        rec.ClientQuotaRecord(
            entity=[rec.ClientQuotaRecord.EntityData(entity_type="user", entity_name="u")],
            key="producer_byte_rate",
            remove=True,
        ),
    )
    assert image.features == {"metadata.version": 27} and image.client_quotas == {}
    with pytest.raises(MetadataReplayError):
        replay(image, rec.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=5))


def test_loader_replays_commits_and_snapshots_and_publishes() -> None:
    loader = MetadataLoader()
    seen: list[tuple[MetadataDelta, MetadataImage]] = []

    class Recorder:
        def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
            seen.append((delta, image))

    loader.install(Recorder())
    loader.handle_commit(
        SimpleNamespace(
            base_offset=0,
            last_offset=1,
            epoch=1,
            records=[register(1, 0), rec.TopicRecord(name="t", topic_id=TOPIC_ID)],
        )
    )
    assert loader.image.offset == 1 and loader.image.topic("t") is not None
    # a snapshot that no longer holds topic t nor broker 1
    loader.handle_load_snapshot(SimpleNamespace(last_contained_offset=9, epoch=2, records=[register(2, 5)]))
    assert loader.image.offset == 9 and loader.image.topic("t") is None and set(loader.image.brokers) == {2}
    assert seen[-1][0].deleted_topics == {TOPIC_ID: "t"} and seen[-1][0].changed_brokers == {1, 2}
    late: list[MetadataImage] = []

    class Late:
        def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
            late.append(image)

    loader.install(Late())
    assert late == [loader.image]


def test_an_image_written_as_snapshot_records_replays_to_the_same_image() -> None:
    from reference_broker.metadata.snapshot import image_records

    _, image = replay(
        topic_image(),
        rec.FeatureLevelRecord(name="metadata.version", feature_level=27),
        rec.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, leader=2, isr=[2, 3]),
        rec.FenceBrokerRecord(id=1, epoch=10),
        rec.ConfigRecord(
            resource_type=CONFIG_TOPIC, resource_name="t", name="cleanup.policy", value="compact"
        ),
        rec.ProducerIdsRecord(broker_id=2, broker_epoch=11, next_producer_id=2000),
        rec.ClientQuotaRecord(
            entity=[rec.ClientQuotaRecord.EntityData(entity_type="client-id", entity_name=None)],
            key="request_percentage",
            value=50.0,
        ),
    )
    delta = MetadataDelta(MetadataImage())
    for record in image_records(image):
        delta.replay(record)
    delta.finish_snapshot()
    delta.offset, delta.epoch = image.offset, image.epoch
    assert delta.apply() == image
