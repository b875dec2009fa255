"""The transaction coordinator on a three-node cluster when its ``__transaction_state`` partition
changes hands or cannot replicate.

* Kafka's coordinator epoch: the node that takes a ``__transaction_state`` partition over writes
  its markers with that partition's leader epoch, and a partition leader refuses a marker whose
  coordinator epoch is older than the last one it saw for the producer
  (TRANSACTION_COORDINATOR_FENCED). So a deposed coordinator that wakes up cannot end the
  producer's next transaction with the markers of the one its successor already completed.
* Kafka's ``appendTransactionToLog``: a state change is applied (and answered) only once the ISR
  holds its record; with the ISR below ``min.insync.replicas`` nothing is written, the client gets
  a retriable coordinator error and the transaction stays as it was.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reference_broker.coordinator.txn.service import PAUSE_BEFORE_MARKERS_ENV, PAUSE_TOKEN_ENV
from reference_broker.testing import ClusterFactory, ClusterProcess
from sdk.protocol.errors import ErrorCode as E
from sdk.protocol.messages import (
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from sdk.records import RecordBatchBuilder, iter_batches
from tests.reference_broker.wire import WireClient, fetch_request

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TXN_STATE = "__transaction_state"
CONFIG: dict[str, Any] = {
    "default.replication.factor": 3,
    "min.insync.replicas": 1,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "replica.lag.time.max.ms": 3000,
    "group.initial.rebalance.delay.ms": 0,
}


def until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            value = condition()
            if value:
                return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


def live_node(cluster: ClusterProcess) -> str:
    """The address of a running, not paused node (WireClient takes one address)."""
    return next(n.bootstrap for n in cluster.nodes if n.running and not n.paused)


def transaction_coordinator(cluster: ClusterProcess, transactional_id: str) -> int:
    """The node coordinating ``transactional_id`` (FindCoordinator, which also has the controller
    create ``__transaction_state``)."""

    def found() -> int | None:
        with WireClient(live_node(cluster)) as wire:
            answer = wire.request(FindCoordinatorRequest(key=transactional_id, key_type=1), 3)
        return answer.node_id if answer.error_code == E.NONE else None

    return int(until(found, f"{transactional_id} has a transaction coordinator"))


def create_topic(cluster: ClusterProcess, name: str, partitions: int, replication_factor: int) -> None:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication_factor)
    with WireClient(live_node(cluster)) as wire:
        answer = wire.request(CreateTopicsRequest(topics=[topic], timeout_ms=30_000), 5)
    assert answer.topics[0].error_code == E.NONE, answer.topics[0]
    for partition in range(partitions):
        cluster.leader_of(name, partition)


def init_producer(wire: WireClient, transactional_id: str) -> tuple[int, int]:
    def answered() -> tuple[int, int] | None:
        answer = wire.request(
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000), 4)
        if answer.error_code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS):
            return None
        assert answer.error_code == E.NONE, E(answer.error_code).name
        return answer.producer_id, answer.producer_epoch

    return until(answered, f"InitProducerId of {transactional_id} succeeds")


def add_partitions(wire: WireClient, transactional_id: str, pid: int, epoch: int, topic: str,
                   partitions: list[int]) -> set[int]:
    """AddPartitionsToTxn v3: the set of error codes of the partitions."""
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)],
    )
    answer = wire.request(request, 3)
    return {p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(wire: WireClient, transactional_id: str, pid: int, epoch: int, *, commit: bool) -> int:
    request = EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                            committed=commit)
    return int(wire.request(request, 3).error_code)


def describe_transaction(wire: WireClient, transactional_id: str) -> tuple[str, set[tuple[str, int]]]:
    """(state, partitions) of the transaction, as its coordinator describes it."""
    state = wire.request(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
    found = state.transaction_states[0]
    assert found.error_code == E.NONE, E(found.error_code).name
    return found.transaction_state, {(t.topic, p) for t in found.topics for p in t.partitions}


def producer_state(wire: WireClient, topic: str, partition: int) -> list[Any]:
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])])
    answer = wire.request(request, 0).topics[0].partitions[0]
    assert answer.error_code == E.NONE, E(answer.error_code).name
    return list(answer.active_producers)


def test_a_marker_older_than_the_new_coordinators_epoch_is_fenced(reference_cluster: ClusterFactory) -> None:
    """After the coordinator's node dies, its successor writes markers with the leader epoch of
    ``__transaction_state`` (above the first leader's 0); a WriteTxnMarkers carrying the old
    coordinator epoch for the same producer is refused with TRANSACTION_COORDINATOR_FENCED."""
    cluster = reference_cluster(3, CONFIG)
    transactional_id = f"epoch-{uuid.uuid4().hex[:8]}"
    first = transaction_coordinator(cluster, transactional_id)
    cluster.kill(first)
    until(lambda: cluster.leader_of(TXN_STATE, 0) != first, "another node leads __transaction_state-0")
    txn_state = cluster.partition(TXN_STATE, 0)
    assert txn_state.leader_epoch >= 1
    topic = f"fenced-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, 1, 2)
    leader = cluster.node(cluster.leader_of(topic, 0))
    coordinator = cluster.node(transaction_coordinator(cluster, transactional_id))

    with WireClient(coordinator.bootstrap) as to_coordinator, WireClient(leader.bootstrap) as to_leader:
        pid, epoch = init_producer(to_coordinator, transactional_id)
        assert add_partitions(to_coordinator, transactional_id, pid, epoch, topic, [0]) == {E.NONE}
        assert end_txn(to_coordinator, transactional_id, pid, epoch, commit=True) == E.NONE

        def marked() -> Any:
            states = [p for p in producer_state(to_leader, topic, 0) if p.producer_id == pid]
            return states[0] if states and states[0].current_txn_start_offset == -1 else None

        marked_state = until(marked, "the commit marker is on the data partition")
        assert marked_state.coordinator_epoch == txn_state.leader_epoch

        stale = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
            coordinator_epoch=txn_state.leader_epoch - 1)])
        answer = to_leader.request(stale, 1)
        code = answer.markers[0].topics[0].partitions[0].error_code
        assert code == E.TRANSACTION_COORDINATOR_FENCED, E(code).name


def test_a_resumed_deposed_coordinator_cannot_commit_the_next_transaction(
    reference_cluster: ClusterFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The coordinator stops (SIGSTOP) after PrepareCommit, before its markers; another node takes
    ``__transaction_state`` over and the producer's retried EndTxn completes the commit there; the
    producer opens its next transaction on the same partition. The old coordinator is resumed and
    sends the commit markers it had pending: the partition leader must fence them, or they would
    commit the producer's new transaction, which the producer then aborts."""
    transactional_id = f"paused-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(PAUSE_BEFORE_MARKERS_ENV, transactional_id)
    monkeypatch.setenv(PAUSE_TOKEN_ENV, str(tmp_path / "paused"))  # the first node to prepare pauses
    cluster = reference_cluster(3, CONFIG)
    old = cluster.node(transaction_coordinator(cluster, transactional_id))
    topic = f"resumed-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, 3, 3)
    partition = next(p for p in range(3) if cluster.leader_of(topic, p) != old.node_id)
    leader = cluster.node(cluster.leader_of(topic, partition))

    with WireClient(old.bootstrap) as to_old, WireClient(leader.bootstrap) as to_leader:
        pid, epoch = init_producer(to_old, transactional_id)
        assert add_partitions(to_old, transactional_id, pid, epoch, topic, [partition]) == {E.NONE}
        assert produce(to_leader, transactional_id, topic, partition, pid, epoch, 0, b"first") == E.NONE
        to_old.send(EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                                  committed=True), 3)  # never answered: the coordinator stops
        until(lambda: _stopped(old.pid), "the coordinator paused itself before its markers")
        cluster.pause(old.node_id)  # the harness knows it is paused (resumed and stopped by PID)
        until(lambda: cluster.leader_of(TXN_STATE, 0, timeout=30) != old.node_id,
              "another node leads __transaction_state-0", 90)
        new = cluster.node(transaction_coordinator(cluster, transactional_id))

        retried = (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR,
                   E.COORDINATOR_NOT_AVAILABLE)

        def end_at_new(commit: bool) -> int:
            with WireClient(new.bootstrap, timeout=30) as to_new:
                return end_txn(to_new, transactional_id, pid, epoch, commit=commit)

        answers: list[int] = []

        def answered() -> bool:
            answers.append(end_at_new(True))
            return answers[-1] not in retried

        until(answered, "the new coordinator answers the retried EndTxn", 90)
        assert E(answers[-1]) == E.NONE, [E(a).name for a in answers]

        def next_transaction_begins() -> bool:
            with WireClient(new.bootstrap, timeout=30) as to_new:
                return add_partitions(to_new, transactional_id, pid, epoch, topic, [partition]) == {E.NONE}

        until(next_transaction_begins, "the next transaction begins")
        assert produce(to_leader, transactional_id, topic, partition, pid, epoch, 1, b"second") == E.NONE

        cluster.resume(old.node_id)

        def stale_markers_answered() -> bool:
            fenced = "TRANSACTION_COORDINATOR_FENCED" in old.log_path.read_text(errors="replace")
            return fenced or b"second" in read_committed(to_leader, topic, partition)

        until(stale_markers_answered, "the resumed coordinator's markers are answered")
        # Fenced, the deposed coordinator stops sending markers and completes nothing (Kafka's
        # removeMarkersForTxn), or, when its metadata told it first that it lost
        # __transaction_state, it drops the transaction with the partition (onResignation); either
        # way the new coordinator owns the transaction.
        def deposed_coordinator_gave_up() -> bool:
            text = old.log_path.read_text(errors="replace")
            return ("stops sending its markers" in text
                    or f"no longer the transaction coordinator of {TXN_STATE}-0" in text)

        until(deposed_coordinator_gave_up, "the deposed coordinator cancels the transaction's markers")
        until(lambda: end_at_new(False) == E.NONE, "the next transaction is aborted")
        until(lambda: not [p for p in producer_state(to_leader, topic, partition)
                           if p.current_txn_start_offset >= 0], "the abort marker is written")
        assert read_committed(to_leader, topic, partition) == [b"first"]


