"""The quorum controller's logic driven sans-IO: a tiny log in the test commits each operation's
records as soon as they are appended (a single-voter quorum), so every answer and record is the
controller's own."""

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
from reference_broker.metadata.image import RECOVERING, PartitionRegistration
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)

pytestmark = pytest.mark.unit

CLUSTER = "test-cluster-id-00000"
SESSION_MS = 9000


class TinyLog:
    """Commits whatever is appended, in order, as the raft quorum of one voter would."""

    def __init__(self, controller: QuorumController):
        self.controller = controller
        self.end_offset = -1

    def run(self, result: ControllerResult) -> Any:
        if result.records:
            self.controller.begin(result.records)
            self.end_offset += len(result.records)
            self.controller.replay_commit(list(result.records), self.end_offset, 1)
            assert self.controller.settled
        return result.response


class Cluster:
    def __init__(self, brokers: int = 3, racks: list[str | None] | None = None, **settings: Any):
        self.ctl = QuorumController(
            ControllerSettings(node_id=1, cluster_id=CLUSTER, session_timeout_ms=SESSION_MS, **settings),
            StripedReplicaPlacer(random.Random(5)),
        )
        self.log = TinyLog(self.ctl)
        self.now = 0.0
        self.ctl.activate(self.now)
        self.log.run(self.ctl.bootstrap())
        self.epochs: dict[int, int] = {}
        for b in range(1, brokers + 1):
            self.register(b, rack=(racks[b - 1] if racks else None))
            self.heartbeat(b)

    def register(
        self, broker_id: int, *, incarnation: int = 0, rack: str | None = None, previous: int = -1
    ) -> Any:
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=CLUSTER,
            incarnation_id=uuid.UUID(int=broker_id * 1000 + incarnation),
            listeners=[
                BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id)
            ],
            features=[
                BrokerRegistrationRequest.Feature(
                    name=name, min_supported_version=low, max_supported_version=high)
                for name, (low, high) in SUPPORTED_FEATURES.items()
            ],
            rack=rack,
            previous_broker_epoch=previous,
        )
        response = self.log.run(self.ctl.cluster.register(request, self.now))
        if response.error_code == ErrorCode.NONE:
            self.epochs[broker_id] = response.broker_epoch
        return response

    def heartbeat(self, broker_id: int, offset: int | None = None, **flags: Any) -> Any:
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epochs[broker_id],
            current_metadata_offset=self.log.end_offset if offset is None else offset,
            **flags,
        )
        return self.log.run(self.ctl.cluster.heartbeat(request, self.now))

    def create(self, name: str, partitions: int = 1, rf: int = 3, **extra: Any) -> Any:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=rf, **extra
                )
            ]
        )
        return self.log.run(self.ctl.replication.create_topics(request)).topics[0]

    def part(self, name: str, partition: int = 0) -> PartitionRegistration:
        found = self.ctl.image.partition(name, partition)
        assert found is not None
        return found

    def alter(
        self, name: str, isr: list[int], *, broker: int | None = None, version: int = 3, **fields: Any
    ) -> Any:
        part = self.part(name)
        topic = self.ctl.image.topic(name)
        assert topic is not None
        leader = part.leader if broker is None else broker
        data = dict(partition_index=0, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch)
        data.update(fields)
        request = AlterPartitionRequest(
            broker_id=leader,
            broker_epoch=self.epochs[leader],
            topics=[
                AlterPartitionRequest.TopicData(
                    topic_name=name,
                    topic_id=topic.id,
                    partitions=[
                        AlterPartitionRequest.PartitionData(
                            new_isr_with_epochs=[
                                AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1) for b in isr
                            ],
                            new_isr=isr,
                            **data,
                        )
                    ],
                )
            ],
        )
        return self.log.run(self.ctl.replication.alter_partition(request, version)).topics[0].partitions[0]

    def expire(self, broker_id: int) -> None:
        """Let ``broker_id``'s session lapse while the others keep heartbeating."""
        self.now += SESSION_MS
        for b in self.epochs:
            if b != broker_id and not self.ctl.image.brokers[b].fenced:
                self.heartbeat(b)
        fenced = self.log.run(self.ctl.fence_stale_brokers(self.now))
        assert fenced == broker_id


