"""The active controller's decision on ControllerRegistration (KIP-919), as Kafka 4.1's
``ClusterControlManager.registerController``: a RegisterControllerRecord with what the request
says (zk_migration_ready always false), whatever the incarnation and whether or not the id is a
voter; UNSUPPORTED_VERSION below metadata.version 3.7-IV0. Driven sans-IO: each operation's
records are committed at once, as a single-voter quorum would."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from reference_broker import internal_records as rec
from reference_broker.controller.placement import StripedReplicaPlacer
from reference_broker.controller.quorum_controller import QuorumController
from reference_broker.controller.result import ControllerResult
from reference_broker.controller.settings import ControllerSettings
from reference_broker.controller.supported_features import SUPPORTED_FEATURES
from reference_broker.metadata.image import ControllerRegistration, Endpoint
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import BrokerRegistrationRequest, ControllerRegistrationRequest

pytestmark = pytest.mark.unit

CLUSTER = "test-cluster-id-00000"


class SingleVoter:
    """A controller whose every appended record is committed at once."""

    def __init__(self, *, metadata_version: int | None = None) -> None:
        self.ctl = QuorumController(
            ControllerSettings(node_id=1, cluster_id=CLUSTER, session_timeout_ms=9000),
            StripedReplicaPlacer(random.Random(5)),
        )
        self.end_offset = -1
        self.ctl.activate(0.0)
        if metadata_version is None:
            self.run(self.ctl.bootstrap())
        else:
            self.run(ControllerResult([rec.FeatureLevelRecord(name="metadata.version",
                                                              feature_level=metadata_version)]))
        self.written: list[Any] = []

    def run(self, result: ControllerResult) -> Any:
        if result.records:
            self.ctl.begin(result.records)
            self.end_offset += len(result.records)
            self.ctl.replay_commit(list(result.records), self.end_offset, 1)
            assert self.ctl.settled
            self.written = list(result.records)
        return result.response

    def register(self, request: ControllerRegistrationRequest) -> Any:
        self.written = []
        return self.run(self.ctl.cluster.register_controller(request))


def registration(controller_id: int, incarnation: int, *, port: int | None = None,
                 features: dict[str, tuple[int, int]] | None = None) -> ControllerRegistrationRequest:
    return ControllerRegistrationRequest(
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=controller_id * 1000 + incarnation),
        zk_migration_ready=True,  # written false whatever is sent: there is no ZooKeeper to leave
        listeners=[ControllerRegistrationRequest.Listener(
            name="CONTROLLER", host=f"127.0.1.{controller_id}", port=port or 9100 + controller_id,
            security_protocol=0)],
        features=[ControllerRegistrationRequest.Feature(name=n, min_supported_version=lo,
                                                        max_supported_version=hi)
                  for n, (lo, hi) in sorted((features or dict(SUPPORTED_FEATURES)).items())],
    )


def test_a_registration_is_written_as_a_register_controller_record_and_lands_in_the_image() -> None:
    quorum = SingleVoter()
    answer = quorum.register(registration(1, 0))
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, "")
    [record] = quorum.written
    assert isinstance(record, rec.RegisterControllerRecord)
    assert (record.controller_id, record.incarnation_id, record.zk_migration_ready) == (
        1, uuid.UUID(int=1000), False)
    assert [(e.name, e.host, e.port, e.security_protocol) for e in record.end_points] == [
        ("CONTROLLER", "127.0.1.1", 9101, 0)]
    assert {f.name: (f.min_supported_version, f.max_supported_version) for f in record.features} == {
        "metadata.version": (7, 27), "kraft.version": (0, 1), "transaction.version": (0, 2),
        "group.version": (0, 1)}
    assert quorum.ctl.committed.controllers == {1: ControllerRegistration(
        id=1, incarnation_id=uuid.UUID(int=1000), zk_migration_ready=False,
        endpoints=(Endpoint("CONTROLLER", "127.0.1.1", 9101, 0),),
        features=dict(SUPPORTED_FEATURES))}


def test_the_same_incarnation_again_rewrites_its_registration_and_another_replaces_it() -> None:
    quorum = SingleVoter()
    quorum.register(registration(2, 0))
    # The same incarnation again (a retry whose first answer was lost, or a moved listener):
    # written again, Kafka keeps no state to tell it from a change.
    answer = quorum.register(registration(2, 0, port=9200))
    assert answer.error_code == ErrorCode.NONE
    assert len(quorum.written) == 1
    assert quorum.ctl.committed.controllers[2].endpoints == (Endpoint("CONTROLLER", "127.0.1.2", 9200, 0),)
    # A restarted process (new incarnation): accepted at once, no fencing or session to wait out.
    answer = quorum.register(registration(2, 1, features={"metadata.version": (7, 27)}))
    assert answer.error_code == ErrorCode.NONE
    latest = quorum.ctl.committed.controllers[2]
    assert (latest.incarnation_id, dict(latest.features)) == (
        uuid.UUID(int=2001), {"metadata.version": (7, 27)})
    assert set(quorum.ctl.committed.controllers) == {2}


def test_a_controller_id_that_is_no_voter_is_registered_too() -> None:
    """Kafka checks neither the voter set nor the cluster id: an observer controller that is about
    to be added with ``kafka-metadata-quorum add-controller`` registers like a voter."""
    quorum = SingleVoter()
    answer = quorum.register(registration(42, 0))
    assert answer.error_code == ErrorCode.NONE
    assert set(quorum.ctl.committed.controllers) == {42}


def test_a_metadata_version_before_3_7_refuses_controller_registration() -> None:
    quorum = SingleVoter(metadata_version=14)  # 3.6-IV2
    answer = quorum.register(registration(1, 0))
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.UNSUPPORTED_VERSION, "The version of API is not supported.")
    assert quorum.written == []
    assert quorum.ctl.committed.controllers == {}
    quorum.run(ControllerResult([rec.FeatureLevelRecord(name="metadata.version", feature_level=15)]))
    assert quorum.register(registration(1, 0)).error_code == ErrorCode.NONE


def test_a_broker_registration_takes_no_controller_registration_with_it() -> None:
    """The two registries are apart: a combined node is in both only once it sent both."""
    quorum = SingleVoter()
    quorum.run(quorum.ctl.cluster.register(BrokerRegistrationRequest(
        broker_id=1, cluster_id=CLUSTER, incarnation_id=uuid.UUID(int=5),
        features=[BrokerRegistrationRequest.Feature(
            name=n, min_supported_version=lo, max_supported_version=hi)
            for n, (lo, hi) in SUPPORTED_FEATURES.items()]), 0.0))
    assert set(quorum.ctl.committed.brokers) == {1}
    assert quorum.ctl.committed.controllers == {}
