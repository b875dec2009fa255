"""UpdateFeatures decided by the controller (Kafka's FeatureControlManager), sans-IO: the checks
in Kafka's order and words, the records written, and kraft.version handed to the raft layer."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from reference_broker import internal_records as rec
from reference_broker.controller.feature_control import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdateError,
    java_hash_order,
)
from reference_broker.controller.quorum_controller import QuorumController
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.settings import ControllerSettings
from reference_broker.controller.supported_features import SUPPORTED_FEATURES
from sdk.protocol.errors import ErrorCode
from tests.reference_broker.controller.test_quorum_controller import TinyLog

pytestmark = pytest.mark.unit


class FakeKRaft:
    """The raft layer as the feature control sees it: a level, voters, and the upgrades asked."""

    def __init__(self, voters: frozenset[int] = frozenset({1, 2, 3})):
        self.level = 0
        self.voters = voters
        self.asked: list[tuple[int, bool]] = []
        self.refusal: Exception | None = None

    def kraft_version(self) -> int:
        return self.level

    def voter_ids(self) -> frozenset[int]:
        return self.voters

    def upgrade_kraft_version(self, version: int, validate_only: bool) -> None:
        self.asked.append((version, validate_only))
        if self.refusal is not None:
            raise self.refusal
        if not validate_only:
            self.level = version


def features(ranges: dict[str, tuple[int, int]]) -> list[Any]:
    cls = rec.RegisterBrokerRecord.BrokerFeature
    return [cls(name=n, min_supported_version=lo, max_supported_version=hi) for n, (lo, hi) in ranges.items()]


def controller_record(node_id: int, ranges: dict[str, tuple[int, int]]) -> Any:
    cls = rec.RegisterControllerRecord
    return cls(controller_id=node_id, incarnation_id=uuid.UUID(int=node_id),
               end_points=[cls.ControllerEndpoint(name="CONTROLLER", host="127.0.0.1", port=9100 + node_id,
                                                  security_protocol=0)],
               features=[cls.ControllerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                         for n, (lo, hi) in ranges.items()])


class Features:
    """An active controller (node 1) with brokers and controllers 1-3 registered."""

    def __init__(self, broker_ranges: dict[int, dict[str, tuple[int, int]]] | None = None,
                 controllers: tuple[int, ...] = (1, 2, 3)):
        self.ctl = QuorumController(ControllerSettings(node_id=1, cluster_id="c"))
        self.kraft = FakeKRaft()
        self.ctl.features.kraft = self.kraft
        self.log = TinyLog(self.ctl)
        self.ctl.activate(0)
        self.log.run(self.ctl.bootstrap())
        records: list[Any] = []
        for b in (1, 2, 3):
            ranges = (broker_ranges or {}).get(b, dict(SUPPORTED_FEATURES))
            records.append(rec.RegisterBrokerRecord(
                broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=b, features=features(ranges)))
        records += [controller_record(c, dict(SUPPORTED_FEATURES)) for c in controllers]
        self.log.run(ControllerResult(records))

    def update(self, *updates: tuple[str, int, int],
               validate_only: bool = False) -> FeatureUpdateError | None:
        before = self.log.end_offset
        outcome = self.log.run(self.ctl.features.update_features(list(updates), validate_only))
        if outcome is not None or validate_only:
            assert self.log.end_offset == before, "a refusal or a dry run writes nothing"
        return outcome  # type: ignore[no-any-return]

    def level(self, name: str) -> int:
        return self.ctl.features.finalized().get(name, 0)


def message(outcome: FeatureUpdateError | None) -> str:
    assert outcome is not None
    assert outcome.code == ErrorCode.INVALID_UPDATE_VERSION
    return outcome.message


def test_a_new_cluster_finalizes_kafka_41s_levels() -> None:
    f = Features()
    assert f.ctl.features.finalized() == {"metadata.version": 27, "transaction.version": 2,
                                          "group.version": 1, "kraft.version": 0}


def test_upgrades_downgrades_and_disabling_write_feature_level_records() -> None:
    f = Features()
    assert f.update(("transaction.version", 1, SAFE_DOWNGRADE), validate_only=True) is None
    assert f.level("transaction.version") == 2
    assert f.update(("transaction.version", 1, SAFE_DOWNGRADE)) is None
    assert f.level("transaction.version") == 1
    assert f.update(("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 2, UPGRADE)) is None
    assert (f.level("group.version"), f.level("transaction.version")) == (0, 2)
    assert "group.version" not in f.ctl.image.features  # level 0 removes it
    assert f.update(("metadata.version", 24, SAFE_DOWNGRADE)) is None
    assert f.level("metadata.version") == 24
    assert f.update(("metadata.version", 27, UPGRADE)) is None
    assert f.update(("transaction.version", 2, UPGRADE)) is None  # the same level again: fine


def test_refusals_in_kafkas_words() -> None:
    f = Features()
    assert message(f.update(("transaction.version", 3, UPGRADE))) == (
        "Invalid update version 3 for feature transaction.version. Local controller 1 only supports"
        " versions 0-2")
    assert message(f.update(("share.version", 1, UPGRADE))) == (
        "Invalid update version 1 for feature share.version. Local controller 1 does not support this"
        " feature.")
    assert message(f.update(("nosuch.version", 0, SAFE_DOWNGRADE))) == (
        "Invalid update version 0 for feature nosuch.version. Feature nosuch.version not found.")
    assert message(f.update(("transaction.version", -1, SAFE_DOWNGRADE))) == (
        "Invalid update version -1 for feature transaction.version. A feature version cannot be less than 0.")
    assert message(f.update(("transaction.version", 1, UPGRADE))) == (
        "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this"
        " feature without setting the upgrade type to either safe or unsafe downgrade.")
    assert message(f.update(("group.version", 1, SAFE_DOWNGRADE), ("transaction.version", 0, 9))) == (
        "Invalid update version 0 for feature transaction.version. The controller does not support the"
        " given upgrade type.")
    f.update(("group.version", 0, SAFE_DOWNGRADE))
    assert message(f.update(("group.version", 1, SAFE_DOWNGRADE))) == (
        "Invalid update version 1 for feature group.version. Can't downgrade to a newer version.")
    assert message(f.update(("metadata.version", 22, SAFE_DOWNGRADE))) == (
        "Invalid metadata.version 22. Refusing to perform the requested downgrade because it might"
        " delete metadata information.")
    assert message(f.update(("metadata.version", 22, UNSAFE_DOWNGRADE))) == (
        "Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this version.")
    assert message(f.update(("metadata.version", 28, UPGRADE))) == (
        "Invalid update version 28 for feature metadata.version. Local controller 1 only supports"
        " versions 7-27")


def test_one_bad_feature_fails_the_whole_request_named_in_kafkas_order() -> None:
    f = Features()
    # Kafka's HashMap takes group.version before transaction.version, whatever the request order
    order = java_hash_order(["transaction.version", "group.version"])
    assert order == ["group.version", "transaction.version"]
    outcome = f.update(("transaction.version", 1, SAFE_DOWNGRADE), ("group.version", 5, UPGRADE))
    assert "feature group.version" in message(outcome)
    assert f.level("transaction.version") == 2


def test_every_registered_node_must_support_the_level() -> None:
    old = dict(SUPPORTED_FEATURES) | {"transaction.version": (0, 1)}
    f = Features(broker_ranges={2: old})
    assert f.update(("transaction.version", 1, SAFE_DOWNGRADE)) is None
    assert message(f.update(("transaction.version", 2, UPGRADE))) == (
        "Invalid update version 2 for feature transaction.version. Broker 2 only supports versions 0-1")
    f = Features(controllers=(1, 2))
    assert message(f.update(("group.version", 0, SAFE_DOWNGRADE))) == (
        "Invalid update version 0 for feature group.version. controller 3 has not registered, and may not"
        " support this feature")


def test_kraft_version_goes_to_the_raft_layer_with_a_no_op_record() -> None:
    f = Features()
    assert f.update(("kraft.version", 1, UPGRADE), validate_only=True) is None
    assert f.kraft.asked == [(1, True)] and f.level("kraft.version") == 0
    before = f.log.end_offset
    assert f.update(("kraft.version", 1, UPGRADE)) is None
    assert f.kraft.asked[-1] == (1, False) and f.level("kraft.version") == 1
    assert f.log.end_offset == before + 1  # the NoOpRecord whose commit answers the request
    assert message(f.update(("kraft.version", 0, SAFE_DOWNGRADE))) == (
        "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature.")
    assert f.update(("kraft.version", 1, SAFE_DOWNGRADE)) is None  # to the same level: nothing to do
    f.kraft.refusal = FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION, "from the raft layer")
    f.kraft.level = 0
    assert message(f.update(("kraft.version", 1, UPGRADE))) == "from the raft layer"