def produce(wire: WireClient, transactional_id: str, topic: str, partition: int, pid: int, epoch: int,
            sequence: int, value: bytes) -> int:
    """A transactional batch of one record, acks=all; its error code."""
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                 is_transactional=True)
    builder.append(0, None, value)
    request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=builder.build())])])
    return int(wire.request(request, 9).responses[0].partition_responses[0].error_code)


def read_committed(wire: WireClient, topic: str, partition: int) -> list[bytes | None]:
    """The values a read_committed Fetch returns from the partition leader (aborted data and
    control records left out)."""
    answer = wire.request(fetch_request(topic, partition, isolation_level=1), 11)
    data = answer.responses[0].partitions[0]
    assert data.error_code == E.NONE, E(data.error_code).name
    pending_aborts = sorted((a.first_offset, a.producer_id) for a in data.aborted_transactions or ())
    aborting: set[int] = set()  # producers whose batches are in an aborted transaction here
    values: list[bytes | None] = []
    for batch in iter_batches(data.records or b""):
        while pending_aborts and pending_aborts[0][0] <= batch.base_offset:
            aborting.add(pending_aborts.pop(0)[1])
        if batch.is_control:
            aborting.discard(batch.producer_id)
        elif not (batch.is_transactional and batch.producer_id in aborting):
            values.extend(record.value for record in batch)
    return values