def test_brokers_register_fenced_and_are_unfenced_once_caught_up() -> None:
    c = Cluster(brokers=0)
    response = c.register(1)
    assert response.error_code == ErrorCode.NONE and c.ctl.image.brokers[1].fenced
    behind = c.heartbeat(1, offset=response.broker_epoch - 1)
    assert (behind.is_caught_up, behind.is_fenced) == (False, True)
    caught_up = c.heartbeat(1)
    assert (caught_up.is_caught_up, caught_up.is_fenced) == (True, False)
    assert not c.ctl.image.brokers[1].fenced
    # a retry of the same incarnation gets the same epoch; another incarnation while alive is refused
    assert c.register(1).broker_epoch == response.broker_epoch
    assert c.register(1, incarnation=1).error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    stale = c.ctl.cluster.heartbeat(
        BrokerHeartbeatRequest(broker_id=1, broker_epoch=response.broker_epoch + 5), c.now
    )
    assert stale.response.error_code == ErrorCode.STALE_BROKER_EPOCH
    unknown = c.ctl.cluster.heartbeat(BrokerHeartbeatRequest(broker_id=9, broker_epoch=0), c.now)
    assert unknown.response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    wrong_cluster = BrokerRegistrationRequest(broker_id=2, cluster_id="other", incarnation_id=uuid.uuid4())
    assert (
        c.ctl.cluster.register(wrong_cluster, c.now).response.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    )


def test_create_topics_places_replicas_on_distinct_brokers_and_checks_the_replication_factor() -> None:
    c = Cluster()
    result = c.create("t", partitions=6, rf=3)
    assert result.error_code == ErrorCode.NONE and (result.num_partitions, result.replication_factor) == (
        6,
        3,
    )
    leaders = []
    for p in range(6):
        part = c.part("t", p)
        assert sorted(part.replicas) == [1, 2, 3] and part.isr == part.replicas
        assert part.leader == part.replicas[0] and part.leader_epoch == 0
        leaders.append(part.leader)
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    assert c.create("t").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    too_many = c.create("u", rf=4)
    assert too_many.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 3 broker(s) are registered" in too_many.error_message
    assert c.create("v", partitions=0).error_code == ErrorCode.INVALID_PARTITIONS
    assert c.create("bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    bad_config = [CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="abc")]
    refused = c.create("w", configs=bad_config)
    assert refused.error_code == ErrorCode.INVALID_CONFIG and "retention.ms" in refused.error_message
    assert c.ctl.image.topic("w") is None


def test_placement_is_rack_aware() -> None:
    c = Cluster(brokers=4, racks=["a", "a", "b", "b"])
    c.create("t", partitions=8, rf=2)
    rack = {b.id: b.rack for b in c.ctl.image.brokers.values()}
    for p in range(8):
        replicas = c.part("t", p).replicas
        assert {rack[r] for r in replicas} == {"a", "b"}


def test_an_expired_session_fences_the_broker_and_moves_leadership_and_it_comes_back() -> None:
    c = Cluster()
    c.create("t", rf=3)
    first = c.part("t")
    leader = first.leader
    c.expire(leader)
    assert c.ctl.image.brokers[leader].fenced
    moved = c.part("t")
    assert moved.leader not in (leader, -1) and leader not in moved.isr
    assert moved.leader_epoch == first.leader_epoch + 1
    # the fenced broker may still hold followers of a new topic, never its leader
    assert c.create("u", rf=3).error_code == ErrorCode.NONE
    assert c.part("u").leader != leader and leader not in c.part("u").isr
    # back: registered again after an unclean stop, caught up, unfenced; the preferred leader
    # returns by rebalance
    assert c.register(leader, incarnation=1).error_code == ErrorCode.NONE
    assert c.heartbeat(leader).is_fenced is False
    assert c.part("t").leader == moved.leader
    c.alter("t", [*list(c.part("t").isr), leader])
    c.log.run(c.ctl.rebalance_leaders())
    assert c.part("t").leader == leader


def test_the_last_in_sync_replica_is_kept_in_the_isr_with_no_leader_and_leads_when_it_returns() -> None:
    c = Cluster()
    c.create("t", rf=2)
    replicas = c.part("t").replicas
    c.expire(replicas[1])
    c.expire(replicas[0])
    part = c.part("t")
    assert (part.leader, part.isr) == (-1, (replicas[0],))
    c.heartbeat(replicas[0])
    assert c.part("t").leader == replicas[0]


def test_automatic_unclean_election_only_when_enabled_and_always_on_request() -> None:
    c = Cluster()
    c.create("t", rf=3)
    part = c.part("t")
    c.alter("t", [part.leader])  # the ISR shrinks to the leader alone
    follower = next(r for r in part.replicas if r != part.leader)
    c.expire(part.leader)
    assert c.part("t").leader == -1
    request = ElectLeadersRequest(
        election_type=1, topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])]
    )
    # an administrator's unclean election happens whatever the setting
    # (kafka-leader-election --election-type unclean)
    asked = c.log.run(c.ctl.replication.elect_leaders(request))
    assert asked.replica_election_results[0].partition_result[0].error_code == ErrorCode.NONE
    assert c.part("t").leader != -1 and c.part("t").leader_recovery_state == RECOVERING
    unclean = Cluster(unclean_leader_election=True)
    unclean.create("t", rf=3)
    part = unclean.part("t")
    unclean.alter("t", [part.leader])
    unclean.expire(part.leader)
    after = unclean.part("t")
    assert after.leader in part.replicas and after.leader != part.leader
    assert after.isr == (after.leader,) and after.leader_recovery_state == RECOVERING
    assert follower in part.replicas


