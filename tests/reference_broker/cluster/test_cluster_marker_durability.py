"""A transaction marker counts as written only once the partition's ISR holds it (Kafka appends
WriteTxnMarkers with acks=-1, and its coordinator sends every marker that way, also to itself).

The scenario the anomaly workload found on a three-node cluster: a committed transaction's
partition leader, cut off from its follower, appends the COMMIT marker and loses leadership
before the follower has it. If the coordinator took the unreplicated append as done, it would
complete the transaction and never write the marker again: the new leader's log keeps the
transaction open, read_committed readers stop at it, and a later ABORT of the producer's next
transaction ends it as aborted: a committed record lost. With the marker answered only once
replicated, the coordinator keeps the transaction prepared and writes the marker to the new
leader.

Both cases: the partition led by another node than the coordinator (a WriteTxnMarkers request)
and led by the coordinator's own node.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reference_broker.testing import ClusterFactory, ClusterProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import CreateTopicsRequest
from tests.reference_broker.cluster.test_cluster_txn_fencing import live_node, transaction_coordinator, until
from tests.reference_broker.cluster.three_nodes import read_committed
from tests.reference_broker.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CONFIG: dict[str, Any] = {
    "min.insync.replicas": 1,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    # Two replicas, so one node is no replica of it: the data partition's follower (cut off from
    # its leader) is then not needed to replicate the coordinator's own writes.
    "transaction.state.log.replication.factor": 2,
    "transaction.state.log.min.isr": 1,
    # The cut-off follower stays in the ISR: the leader cannot count the marker replicated.
    "replica.lag.time.max.ms": 60000,
    "unclean.leader.election.enable": False,
}


def create_pinned_topic(cluster: ClusterProcess, name: str, replicas: list[int]) -> None:
    assignment = CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment(
        partition_index=0, broker_ids=replicas)
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                               assignments=[assignment])
    with WireClient(live_node(cluster)) as wire:
        answer = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=30_000), 5)
    assert answer.topics[0].error_code == E.NONE, answer.topics[0]
    until(lambda: (p := cluster.partition(name, 0)) is not None and sorted(p.isr_nodes) == sorted(replicas),
          f"{name}-0 has both replicas in sync")


@pytest.mark.parametrize("leader_is", ["another node", "the coordinator's node"])
def test_a_marker_its_leader_lost_unreplicated_is_written_again(
    reference_cluster: ClusterFactory, leader_is: str
) -> None:
    cluster = reference_cluster(3, CONFIG)
    transactional_id = f"durable-{uuid.uuid4().hex[:8]}"
    coordinator = transaction_coordinator(cluster, transactional_id)
    state = cluster.partition("__transaction_state", 0)
    assert state is not None
    not_a_state_replica = next(n for n in (1, 2, 3) if n not in state.replica_nodes)
    if leader_is == "another node":
        leader = next(n for n in (1, 2, 3) if n not in (coordinator, not_a_state_replica))
    else:
        leader = coordinator
    follower = not_a_state_replica
    topic = f"marked-{uuid.uuid4().hex[:8]}"
    create_pinned_topic(cluster, topic, [leader, follower])
    assert cluster.leader_of(topic, 0) == leader

    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
        "transaction.timeout.ms": 120000,
    })
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    assert producer.flush(30) == 0  # acks=all: the follower has the record

    cluster.cut(follower, leader, both_ways=False)  # the follower can no longer fetch from the leader
    producer.commit_transaction(30)  # answered once PrepareCommit is replicated
    time.sleep(2)  # time for the coordinator to send the marker (and, unfixed, to complete)
    cluster.kill(leader)
    cluster.heal()
    until(lambda: cluster.leader_of(topic, 0, timeout=30) == follower, f"node {follower} leads {topic}-0")
    cluster.start_node(leader)

    got = read_committed(cluster.bootstrap, topic, at_least=1, timeout=60)
    assert got == [b"committed"], "the committed record is not readable with read_committed"