def _stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc)."""
    if pid is None:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def isr_size(cluster: ClusterProcess) -> int:
    """How many replicas the ISR of ``__transaction_state-0`` has (0 while the answering node does
    not know the partition yet)."""
    found = cluster.partition(TXN_STATE, 0)
    return len(found.isr_nodes) if found is not None else 0


def test_transaction_changes_are_refused_while_the_isr_is_below_min_insync_replicas(
    reference_cluster: ClusterFactory,
) -> None:
    """``transaction.state.log.min.isr`` 3 of 3 replicas: once a follower of ``__transaction_state``
    is dead and out of the ISR, AddPartitionsToTxn and EndTxn answer COORDINATOR_NOT_AVAILABLE and
    the transaction keeps its state and partitions; with the follower back, the commit goes through."""
    cluster = reference_cluster(3, {**CONFIG, "transaction.state.log.min.isr": 3})
    transactional_id = f"minisr-{uuid.uuid4().hex[:8]}"
    coordinator = cluster.node(transaction_coordinator(cluster, transactional_id))
    topic = f"minisr-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, 2, 3)
    follower = next(n for n in (1, 2, 3) if n != coordinator.node_id)

    with WireClient(coordinator.bootstrap) as wire:
        pid, epoch = init_producer(wire, transactional_id)
        assert add_partitions(wire, transactional_id, pid, epoch, topic, [0]) == {E.NONE}
        cluster.kill(follower)
        until(lambda: isr_size(cluster) == 2,
              f"node {follower} left the ISR of __transaction_state-0")

        assert add_partitions(wire, transactional_id, pid, epoch, topic, [1]) == {E.COORDINATOR_NOT_AVAILABLE}
        assert end_txn(wire, transactional_id, pid, epoch, commit=True) == E.COORDINATOR_NOT_AVAILABLE
        assert describe_transaction(wire, transactional_id) == ("Ongoing", {(topic, 0)})

        cluster.start_node(follower)
        until(lambda: isr_size(cluster) == 3,
              f"node {follower} is back in the ISR of __transaction_state-0", 90)
        until(lambda: end_txn(wire, transactional_id, pid, epoch, commit=True) == E.NONE,
              "the commit succeeds")
        until(lambda: describe_transaction(wire, transactional_id)[0] == "CompleteCommit",
              "the transaction is complete")