def test_alter_partition_checks_epochs_leader_and_eligibility() -> None:
    c = Cluster()
    c.create("t", rf=3)
    part = c.part("t")
    follower = [r for r in part.replicas if r != part.leader]
    assert (
        c.alter("t", [part.leader], leader_epoch=part.leader_epoch - 1).error_code
        == ErrorCode.FENCED_LEADER_EPOCH
    )
    assert (
        c.alter("t", [part.leader], leader_epoch=part.leader_epoch + 1).error_code == ErrorCode.NOT_CONTROLLER
    )
    assert (
        c.alter("t", [part.leader], partition_epoch=part.partition_epoch - 1).error_code
        == ErrorCode.INVALID_UPDATE_VERSION
    )
    assert c.alter("t", [follower[0]], broker=follower[0]).error_code == ErrorCode.INVALID_REQUEST
    assert c.alter("t", follower).error_code == ErrorCode.INVALID_REQUEST  # the leader left out
    assert c.alter("t", [part.leader, 99]).error_code == ErrorCode.INVALID_REQUEST  # not a replica
    shrunk = c.alter("t", [part.leader, follower[0]])
    assert shrunk.error_code == ErrorCode.NONE and shrunk.isr == [part.leader, follower[0]]
    assert (shrunk.partition_epoch, shrunk.leader_epoch) == (part.partition_epoch + 1, part.leader_epoch)
    c.expire(follower[1])
    assert c.alter("t", [part.leader, follower[0], follower[1]]).error_code == ErrorCode.INELIGIBLE_REPLICA
    assert (
        c.alter("t", [part.leader, follower[0], follower[1]], version=1).error_code
        == ErrorCode.OPERATION_NOT_ATTEMPTED
    )


