"""Registered controllers in the metadata image (KIP-919): RegisterControllerRecord replayed by
``MetadataDelta`` as Kafka's ClusterDelta does (the latest record of an id is its whole
registration), written back by ``image_records`` for snapshots, and dropped by a snapshot that
does not state them (``finish_snapshot``)."""

from __future__ import annotations

import uuid

import pytest

from reference_broker import internal_records as rec
from reference_broker.metadata.delta import MetadataDelta
from reference_broker.metadata.image import ControllerRegistration, Endpoint, MetadataImage
from reference_broker.metadata.loader import MetadataLoader, full_delta
from reference_broker.metadata.snapshot import image_records
from reference_broker.raft.serde import decode_metadata_record, encode_metadata_record

pytestmark = pytest.mark.unit


def register_controller(
    controller_id: int, incarnation: int, port: int = 9093
) -> rec.RegisterControllerRecord:
    return rec.RegisterControllerRecord(
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=controller_id * 100 + incarnation),
        zk_migration_ready=False,
        end_points=[rec.RegisterControllerRecord.ControllerEndpoint(
            name="CONTROLLER", host=f"127.0.1.{controller_id}", port=port, security_protocol=0)],
        features=[
            rec.RegisterControllerRecord.ControllerFeature(name="metadata.version",
                                                           min_supported_version=7,
                                                           max_supported_version=27),
            rec.RegisterControllerRecord.ControllerFeature(name="kraft.version",
                                                           min_supported_version=0,
                                                           max_supported_version=1),
        ],
    )


def replay(image: MetadataImage, *records: object) -> tuple[MetadataDelta, MetadataImage]:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta, delta.apply()


def test_a_register_controller_record_registers_the_controller() -> None:
    delta, image = replay(MetadataImage(), register_controller(1, 0), register_controller(2, 0))
    assert delta.changed_controllers == {1, 2}
    assert not delta.features_changed
    assert image.controllers[1] == ControllerRegistration(
        id=1, incarnation_id=uuid.UUID(int=100), zk_migration_ready=False,
        endpoints=(Endpoint("CONTROLLER", "127.0.1.1", 9093, 0),),
        features={"metadata.version": (7, 27), "kraft.version": (0, 1)})
    assert image.controllers[1].endpoint("CONTROLLER") == Endpoint("CONTROLLER", "127.0.1.1", 9093, 0)
    assert image.controllers[1].endpoint("PLAINTEXT") is None
    assert image.brokers == {}  # a controller is no broker


def test_a_later_registration_replaces_the_earlier_one_and_other_images_share_the_map() -> None:
    _, first = replay(MetadataImage(), register_controller(1, 0), register_controller(2, 0))
    delta, second = replay(first, register_controller(1, 1, port=9999))
    assert delta.changed_controllers == {1}
    assert second.controllers[1].incarnation_id == uuid.UUID(int=101)
    assert second.controllers[1].endpoints[0].port == 9999
    assert second.controllers[2] is first.controllers[2]
    assert first.controllers[1].incarnation_id == uuid.UUID(int=100)  # images never change
    # a delta that touches no controller keeps the very same map
    _, third = replay(second, rec.FeatureLevelRecord(name="metadata.version", feature_level=27))
    assert third.controllers is second.controllers


def test_snapshot_records_replay_to_the_same_controllers_through_the_wire_format() -> None:
    _, image = replay(
        MetadataImage(),
        rec.FeatureLevelRecord(name="metadata.version", feature_level=27),
        register_controller(3, 0),
        register_controller(1, 0),
        register_controller(1, 4),
    )
    records = image_records(image)
    written = [r for r in records if isinstance(r, rec.RegisterControllerRecord)]
    assert [r.controller_id for r in written] == [1, 3]
    assert isinstance(records[0], rec.FeatureLevelRecord)  # metadata.version still first
    # through the bytes a snapshot holds: every field survives
    decoded = [decode_metadata_record(encode_metadata_record(r)) for r in records]
    delta = MetadataDelta(MetadataImage())
    for record in decoded:
        delta.replay(record)
    delta.finish_snapshot()
    delta.offset, delta.epoch = image.offset, image.epoch
    assert delta.apply() == image


def test_a_snapshot_that_does_not_state_a_controller_drops_it() -> None:
    _, image = replay(MetadataImage(), register_controller(1, 0), register_controller(2, 0))
    loader = MetadataLoader()
    loader.image = image

    class Snapshot:
        records = [register_controller(2, 1)]
        last_contained_offset = 10
        epoch = 3

    loader.handle_load_snapshot(Snapshot())
    assert set(loader.image.controllers) == {2}
    assert loader.image.controllers[2].incarnation_id == uuid.UUID(int=201)


def test_a_publisher_installed_late_sees_every_registered_controller() -> None:
    _, image = replay(MetadataImage(), register_controller(1, 0), register_controller(2, 0))
    delta = full_delta(image)
    assert delta.changed_controllers == {1, 2}
    assert delta.apply().controllers == image.controllers