def test_reassignment_adds_then_completes_when_new_replicas_join_the_isr() -> None:
    c = Cluster(brokers=4)
    manual = [
        CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2, 3])
    ]
    assert c.create("t", partitions=-1, rf=-1, assignments=manual).error_code == ErrorCode.NONE
    request = AlterPartitionReassignmentsRequest(
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(
                name="t",
                partitions=[
                    AlterPartitionReassignmentsRequest.ReassignablePartition(
                        partition_index=0, replicas=[2, 3, 4]
                    )
                ],
            )
        ]
    )
    response = c.log.run(c.ctl.replication.alter_reassignments(request))
    assert response.responses[0].partitions[0].error_code == ErrorCode.NONE
    part = c.part("t")
    assert (part.replicas, part.adding_replicas, part.removing_replicas, part.leader) == (
        (2, 3, 4, 1),
        (4,),
        (1,),
        1,
    )
    listed = c.log.run(c.ctl.replication.list_reassignments(ListPartitionReassignmentsRequest(topics=None)))
    assert listed.topics[0].partitions[0].adding_replicas == [4]
    done = c.alter("t", [1, 2, 3, 4])
    assert done.error_code == ErrorCode.NEW_LEADER_ELECTED
    part = c.part("t")
    assert (part.replicas, part.isr, part.is_reassigning) == ((2, 3, 4), (2, 3, 4), False)
    assert part.leader == 2
    listed = c.log.run(c.ctl.replication.list_reassignments(ListPartitionReassignmentsRequest(topics=None)))
    assert listed.topics == []
    cancel = AlterPartitionReassignmentsRequest(
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(
                name="t",
                partitions=[
                    AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=None)
                ],
            )
        ]
    )
    nothing = c.log.run(c.ctl.replication.alter_reassignments(cancel))
    assert nothing.responses[0].partitions[0].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_preferred_election_create_partitions_delete_and_producer_ids() -> None:
    c = Cluster()
    c.create("t", rf=3)
    preferred = c.part("t").replicas[0]
    request = ElectLeadersRequest(
        election_type=0, topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0, 7])]
    )
    results = c.log.run(c.ctl.replication.elect_leaders(request)).replica_election_results[0].partition_result
    assert [r.error_code for r in results] == [
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    c.expire(preferred)
    c.register(preferred, incarnation=1)
    c.heartbeat(preferred)
    c.alter("t", sorted(c.part("t").replicas))
    results = c.log.run(c.ctl.replication.elect_leaders(request)).replica_election_results[0].partition_result
    assert results[0].error_code == ErrorCode.NONE and c.part("t").leader == preferred

    more = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=3)])
    assert c.log.run(c.ctl.replication.create_partitions(more)).results[0].error_code == ErrorCode.NONE
    assert len(c.part("t", 2).replicas) == 3
    fewer = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=2)])
    assert (
        c.log.run(c.ctl.replication.create_partitions(fewer)).results[0].error_code
        == ErrorCode.INVALID_PARTITIONS
    )

    deleted = c.log.run(c.ctl.replication.delete_topics(DeleteTopicsRequest(topic_names=["t", "nope"]), 5))
    assert [r.error_code for r in deleted.responses] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert c.ctl.image.topic("t") is None

    first = c.log.run(
        c.ctl.cluster.allocate_producer_ids(AllocateProducerIdsRequest(broker_id=1, broker_epoch=c.epochs[1]))
    )
    second = c.log.run(
        c.ctl.cluster.allocate_producer_ids(AllocateProducerIdsRequest(broker_id=2, broker_epoch=c.epochs[2]))
    )
    assert (first.producer_id_start, second.producer_id_start) == (0, first.producer_id_len)
    stale = c.ctl.cluster.allocate_producer_ids(AllocateProducerIdsRequest(broker_id=1, broker_epoch=-5))
    assert stale.response.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_leadership_lost_mid_operation_returns_to_the_committed_image() -> None:
    c = Cluster()
    result = c.ctl.replication.create_topics(
        CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=3)]
        )
    )
    c.ctl.begin(result.records)
    assert c.ctl.image.topic("t") is not None and c.ctl.committed.topic("t") is None
    c.ctl.abort()
    assert c.ctl.image.topic("t") is None


def test_in_flight_records_committed_inside_a_larger_batch_settle_by_offset() -> None:
    c = Cluster()
    result = c.ctl.replication.create_topics(
        CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=3)]
        )
    )
    c.ctl.begin(result.records)
    merged = [rec.NoOpRecord(), *result.records]
    last = c.log.end_offset + len(merged)
    c.ctl.replay_commit(merged, last, 1)
    c.ctl.appended(last)
    assert c.ctl.settled and c.ctl.committed.topic("t") is not None
    assert c.ctl.image is c.ctl.committed
